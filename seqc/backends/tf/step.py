"""The encoder and decoder-step graphs of a `StepProgram` as `tf.function`s (`StepFunctions`).

The mirror of `seqc.backends.jax.step`: decoding a model step by step with its caches on TF,
and a reference for the TF-based artifacts (SavedModel, TFLite) on the same graphs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from seqc.backends.tf.context import Ctx
from seqc.backends.tf.ops import run_graph
from seqc.compiler.graph import Graph
from seqc.compiler.incremental import StepProgram
from seqc.compiler.step_signature import bucketed


def _function(graph: Graph, params: dict[str, tf.Variable], jit: bool) -> Any:
    """The graph as a `tf.function` of its feeds, the params captured as variables: passed as
    arguments, a few dozen tensors would be flattened and checked at every call, which costs
    more than a decoder step of a small model. `jit`: compiled whole by XLA, as the decoder step
    is (one position, fixed shapes per bucket: 2.5x faster than TF's executor running its ops
    one by one); the encoder runs once per source and may hold a recurrence whose outputs grow
    in its loop, which XLA refuses."""
    return tf.function(
        lambda feeds: run_graph(graph, params, feeds, Ctx(compute_dtype=tf.float32)),
        autograph=False,
        reduce_retracing=True,
        jit_compile=jit,
    )


class TfStepFunctions:
    """`StepFunctions` (see `seqc.backends.api`) over the traced encoder and step graphs."""

    batch_sources = 16
    """Sources `StepDecoder.generate_many` decodes together here (`seqc.run.decoding.steps`)."""

    def __init__(self, program: StepProgram, params: dict[str, Any]) -> None:
        self.program = program
        self.params = {k: tf.Variable(np.asarray(v), trainable=False) for k, v in params.items()}
        encoder = program.encoder
        self._encode = None if encoder is None else _function(encoder, self.params, jit=False)
        self._step = _function(program.step, self.params, jit=True)
        self.cache_names = [c.name for c in program.caches]

    @staticmethod
    def _feeds(feeds: dict[str, np.ndarray]) -> dict[str, tf.Tensor]:
        return {k: tf.convert_to_tensor(v) for k, v in feeds.items()}

    def encode(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._encode is None:
            return {}
        outs = self._encode(self._feeds(bucketed(feeds)))
        return {n: np.asarray(v) for n, v in zip(self.program.encoder_outputs, outs, strict=True)}

    def step(self, feeds: dict[str, np.ndarray]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        logits, *caches = self._step(self._feeds(feeds))
        return np.asarray(logits), {
            n: np.asarray(v) for n, v in zip(self.cache_names, caches, strict=True)
        }
