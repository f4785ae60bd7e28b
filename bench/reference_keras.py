"""A hand-written Transformer LM in Keras 3 on TensorFlow: the TF baseline of `train_throughput.py`.

The same function as `reference_lm.py` and the `.seq` model the benchmark compiles, written the
way a Keras user would: `Embedding` scaled by sqrt(d), sinusoidal positions, `layers` pre-norm
causal blocks (`LayerNormalization`, `MultiHeadAttention` with `use_causal_mask`, a `Dense` GELU
MLP with the exact erf form, each with a residual), a final `LayerNormalization`, logits from the
tied embedding table plus a bias; `SparseCategoricalCrossentropy` from logits averaged over the
masked tokens (the mask as `sample_weight`); `Adam` with `global_clipnorm`; trained by
`model.compile(jit_compile=...)` and `train_on_batch`, Keras' own compiled `tf.function` step.

Keras' `MultiHeadAttention` keeps the q/k/v projections as [d, heads, head_dim] kernels with
[heads, head_dim] biases and the output one as [heads, head_dim, d]: the layout of seqc's
[d, heads * head_dim] matrices (the heads split off the last axis), so `load_params` copies
seqc's params by layer path with reshapes only. Keras' Adam differs from optax's in where epsilon
sits (and its glorot fans for the 3-d attention kernels differ), so the two train alike but take
slightly different steps; the benchmark compares functions on shared params, and speed.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

os.environ["KERAS_BACKEND"] = "tensorflow"  # read once, when keras is first imported

import keras
import numpy as np
import tensorflow as tf
from keras import ops
from reference_lm import Config

if keras.backend.backend() != "tensorflow":
    raise RuntimeError(
        f"keras was imported with the {keras.backend.backend()} backend before this module; "
        "import reference_keras first, or set KERAS_BACKEND=tensorflow"
    )

ADAM_EPS = 1e-8
"""optax's (and seqc's) default; Keras' own default is 1e-7."""


def positions(t: int, d: int) -> np.ndarray:
    """[t, d] float32: seqc's SinusoidalPosition table (timescales 1 to 1e4, in float64)."""
    half = d // 2
    inv = np.exp(-math.log(10000.0) / max(half - 1, 1) * np.arange(half, dtype=np.float64))
    angles = np.arange(t, dtype=np.float64)[:, None] * inv[None, :]
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1).astype(np.float32)


class CausalBlock(keras.layers.Layer):
    """Pre-norm: x + attn(norm1(x)), then x + w2(gelu(w1(norm2(x))))."""

    def __init__(self, cfg: Config, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.norm1 = keras.layers.LayerNormalization(epsilon=cfg.eps, name="norm1")
        self.attn = keras.layers.MultiHeadAttention(cfg.heads, cfg.d // cfg.heads, name="attn")
        self.norm2 = keras.layers.LayerNormalization(epsilon=cfg.eps, name="norm2")
        self.w1 = keras.layers.Dense(cfg.ff, activation="gelu", name="w1")  # exact erf form
        self.w2 = keras.layers.Dense(cfg.d, name="w2")

    def call(self, x: Any) -> Any:
        h = self.norm1(x)
        x = x + self.attn(h, h, use_causal_mask=True)
        return x + self.w2(self.w1(self.norm2(x)))


class KerasLM(keras.Model):
    """ids int32[B, T] -> logits float32[B, T, vocab]. `build_for(length)` creates the weights;
    `compile_for_training(jit_compile)` attaches the loss and optimizer."""

    def __init__(self, cfg: Config, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cfg = cfg
        init = keras.initializers.RandomNormal(stddev=1.0 / math.sqrt(cfg.d))
        self.embed = keras.layers.Embedding(
            cfg.vocab, cfg.d, embeddings_initializer=init, name="embed"
        )
        self.blocks = [CausalBlock(cfg, name=f"blocks_{i}") for i in range(cfg.layers)]
        self.norm = keras.layers.LayerNormalization(epsilon=cfg.eps, name="norm")
        self.out_bias = self.add_weight(shape=(cfg.vocab,), initializer="zeros", name="out_bias")

    def call(self, ids: Any) -> Any:
        x = self.embed(ids) * math.sqrt(self.cfg.d)
        x = x + positions(ids.shape[1], self.cfg.d)
        for block in self.blocks:
            x = block(x)
        x = self.norm(x)
        return ops.matmul(x, ops.transpose(self.embed.embeddings)) + self.out_bias

    def build_for(self, length: int) -> None:
        self(np.zeros((1, length), np.int32))

    def compile_for_training(self, jit_compile: bool) -> None:
        self.compile(
            optimizer=keras.optimizers.Adam(
                self.cfg.lr, epsilon=ADAM_EPS, global_clipnorm=self.cfg.clip_norm
            ),
            loss=keras.losses.SparseCategoricalCrossentropy(
                from_logits=True, reduction="mean_with_sample_weight"
            ),
            jit_compile=jit_compile,
        )

    def train_batch(self, batch: Mapping[str, Any]) -> float:
        """One update on a `keras_batch` (inputs, targets, weights); the loss before it."""
        return float(
            self.train_on_batch(batch["inputs"], batch["targets"], sample_weight=batch["weights"])
        )

    def loss_on(self, batch: Mapping[str, Any]) -> float:
        """The loss on a `keras_batch`, without updating."""
        return float(
            self.test_on_batch(batch["inputs"], batch["targets"], sample_weight=batch["weights"])
        )


def keras_batch(arrays: Mapping[str, np.ndarray]) -> dict[str, tf.Tensor]:
    """The benchmark's {inputs, targets, mask} as TF tensors, with the mask as float weights."""
    out = {k: tf.constant(np.asarray(arrays[k])) for k in ("inputs", "targets")}
    out["weights"] = tf.constant(np.asarray(arrays["mask"], np.float32))
    return out


def variables_by_path(model: KerasLM) -> dict[str, keras.Variable]:
    """The model's weights under seqc's layer paths (`blocks.0.attn.q.w`, `out.b`, ...)."""
    out = {"embed.table": model.embed.embeddings, "out.b": model.out_bias}

    def norm(path: str, layer: keras.layers.LayerNormalization) -> None:
        out[f"{path}.scale"], out[f"{path}.bias"] = layer.gamma, layer.beta

    def dense(path: str, layer: Any) -> None:
        out[f"{path}.w"], out[f"{path}.b"] = layer.kernel, layer.bias

    norm("norm", model.norm)
    for i, block in enumerate(model.blocks):
        p = f"blocks.{i}"
        norm(f"{p}.norm1", block.norm1)
        norm(f"{p}.norm2", block.norm2)
        dense(f"{p}.attn.q", block.attn.query_dense)
        dense(f"{p}.attn.k", block.attn.key_dense)
        dense(f"{p}.attn.v", block.attn.value_dense)
        dense(f"{p}.attn.o", block.attn.output_dense)
        dense(f"{p}.mlp.w1", block.w1)
        dense(f"{p}.mlp.w2", block.w2)
    return out


def load_params(model: KerasLM, params: Mapping[str, Any]) -> None:
    """Assign params named by seqc's layer paths (arrays of seqc's shapes) to the built model."""
    variables = variables_by_path(model)
    if set(variables) != set(params):
        diff = sorted(set(variables) ^ set(params))
        raise ValueError(f"params differ from the Keras model's by name: {diff}")
    for name, v in variables.items():
        value = np.asarray(params[name], np.float32)
        if value.size != math.prod(v.shape):
            raise ValueError(f"`{name}`: {value.shape} does not fit the Keras weight {v.shape}")
        v.assign(value.reshape(v.shape))
