"""The encoder and decoder-step graphs of a `StepProgram` as `tf.function`s (`StepFunctions`).

The mirror of `seqc.backends.jax.step`: decoding a model step by step with its caches on TF,
and a reference for the TF-based artifacts (SavedModel, TFLite) on the same graphs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from seqc.backends.tf.ops import Ctx, run_graph
from seqc.compiler.graph import Graph
from seqc.compiler.incremental import StepProgram


def _function(graph: Graph) -> Any:
    return tf.function(
        lambda p, feeds: run_graph(graph, p, feeds, Ctx(compute_dtype=tf.float32)),
        reduce_retracing=True,
    )


class TfStepFunctions:
    """`StepFunctions` (see `seqc.backends.api`) over the traced encoder and step graphs."""

    def __init__(self, program: StepProgram, params: dict[str, Any]) -> None:
        self.program = program
        self.params = {k: tf.convert_to_tensor(np.asarray(v)) for k, v in params.items()}
        self._encode = None if program.encoder is None else _function(program.encoder)
        self._step = _function(program.step)
        self.cache_names = [c.name for c in program.caches]

    @staticmethod
    def _feeds(feeds: dict[str, np.ndarray]) -> dict[str, tf.Tensor]:
        return {k: tf.convert_to_tensor(v) for k, v in feeds.items()}

    def encode(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._encode is None:
            return {}
        outs = self._encode(self.params, self._feeds(feeds))
        return {n: np.asarray(v) for n, v in zip(self.program.encoder_outputs, outs, strict=True)}

    def step(self, feeds: dict[str, np.ndarray]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        logits, *caches = self._step(self.params, self._feeds(feeds))
        return np.asarray(logits), {
            n: np.asarray(v) for n, v in zip(self.cache_names, caches, strict=True)
        }
