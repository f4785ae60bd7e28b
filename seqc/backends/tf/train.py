"""Training and evaluation steps of a lowered model on TensorFlow, each one `tf.function`.

The mirror of `seqc.backends.jax.train`: the same forward pass, loss, global-norm clipping (from
the norm it logs) and optax update equations, so that from the same params both backends take
the same steps. The state lives in `tf.Variable`s named by layer path: the params, the
optimizer's count and moments, and the step.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from seqc.backends.inputs import LABELS, input_fields
from seqc.backends.tf.interpret import run_graph
from seqc.backends.tf.loss import task_loss
from seqc.backends.tf.ops import Ctx
from seqc.backends.tf.optim import optimizer
from seqc.compiler.graph import Graph
from seqc.compiler.values import CallValue


class TfModel:
    """A task's model, loss and optimizer as TF variables and compiled steps.

    Dropout draws from a stateless seed: `seed` with the step folded in, so a run is
    reproducible (its masks differ from JAX's, another generator).
    """

    def __init__(
        self, graph: Graph, task: dict[str, Any], train: dict[str, Any], seed: int = 0
    ) -> None:
        self.graph = graph
        self.fields = input_fields(graph)
        self.loss: CallValue = task["loss"]
        self.train_config = train
        self.clip_norm = float(train.get("clip_norm", 0.0))
        self.compute_dtype = tf.bfloat16 if train["compute_dtype"] == "bfloat16" else tf.float32
        self.params: dict[str, tf.Variable] = {
            name: tf.Variable(
                tf.zeros([int(d) for d in p.type.shape], tf.float32), name=name, trainable=True
            )
            for name, p in graph.params.items()
        }
        self.opt = optimizer(train)
        self.opt.build(self.params)
        self.step = tf.Variable(0, dtype=tf.int32, trainable=False, name="step")
        self.seed = tf.Variable([seed + 1, 0], dtype=tf.int32, trainable=False, name="seed")
        self._train_step = tf.function(self._train_impl, reduce_retracing=True)
        self._eval_step = tf.function(self._eval_impl, reduce_retracing=True)
        self._logits = tf.function(self._logits_impl, reduce_retracing=True)

    # ---------------------------------------------------------------- state
    def init_from(self, params: dict[str, Any]) -> None:
        """Start from these param values (e.g. JAX's `init_params`), with a fresh optimizer."""
        missing = set(self.params) ^ set(params)
        if missing:
            raise ValueError(f"params differ from the graph's: {sorted(missing)}")
        for name, v in self.params.items():
            v.assign(np.asarray(params[name], np.float32))
        self.opt.reset()
        self.step.assign(0)

    def init(self, seed: int) -> None:
        """The same initial values as `JaxModel.init(seed)` (they come from JAX's generator)."""
        from seqc.backends.jax.init import init_params

        self.init_from({k: np.asarray(v) for k, v in init_params(self.graph, seed).items()})
        self.seed.assign([seed + 1, 0])

    def numpy_params(self) -> dict[str, np.ndarray]:
        return {name: v.numpy() for name, v in self.params.items()}

    def inputs(self, arrays: dict[str, Any]) -> dict[str, Any]:
        return {name: arrays[f] for name, f in self.fields.items()}

    def forward(self, arrays: dict, rng: tf.Tensor | None, training: bool) -> tf.Tensor:
        ctx = Ctx(rng=rng, training=training, compute_dtype=self.compute_dtype)
        return run_graph(self.graph, self.params, self.inputs(arrays), ctx)[0]

    # ---------------------------------------------------------------- steps
    def _train_impl(self, arrays: dict, task: str) -> dict:
        rng = tf.random.experimental.stateless_fold_in(self.seed, self.step)
        names = list(self.params)
        with tf.GradientTape() as tape:
            logits = self.forward(arrays, rng, training=True)
            labels, mask = LABELS[task]
            metrics = task_loss(self.loss, logits, arrays[labels], arrays[mask], accuracy=False)
        grads = tape.gradient(metrics["loss"], [self.params[n] for n in names])
        grads = [
            tf.zeros_like(self.params[n]) if g is None else tf.convert_to_tensor(g)
            for n, g in zip(names, grads, strict=True)
        ]
        norm = tf.sqrt(tf.add_n([tf.reduce_sum(tf.square(g)) for g in grads]))
        if self.clip_norm > 0.0:  # as optax.clip_by_global_norm, without a second norm pass
            scale = self.clip_norm / tf.maximum(norm, self.clip_norm)
            grads = [g * tf.cast(scale, g.dtype) for g in grads]
        self.opt.apply(dict(zip(names, grads, strict=True)), self.params)
        self.step.assign_add(1)
        return dict(metrics) | {"grad_norm": norm}

    def _eval_impl(self, arrays: dict, task: str) -> dict:
        logits = self.forward(arrays, None, training=False)
        labels, mask = LABELS[task]
        return task_loss(self.loss, logits, arrays[labels], arrays[mask])

    def _logits_impl(self, arrays: dict) -> tf.Tensor:
        return self.forward(arrays, None, training=False)

    def train_step(self, batch: Any) -> dict[str, tf.Tensor]:
        return self._train_step(self._arrays(batch), batch.task)

    def eval_step(self, batch: Any) -> dict[str, tf.Tensor]:
        return self._eval_step(self._arrays(batch), batch.task)

    def logits(self, arrays: dict[str, np.ndarray]) -> tf.Tensor:
        return self._logits({k: tf.convert_to_tensor(v) for k, v in arrays.items()})

    @staticmethod
    def _arrays(batch: Any) -> dict[str, tf.Tensor]:
        return {k: tf.convert_to_tensor(v) for k, v in batch.arrays.items()}
