"""The TF backend's interpreter context (`Ctx`: symbol sizes, rng seed, training flag, compute
dtype) and the dtype table its primitives cast with (`DTYPES`).

Its own module because two modules build on it and one of them calls the other: the primitive
table and its machine (`ops`), and the recurrence the machine runs (`scan`), which evaluates a
body graph in the same context. The mirror of `seqc.backends.jax.context` and
`seqc.backends.onnx.context`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf

from seqc.backends import interpret
from seqc.backends.dims import size

DTYPES = {
    "float32": tf.float32,
    "bfloat16": tf.bfloat16,
    "float16": tf.float16,
    "int32": tf.int32,
    "int64": tf.int64,
    "bool": tf.bool,
}


@dataclass
class Ctx(interpret.Ctx):
    """The interpreter's context, with TF's randomness and compute dtype.

    `rng` is a stateless TF seed (int32 or int64 tensor of shape [2]); each dropout folds a
    counter into it, so a traced `tf.function` draws fresh masks only when given a fresh seed.
    A dim is an int, or a scalar tensor when the input's shape is dynamic inside `tf.function`.
    """

    rng: tf.Tensor | None = None
    compute_dtype: tf.DType = tf.float32
    counter: int = 0
    portable: bool = False
    """Emit only what TFLite's builtin ops express (a scan collects its outputs by concat,
    not in a TensorArray whose element shape has an unknown batch); slower for training."""
    parts: dict[tuple[int, int], tuple[Any, dict[int, tf.Tensor]]] = field(default_factory=dict)
    """(graph, value id) -> the value and, by slice op, its parts, for the slices that
    partition one value (`seqc.backends.tf.ops.partition_slices`). The value is kept to tell a
    recurrence body's steps apart: each step evaluates the same graph on new values."""

    def next_key(self) -> tf.Tensor:
        assert self.rng is not None, "dropout in training needs an rng"
        self.counter += 1
        return tf.random.experimental.stateless_fold_in(self.rng, self.counter)

    def shape(self, shape: tuple, exact: bool = False) -> list[Any]:
        """As JAX's: a dim no input binds is -1, which a reshape infers, or with `exact`
        computed from the bound ones (a scalar tensor where they are)."""
        return [size(d, self.dims, exact) for d in shape]
