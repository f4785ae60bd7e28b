"""The encoder and decoder-step graphs of a `StepProgram`, jitted on JAX (`StepFunctions`).

Used to decode a trained JAX model incrementally and as the reference the exported artifacts
are checked against: same graphs, same weights, another runtime.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from seqc.backends.jax.ops import Ctx, run_graph
from seqc.compiler.incremental import StepProgram


def _ctx() -> Ctx:
    return Ctx(rng=None, training=False, compute_dtype=jnp.float32)


class JaxStepFunctions:
    """`StepFunctions` (see `seqc.backends.api`) over the jitted encoder and step graphs."""

    def __init__(self, program: StepProgram, params: dict[str, Any]) -> None:
        self.program = program
        self.params = {k: jnp.asarray(v) for k, v in params.items()}
        encoder, step = program.encoder, program.step
        self._encode = (
            None
            if encoder is None
            else jax.jit(lambda p, feeds: run_graph(encoder, p, feeds, _ctx()))
        )
        self._step = jax.jit(lambda p, feeds: run_graph(step, p, feeds, _ctx()))
        self.cache_names = [c.name for c in program.caches]

    def encode(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._encode is None:
            return {}
        outs = self._encode(self.params, feeds)
        return {n: np.asarray(v) for n, v in zip(self.program.encoder_outputs, outs, strict=True)}

    def step(self, feeds: dict[str, np.ndarray]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        logits, *caches = self._step(self.params, feeds)
        return np.asarray(logits), {
            n: np.asarray(v) for n, v in zip(self.cache_names, caches, strict=True)
        }
