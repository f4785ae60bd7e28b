"""Training and evaluation steps of a compiled task on TensorFlow, each one `tf.function`.

The mirror of `seqc.backends.jax.train`: the same forward and criterion graphs through the
shared interpreter, global-norm clipping (from the norm it logs) and optax's update equations
(`seqc.backends.tf.optim`), so that from the same params both backends take the same steps. The
state lives in `tf.Variable`s named by layer path: the params, the optimizer's count and moments,
and the step.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from seqc.backends.tf import lazy_rows
from seqc.backends.tf.context import Ctx
from seqc.backends.tf.decode import TfDecoder
from seqc.backends.tf.ops import run_graph
from seqc.backends.tf.optim import optimizer
from seqc.compiler.compile import CompiledTask
from seqc.compiler.config import TrainConfig
from seqc.compiler.graph import Graph, Param
from seqc.compiler.init import init_params
from seqc.compiler.lazy_rows import lazy_tables
from seqc.compiler.lower.criterion import named


def new_variables(params: Mapping[str, Param]) -> dict[str, tf.Variable]:
    """A zero `tf.Variable` per param, named by its layer path (values come with `init`)."""
    return {
        name: tf.Variable(
            tf.zeros([int(d) for d in p.type.shape], tf.float32), name=name, trainable=True
        )
        for name, p in params.items()
    }


class TfModel:
    """A task's model, criterion and optimizer as TF variables and compiled steps.

    The calls mirror `JaxModel`'s so that one training loop drives both: `init` returns the
    state (here a dict of the variables themselves, which the steps update in place),
    `train_step(state, batch, lr)` returns it with the metrics, and `eval_step` and `logits`
    take the params (a dict of variables or arrays by layer path).

    Dropout draws from a stateless seed: `seed` with the step folded in, so a run is
    reproducible (its masks differ from JAX's, another generator). `jit_compile` compiles the
    steps with XLA; `placement` (op id of the forward graph -> TF device name) pins each op with
    `tf.device`.

    A step is two halves, `gradients` and `update`: a data-parallel model
    (`seqc.backends.tf.mirrored`) runs the first on each replica and the second once.
    """

    backend = "tf"
    strategy = "single"

    def __init__(
        self,
        task: CompiledTask,
        train: TrainConfig,
        seed: int = 0,
        *,
        jit_compile: bool = False,
        placement: Mapping[int, str] | None = None,
        variables: Mapping[str, tf.Variable] | None = None,
    ) -> None:
        """`variables`: params by name that this model reads and updates but does not own
        (a multi-task model's, shared between its tasks' models, `seqc.backends.tf.multitask`)."""
        self.task = task
        self.graph = graph = task.graph
        self.train_config = train
        self.clip_norm = train.clip_norm
        self.compute_dtype = tf.bfloat16 if train.compute_dtype == "bfloat16" else tf.float32
        if placement:
            from seqc.backends.tf.devices import check

            check(placement.values())  # now, not at the first trace
        self.placement = dict(placement) if placement else None
        given = variables or {}
        made = new_variables({n: p for n, p in graph.params.items() if n not in given})
        self.params: dict[str, tf.Variable] = {
            n: given[n] if n in given else made[n] for n in graph.params
        }
        self.opt = optimizer(train)
        self.lazy = lazy_tables([task.training_graph, task.train_criterion], train.optimizer)
        """Params updated by rows, `adam(lazy_rows = true)` (`seqc.backends.tf.lazy_rows`)."""
        self.opt.build(self.params)
        self.step = tf.Variable(0, dtype=tf.int32, trainable=False, name="step")
        self.seed = tf.Variable([seed + 1, 0], dtype=tf.int32, trainable=False, name="seed")
        fn = functools.partial(
            tf.function, autograph=False, reduce_retracing=True, jit_compile=jit_compile
        )
        self.compiled_step = fn(self._train_impl)
        self._eval_step = fn(self._eval_impl)
        self._logits = fn(self._logits_impl)

    # ---------------------------------------------------------------- state
    def init_from(self, params: Mapping[str, Any]) -> None:
        """Start from these param values, with a fresh optimizer."""
        missing = set(self.params) ^ set(params)
        if missing:
            raise ValueError(f"params differ from the graph's: {sorted(missing)}")
        for name, v in self.params.items():
            v.assign(np.asarray(params[name], np.float32))
        self.opt.reset()
        self.step.assign(0)

    def init(self, seed: int, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The same initial values as `JaxModel.init(seed)` (`seqc.compiler.init`)."""
        self.init_from(init_params(self.graph, seed) | dict(given or {}))
        self.seed.assign([seed + 1, 0])
        return self.state

    def with_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        self.init_from(params)
        return self.state

    @property
    def state(self) -> dict[str, Any]:
        """Everything a resumed run needs, as variables: what a checkpoint saves."""
        return {"params": self.params, "step": self.step, "seed": self.seed, "opt": self.opt}

    def numpy_params(self) -> dict[str, np.ndarray]:
        return {name: v.numpy() for name, v in self.params.items()}

    def forward(
        self, arrays: Mapping, rng: tf.Tensor | None, training: bool, params: Mapping | None = None
    ) -> tf.Tensor:
        ctx = Ctx(rng=rng, training=training, compute_dtype=self.compute_dtype)
        params = self.params if params is None else params
        graph = self.task.training_graph if training else self.graph
        outputs = run_graph(graph, params, self.task.inputs(arrays), ctx, self.placement)
        return self.task.model_output(outputs)

    def criterion(self, graph: Graph, logits: tf.Tensor, arrays: Mapping) -> dict:
        """The criterion graph's outputs by name (in float32 whatever the compute dtype)."""
        outs = run_graph(graph, {}, self.task.criterion_inputs(logits, arrays), Ctx())
        return named(outs)

    def train_criterion(
        self, outputs: tf.Tensor, arrays: Mapping, params: Mapping | None = None
    ) -> dict:
        """The training criterion on the training graph's output (a sampled one reads the
        output layer's params)."""
        params = self.params if params is None else params
        inputs = self.task.train_criterion_inputs(outputs, arrays)
        return named(
            run_graph(self.task.train_criterion, params, inputs, Ctx()), self.task.train_criterion
        )

    # ---------------------------------------------------------------- steps
    def _train_impl(self, arrays: dict, lr: tf.Tensor) -> dict:
        rng = tf.random.experimental.stateless_fold_in(self.seed, self.step)
        if self.lazy:
            return self._lazy_step(arrays, rng, lr)
        metrics, grads = self.gradients(arrays, rng)
        norm = self.update(grads, lr)
        return dict(metrics) | {"grad_norm": norm}

    def gradients(
        self, arrays: Mapping, rng: tf.Tensor, weight: tf.Tensor | None = None
    ) -> tuple[dict, list[tf.Tensor]]:
        """The criterion's outputs on these rows and the gradient of its loss (times `weight`:
        a replica's share of a global batch) for each param, in `self.params` order."""
        names = list(self.params)
        with tf.GradientTape() as tape:
            outputs = self.forward(arrays, rng, training=True)
            metrics = self.train_criterion(outputs, arrays)
            loss = metrics["loss"] if weight is None else metrics["loss"] * weight
        grads = tape.gradient(loss, [self.params[n] for n in names])
        grads = [
            tf.zeros_like(self.params[n]) if g is None else tf.convert_to_tensor(g)
            for n, g in zip(names, grads, strict=True)
        ]
        return metrics, grads

    def update(self, grads: list[tf.Tensor], lr: tf.Tensor) -> tf.Tensor:
        """Clip by the global norm, step the optimizer and count the step; returns the norm."""
        norm = tf.sqrt(tf.add_n([tf.reduce_sum(tf.square(g)) for g in grads]))
        if self.clip_norm > 0.0:  # as optax.clip_by_global_norm, without a second norm pass
            scale = self.clip_norm / tf.maximum(norm, self.clip_norm)
            grads = [g * tf.cast(scale, g.dtype) for g in grads]
        self.opt.apply(dict(zip(self.params, grads, strict=True)), self.params, lr)
        self.step.assign_add(1)
        return norm

    def _lazy_step(self, arrays: Mapping, rng: tf.Tensor, lr: tf.Tensor) -> dict:
        """The step of `adam(lazy_rows = true)`: the same loss and clipping, the gradient of
        each row-sparse table as its gathered rows (`seqc.backends.tf.lazy_rows`)."""
        dense = [n for n in self.params if n not in self.lazy]
        with tf.GradientTape() as tape:
            params, gathers = lazy_rows.tables(self.params, self.lazy, tape)
            outputs = self.forward(arrays, rng, training=True, params=params)
            metrics = self.train_criterion(outputs, arrays, params)
        deltas = [delta for _, _, delta in gathers.record]
        grads = tape.gradient(metrics["loss"], [self.params[n] for n in dense] + deltas)
        by_name = {
            n: tf.zeros_like(self.params[n]) if g is None else tf.convert_to_tensor(g)
            for n, g in zip(dense, grads[: len(dense)], strict=True)
        }
        rows = lazy_rows.rows(gathers, grads[len(dense) :], self.lazy)
        squares = [tf.reduce_sum(tf.square(g)) for g in [*by_name.values()]]
        squares += [tf.reduce_sum(tf.square(g)) for _, g in rows.values()]
        norm = tf.sqrt(tf.add_n(squares))
        if self.clip_norm > 0.0:
            scale = self.clip_norm / tf.maximum(norm, self.clip_norm)
            by_name = {n: g * tf.cast(scale, g.dtype) for n, g in by_name.items()}
            rows = {n: (ids, g * tf.cast(scale, g.dtype)) for n, (ids, g) in rows.items()}
        axes = {n: spec.axis for n, spec in self.lazy.items()}
        self.opt.apply(by_name, self.params, lr, rows, axes)
        self.step.assign_add(1)
        return dict(metrics) | {"grad_norm": norm}

    def _eval_impl(self, params: dict, arrays: dict) -> dict:
        logits = self.forward(arrays, None, training=False, params=params)
        return self.criterion(self.task.eval_criterion, logits, arrays)

    def _logits_impl(self, params: dict, arrays: dict) -> tf.Tensor:
        return self.forward(arrays, None, training=False, params=params)

    def train_step(
        self, state: dict[str, Any], batch: Any, lr: float
    ) -> tuple[dict, dict[str, tf.Tensor]]:
        """One update of the variables in `state` (this model's own: it updates in place)."""
        if state["params"] is not self.params:
            raise ValueError("a TfModel steps only its own variables (pass model.state)")
        return state, self.compiled_step(self.batch_tensors(batch), tf.constant(lr, tf.float32))

    def local_rows(self, rows: int) -> tuple[int, int] | None:
        """One copy takes the whole batch."""
        return None

    def read_on_workers(self, records: Any) -> None:
        """Its steps run in this process (a parameter-server model's do not: `PsModel`)."""

    def eval_step(self, params: dict[str, Any], batch: Any) -> dict[str, tf.Tensor]:
        return self._eval_step(params, self.batch_tensors(batch))

    def logits(self, params: dict[str, Any], arrays: Mapping[str, np.ndarray]) -> tf.Tensor:
        return self._logits(params, {k: tf.convert_to_tensor(v) for k, v in arrays.items()})

    def decoder(self, params: Any, bos: int, eos: int, pad: int) -> TfDecoder:
        """Decoding with whole loops inside TF graphs (`seqc.backends.tf.decode`)."""
        return TfDecoder(self, params, bos, eos, pad)

    @staticmethod
    def batch_tensors(batch: Any) -> dict[str, tf.Tensor]:
        return {k: tf.convert_to_tensor(v) for k, v in batch.arrays.items()}
