"""Training and evaluation steps of a lowered model on TensorFlow, each one `tf.function`.

The mirror of `seqc.backends.jax.train`: the same forward pass, loss, global-norm clipping (from
the norm it logs) and optax update equations, so that from the same params both backends take
the same steps. The state lives in `tf.Variable`s named by layer path: the params, the
optimizer's count and moments, and the step.
"""

from __future__ import annotations

import functools
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

    The calls mirror `JaxModel`'s so that one training loop drives both: `init` returns the
    state (here a dict of the variables themselves, which the steps update in place),
    `train_step(state, batch)` returns it with the metrics, and `eval_step` and `logits` take
    the params (a dict of variables or arrays by layer path).

    Dropout draws from a stateless seed: `seed` with the step folded in, so a run is
    reproducible (its masks differ from JAX's, another generator). `jit_compile` compiles the
    steps with XLA; `placement` (op id to TF device name) pins each op with `tf.device`.
    """

    backend = "tf"

    def __init__(
        self,
        graph: Graph,
        task: dict[str, Any],
        train: dict[str, Any],
        seed: int = 0,
        *,
        jit_compile: bool = False,
        placement: dict[int, str] | None = None,
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
        if placement:
            from seqc.backends.tf.placed import check_devices

            check_devices(placement)  # now, not at the first trace
        self.placement = placement
        fn = functools.partial(tf.function, reduce_retracing=True, jit_compile=jit_compile)
        self._train_step = fn(self._train_impl)
        self._eval_step = fn(self._eval_impl)
        self._logits = fn(self._logits_impl)

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

    def init(self, seed: int) -> dict[str, Any]:
        """The same initial values as `JaxModel.init(seed)` (they come from JAX's generator)."""
        from seqc.backends.jax.init import init_params

        self.init_from({k: np.asarray(v) for k, v in init_params(self.graph, seed).items()})
        self.seed.assign([seed + 1, 0])
        return self.state

    @property
    def state(self) -> dict[str, Any]:
        """Everything a resumed run needs, as variables: what a checkpoint saves."""
        return {"params": self.params, "step": self.step, "seed": self.seed, "opt": self.opt}

    def numpy_params(self) -> dict[str, np.ndarray]:
        return {name: v.numpy() for name, v in self.params.items()}

    def inputs(self, arrays: dict[str, Any]) -> dict[str, Any]:
        return {name: arrays[f] for name, f in self.fields.items()}

    def forward(
        self, arrays: dict, rng: tf.Tensor | None, training: bool, params: dict | None = None
    ) -> tf.Tensor:
        ctx = Ctx(rng=rng, training=training, compute_dtype=self.compute_dtype)
        params = self.params if params is None else params
        return run_graph(self.graph, params, self.inputs(arrays), ctx, self.placement)[0]

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

    def _eval_impl(self, params: dict, arrays: dict, task: str) -> dict:
        logits = self.forward(arrays, None, training=False, params=params)
        labels, mask = LABELS[task]
        return task_loss(self.loss, logits, arrays[labels], arrays[mask])

    def _logits_impl(self, params: dict, arrays: dict) -> tf.Tensor:
        return self.forward(arrays, None, training=False, params=params)

    def train_step(self, state: dict[str, Any], batch: Any) -> tuple[dict, dict[str, tf.Tensor]]:
        """One update of the variables in `state` (this model's own: it updates in place)."""
        if state["params"] is not self.params:
            raise ValueError("a TfModel steps only its own variables (pass model.state)")
        return state, self._train_step(self._arrays(batch), batch.task)

    def eval_step(self, params: dict[str, Any], batch: Any) -> dict[str, tf.Tensor]:
        return self._eval_step(params, self._arrays(batch), batch.task)

    def logits(self, params: dict[str, Any], arrays: dict[str, np.ndarray]) -> tf.Tensor:
        return self._logits(params, {k: tf.convert_to_tensor(v) for k, v in arrays.items()})

    @staticmethod
    def _arrays(batch: Any) -> dict[str, tf.Tensor]:
        return {k: tf.convert_to_tensor(v) for k, v in batch.arrays.items()}
