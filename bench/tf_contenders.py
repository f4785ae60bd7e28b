"""The benchmark's TensorFlow pair: the seqc model trained by `TfModel`, and `reference_keras`.

Kept apart from `train_throughput.py` so that a JAX-only run imports neither TensorFlow nor
Keras. Both contenders of a pair share one `jit_compile` setting, and the same synthetic batches
(as TF tensors, made once) as the JAX pair. `setup_tf` checks before any timing that they compute
the same function: Keras' loss on seqc's initial params (copied by layer path) must equal
seqc-TF's own, and each model's initial loss (own init) must agree within a few percent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf
from reference_keras import KerasLM, keras_batch, load_params
from reference_lm import Config

from seqc.backends.tf.train import TfModel
from seqc.compiler.compile import CompiledTask
from seqc.compiler.config import TrainConfig


@dataclass
class TfBatch:
    """What `TfModel.train_step` reads: the arrays by field name."""

    arrays: dict[str, tf.Tensor]


@dataclass
class TfPair:
    """seqc on TF and the Keras model, their batches, ready to step."""

    cfg: Config
    jit_compile: bool
    seqc: TfModel
    keras: KerasLM
    seqc_batches: list[TfBatch]
    keras_batches: list[dict[str, tf.Tensor]]
    losses: dict[str, float]


def setup_tf(
    cfg: Config,
    task: CompiledTask,
    train: TrainConfig,
    batches: list[dict[str, np.ndarray]],
    jit_compile: bool,
    seed: int = 0,
    loss_rtol: float = 0.05,
    same_params_rtol: float = 1e-4,
) -> TfPair:
    """Build both models, initialise each its own way and check they compute the same function.

    `task` is the spec's compiled task and `train` its `train` block."""
    seqc = TfModel(task, train, seed=seed, jit_compile=jit_compile)
    seqc.init(seed)
    seqc_batches = [TfBatch({k: tf.constant(v) for k, v in b.items()}) for b in batches]
    keras_batches = [keras_batch(b) for b in batches]
    length = batches[0]["inputs"].shape[1]
    keras = KerasLM(cfg)
    keras.build_for(length)
    keras.compile_for_training(jit_compile)

    first = keras_batches[0]
    seqc_loss = float(seqc.eval_step(seqc.params, seqc_batches[0])["loss"])
    keras_loss = keras.loss_on(first)
    own = keras.get_weights()
    load_params(keras, seqc.numpy_params())
    same = keras.loss_on(first)
    keras.set_weights(own)  # each trains from its own init, as the JAX pair does
    losses = {"seqc_tf": seqc_loss, "keras": keras_loss, "keras_on_seqc_params": same}
    if not math.isclose(same, seqc_loss, rel_tol=same_params_rtol):
        raise AssertionError(
            f"different functions: seqc-TF loss {seqc_loss:.6f}, Keras loss on the same params "
            f"{same:.6f}"
        )
    if not math.isclose(seqc_loss, keras_loss, rel_tol=loss_rtol):
        raise AssertionError(
            f"initial losses disagree: seqc-TF {seqc_loss:.4f}, Keras {keras_loss:.4f}"
        )
    return TfPair(cfg, jit_compile, seqc, keras, seqc_batches, keras_batches, losses)


def seqc_tf_steps(pair: TfPair, n: int) -> float:
    """Run n seqc-TF training steps (variables update in place); the loss of the last."""
    metrics: dict[str, Any] = {}
    for i in range(n):
        _, metrics = pair.seqc.train_step(
            pair.seqc.state, pair.seqc_batches[i % len(pair.seqc_batches)], pair.cfg.lr
        )
    return float(metrics["loss"]) if metrics else float("nan")  # waits for the last step


def keras_steps(pair: TfPair, n: int) -> float:
    """Run n Keras `train_on_batch` steps; the loss of the last."""
    loss = float("nan")
    for i in range(n):
        loss = pair.keras.train_batch(pair.keras_batches[i % len(pair.keras_batches)])
    return loss


def seqc_tf_loss(pair: TfPair, i: int = 0) -> float:
    return float(pair.seqc.eval_step(pair.seqc.params, pair.seqc_batches[i])["loss"])


def keras_loss(pair: TfPair, i: int = 0) -> float:
    return pair.keras.loss_on(pair.keras_batches[i])
