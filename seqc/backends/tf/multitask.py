"""The tasks of a multi-task experiment on TensorFlow over one set of variables
(`api.MultiTaskModel`).

The mirror of `seqc.backends.jax.multitask`: one `tf.Variable` per param of the whole model, and
a `TfModel` per task built over those variables (`variables=`), so a shared layer is one variable
that every task's step reads and assigns. Stepping one task, that task's model takes its own
step (its own optimizer over the params it reads, its own step count); stepping the weighted sum,
one `tf.function` runs every task on its batch and one optimizer updates every variable.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from seqc.backends.tf.optim import optimizer
from seqc.backends.tf.train import TfModel, new_variables
from seqc.compiler.config import TrainConfig
from seqc.compiler.init import init_params
from seqc.compiler.multitask import MultiTask


class TfMultiTaskModel:
    backend = "tf"
    strategy = "single"

    def __init__(
        self,
        multi: MultiTask,
        train: TrainConfig,
        weights: Mapping[str, float],
        seed: int = 0,
        *,
        jit_compile: bool = False,
    ) -> None:
        self.multi = multi
        self.params: dict[str, tf.Variable] = new_variables(multi.params)
        self.models = {
            t: TfModel(task, train, seed, jit_compile=jit_compile, variables=self.params)
            for t, task in multi.tasks.items()
        }
        self.names = {t: multi.reads(t) for t in multi.tasks}
        self.weights = {t: float(weights[t]) for t in multi.tasks}
        self.sum = train.mix_by == "sum"
        self.clip_norm = train.clip_norm
        self.step = tf.Variable(0, dtype=tf.int32, trainable=False, name="step")
        self.seed = tf.Variable([seed + 1, 0], dtype=tf.int32, trainable=False, name="seed")
        self.opt: Any = None
        if self.sum:
            self.opt = optimizer(train)
            self.opt.build(self.params)
            fn = functools.partial(
                tf.function, autograph=False, reduce_retracing=True, jit_compile=jit_compile
            )
            self._sum_step = fn(self._sum_impl)

    # ---------------------------------------------------------------- state
    def init(self, seed: int, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
        values: dict[str, np.ndarray] = {}
        for task in self.multi.tasks.values():
            values.update(init_params(task.graph, seed))
        values |= dict(given or {})
        for t, model in self.models.items():
            model.init_from(self.task_params(t, values))
            model.seed.assign([seed + 1, 0])
        if self.opt is not None:
            self.opt.reset()
        self.step.assign(0)
        self.seed.assign([seed + 1, 0])
        return self.state

    def with_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return self.init(0, params)

    @property
    def state(self) -> dict[str, Any]:
        opt = self.opt if self.sum else {t: m.opt for t, m in self.models.items()}
        state = {"params": self.params, "step": self.step, "seed": self.seed, "opt": opt}
        if not self.sum:
            state["task_steps"] = {t: m.step for t, m in self.models.items()}
        return state

    def task_params(self, task: str, params: Mapping[str, Any]) -> dict[str, Any]:
        return {k: params[k] for k in self.names[task]}

    def view(self, task: str) -> TfModel:
        return self.models[task]

    # ---------------------------------------------------------------- steps
    def train_step(
        self, state: dict[str, Any], batches: Mapping[str, Any], lr: Mapping[str, float]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        if state["params"] is not self.params:
            raise ValueError("a TfMultiTaskModel steps only its own variables (pass model.state)")
        if self.sum:
            arrays = {t: TfModel.batch_tensors(b) for t, b in batches.items()}
            rate = tf.constant(lr[next(iter(lr))], tf.float32)
            return state, self._sum_step(arrays, rate)
        ((task, batch),) = batches.items()
        model = self.models[task]
        metrics = model.compiled_step(model.batch_tensors(batch), tf.constant(lr[task], tf.float32))
        self.step.assign_add(1)
        return state, {task: metrics}

    def _sum_impl(self, arrays: dict, lr: tf.Tensor) -> dict:
        rng = tf.random.experimental.stateless_fold_in(self.seed, self.step)
        names = list(self.params)
        with tf.GradientTape() as tape:
            total = tf.zeros((), tf.float32)
            out = {}
            for i, (t, model) in enumerate(self.models.items()):
                key = tf.random.experimental.stateless_fold_in(rng, i)
                outputs = model.forward(arrays[t], key, training=True)
                metrics = model.train_criterion(outputs, arrays[t])
                total += self.weights[t] * metrics["loss"]
                out[t] = metrics
        grads = tape.gradient(total, [self.params[n] for n in names])
        grads = [
            tf.zeros_like(self.params[n]) if g is None else tf.convert_to_tensor(g)
            for n, g in zip(names, grads, strict=True)
        ]
        norm = tf.sqrt(tf.add_n([tf.reduce_sum(tf.square(g)) for g in grads]))
        if self.clip_norm > 0.0:
            scale = self.clip_norm / tf.maximum(norm, self.clip_norm)
            grads = [g * tf.cast(scale, g.dtype) for g in grads]
        self.opt.apply(dict(zip(names, grads, strict=True)), self.params, lr)
        self.step.assign_add(1)
        return {t: dict(m) | {"grad_norm": norm} for t, m in out.items()}
