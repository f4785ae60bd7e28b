"""The encoder and decoder-step graphs of a `StepProgram`, jitted on JAX (`StepFunctions`).

Used to decode a trained JAX model incrementally and as the reference the exported artifacts
are checked against: same graphs, same weights, another runtime.
"""

from __future__ import annotations

import copy
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from seqc.backends.jax.context import Ctx
from seqc.backends.jax.ops import run_graph
from seqc.compiler.incremental import StepProgram
from seqc.compiler.step_signature import bucketed


def _ctx() -> Ctx:
    return Ctx(rng=None, training=False, compute_dtype=jnp.float32)


class JaxStepFunctions:
    """`StepFunctions` (see `seqc.backends.api`) over the jitted encoder and step graphs."""

    batch_sources = 16
    """Sources `StepDecoder.generate_many` decodes together here (`seqc.run.decoding.steps`)."""

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

    def with_params(self, params: dict[str, Any]) -> JaxStepFunctions:
        """The same jitted functions (compiled already for the shapes seen) over other weights
        of the same shapes."""
        other = copy.copy(self)
        other.params = {k: jnp.asarray(v) for k, v in params.items()}
        return other

    def encode(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._encode is None:
            return {}
        outs = self._encode(self.params, bucketed(feeds))
        return {n: np.asarray(v) for n, v in zip(self.program.encoder_outputs, outs, strict=True)}

    def step(self, feeds: dict[str, Any]) -> tuple[np.ndarray, dict[str, Any]]:
        """Logits on the host; the caches stay JAX arrays, to be fed back as they are."""
        logits, *caches = self._step(self.params, feeds)
        return np.asarray(logits), dict(zip(self.cache_names, caches, strict=True))

    @staticmethod
    def hold(arrays: dict[str, np.ndarray]) -> dict[str, Any]:
        """Arrays the step reads at every position, moved to the device once."""
        return {k: jax.device_put(v) for k, v in arrays.items()}

    def reorder(self, caches: dict[str, Any], parents: np.ndarray, axes: dict[str, int]) -> dict:
        """The caches' rows in the order `parents` (surviving beams), on the device."""
        order = tuple(sorted(caches))
        taken = _take(
            tuple(caches[n] for n in order),
            jnp.asarray(parents, jnp.int32),
            tuple(axes[n] for n in order),
        )
        return dict(zip(order, taken, strict=True))


@partial(jax.jit, static_argnums=2)
def _take(caches: tuple[Any, ...], parents: Any, axes: tuple[int, ...]) -> tuple[Any, ...]:
    return tuple(jnp.take(c, parents, axis=a) for c, a in zip(caches, axes, strict=True))
