"""Training and evaluation steps of a compiled task on JAX, each one `jax.jit`-compiled program.

A step runs the model's forward graph and then its criterion graph (`seqc.compiler.lower.
criterion`) through the shared interpreter, inside one jit: one XLA program per step. The state
is a plain pytree (params, optimizer state, step, rng) so that checkpoints hold exactly what a
resumed run needs to continue bit for bit.

With a sharding plan the same program runs on a mesh of devices, of one process or many
(`seqc.backends.jax.mesh`): the state lives on its shards, training batches arrive split over
the data axes, and the steps keep the state's shardings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from seqc.backends.jax import data_parallel, lazy_rows
from seqc.backends.jax.context import Ctx
from seqc.backends.jax.mesh import Sharded, local
from seqc.backends.jax.ops import run_graph
from seqc.backends.jax.optim import direction
from seqc.compiler.compile import CompiledTask
from seqc.compiler.config import Adam, TrainConfig
from seqc.compiler.graph import Graph
from seqc.compiler.init import init_params
from seqc.compiler.lazy_rows import lazy_tables
from seqc.compiler.lower.criterion import named
from seqc.compiler.sharding import ShardingPlan
from seqc.spec.errors import CheckError


class Noise(NamedTuple):
    """A training step's randomness: its key, and its dropouts' keep probabilities (1 - rate,
    in the order of `dropout_rates`). Passed where a key is, so every path to the forward
    (data parallel, lazy rows) carries both."""

    key: jax.Array
    keeps: jax.Array


def dropout_rates(graph: Graph) -> tuple[float, ...]:
    """The graph's dropout rates above 0, scan bodies included, each once, in order."""
    rates: set[float] = set()
    for g in (graph, *graph.subgraphs.values()):
        rates |= {op.attrs["rate"] for op in g.ops if op.kind == "dropout" and op.attrs["rate"] > 0}
    return tuple(sorted(rates))


class JaxModel:
    """A task's model, criterion and optimizer, compiled for training and evaluation."""

    backend = "jax"

    def __init__(
        self, task: CompiledTask, train: TrainConfig, sharding: ShardingPlan | None = None
    ) -> None:
        self.task = task
        self.graph = task.graph
        self.train_config = train
        opt = train.optimizer
        self.lazy = lazy_tables([task.training_graph, task.train_criterion], opt)
        """Params updated by rows, `adam(lazy_rows = true)` (`seqc.backends.jax.lazy_rows`)."""
        self.tx: Any = (
            lazy_rows.LazyAdam(opt, self.lazy)
            if self.lazy and isinstance(opt, Adam)
            else direction(train)
        )
        self.clip_norm = train.clip_norm
        self.dropout_rates = dropout_rates(task.training_graph)
        """Dropout rates, given to the step as an argument (`Ctx.keeps`) so that models which
        differ only in them compile the same step."""
        self._keeps = np.asarray([1.0 - r for r in self.dropout_rates], np.float32)
        self.compute_dtype = jnp.bfloat16 if train.compute_dtype == "bfloat16" else jnp.float32
        self.sharded = None if sharding is None or sharding.trivial else Sharded(sharding, self.tx)
        if self.lazy and self.sharded is not None:
            raise CheckError(
                "adam(lazy_rows = true) updates the rows one device gathered; it is not "
                "implemented over a mesh of devices",
                code="not-implemented",
                hint="set lazy_rows = false, or train on one device",
            )
        self.strategy = "single" if self.sharded is None else "spmd"
        self._data_parallel = None
        if self.sharded is not None and data_parallel.applies(self.sharded):
            self._data_parallel = data_parallel.gradients(
                self.sharded, self.objective, task.labels[1], task.per_sequence
            )
        if self.sharded is None:
            self._train_step = jax.jit(self._train_impl, donate_argnums=(0,))
            self._eval_step = jax.jit(self._eval_impl)
            self._logits = jax.jit(self._logits_impl)
        else:  # results replicated: every process can read them
            rep = self.sharded.replicated
            self._train_step = None  # made with the state's shardings (`_state`)
            self._eval_step = jax.jit(self._eval_impl, out_shardings=rep)
            self._logits = jax.jit(self._logits_impl, out_shardings=rep)

    # ---------------------------------------------------------------- state
    def init(self, seed: int, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return self._state(init_params(self.graph, seed) | dict(given or {}), seed)

    def with_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return self._state(params, 0)

    def _state(self, params: Mapping[str, Any], seed: int) -> dict[str, Any]:
        if self.sharded is not None:
            state = self.sharded.put_state(params, seed)
            if self._train_step is None:
                shardings = self.sharded.state(state)
                self._train_step = jax.jit(
                    self._train_impl,
                    donate_argnums=(0,),
                    out_shardings=(shardings, self.sharded.replicated),
                )
            return state
        arrays = {k: jnp.asarray(v) for k, v in params.items()}
        state = {
            "params": arrays,
            "opt_state": self.tx.init(arrays),
            "step": jnp.zeros((), jnp.int32),
            "rng": jax.random.PRNGKey(seed + 1),
        }
        # committed to its device, as a restored checkpoint's arrays are: a jit called on
        # committed arrays is another program than on uncommitted ones, so a run resumed in
        # the same process (or against a compilation cache) would compile its step again
        return jax.device_put(state, next(iter(state["step"].devices())))  # where jnp put it

    def forward(
        self,
        params: dict,
        arrays: Mapping[str, Any],
        rng: jax.Array | Noise | None,
        training: bool,
        rows: tuple[Any, int] | None = None,
    ) -> jax.Array:
        keeps = None
        if isinstance(rng, Noise):
            rng, keeps = rng
        ctx = Ctx(rng=rng, training=training, compute_dtype=self.compute_dtype, rows=rows)
        if self.sharded is not None and rows is None:  # one SPMD program (not `shard_map`)
            ctx.mesh = self.sharded.mesh
        ctx.keeps, ctx.rates = keeps, self.dropout_rates
        graph = self.task.training_graph if training else self.graph
        return self.task.model_output(run_graph(graph, params, self.task.inputs(arrays), ctx))

    def criterion(self, graph: Graph, logits: jax.Array, arrays: Mapping[str, Any]) -> dict:
        """The criterion graph's outputs by name (in float32 whatever the compute dtype)."""
        outs = run_graph(graph, {}, self.task.criterion_inputs(logits, arrays), Ctx())
        return named(outs)

    def train_criterion(self, params: dict, outputs: jax.Array, arrays: Mapping[str, Any]) -> dict:
        """The training criterion on the training graph's output (a sampled one reads the
        output layer's params)."""
        inputs = self.task.train_criterion_inputs(outputs, arrays)
        return named(
            run_graph(self.task.train_criterion, params, inputs, Ctx()), self.task.train_criterion
        )

    # ---------------------------------------------------------------- steps
    def objective(
        self,
        params: dict,
        arrays: dict,
        rng: jax.Array | Noise,
        rows: tuple[Any, int] | None = None,
    ) -> tuple:
        outputs = self.forward(params, arrays, rng, training=True, rows=rows)
        out = self.train_criterion(params, outputs, arrays)
        return out["loss"], out

    def _gradients(self, params: dict, arrays: dict, rng: Noise) -> tuple[dict, dict]:
        """The criterion's outputs and the gradient of its loss on the (global) batch."""
        if self._data_parallel is not None:
            return self._data_parallel(params, arrays, rng)
        grad_fn = jax.value_and_grad(self.objective, has_aux=True)
        (_, metrics), grads = grad_fn(params, arrays, rng)
        return metrics, grads

    def _train_impl(
        self, state: dict, arrays: dict, lr: jax.Array, keeps: jax.Array
    ) -> tuple[dict, dict]:
        if self.lazy:
            return self._lazy_train_impl(state, arrays, lr, keeps)
        rng, step_rng = jax.random.split(state["rng"])
        metrics, grads = self._gradients(state["params"], arrays, Noise(step_rng, keeps))
        norm = optax.tree.norm(grads)
        if self.clip_norm > 0.0:  # as optax.clip_by_global_norm, without a second norm pass
            scale = self.clip_norm / jnp.maximum(norm, self.clip_norm)
            grads = jax.tree.map(lambda g: g * scale.astype(g.dtype), grads)
        updates, opt_state = self.tx.update(grads, state["opt_state"], state["params"])
        # optax.scale_by_learning_rate, with the rate the host computed for this step
        params = jax.tree.map(
            lambda p, u: p + jnp.asarray(-lr, u.dtype) * u, state["params"], updates
        )
        metrics = dict(metrics)
        metrics["grad_norm"] = norm
        new = {"params": params, "opt_state": opt_state, "step": state["step"] + 1, "rng": rng}
        return new, metrics

    def _lazy_train_impl(
        self, state: dict, arrays: dict, lr: jax.Array, keeps: jax.Array
    ) -> tuple[dict, dict]:
        """The step of `adam(lazy_rows = true)`: the same loss and clipping, the gradient of
        each row-sparse table as its gathered rows (`seqc.backends.jax.lazy_rows`)."""
        rng, step_rng = jax.random.split(state["rng"])
        metrics, dense, rows = lazy_rows.gradients(
            self.objective, self.lazy, state["params"], arrays, Noise(step_rng, keeps)
        )
        norm = jnp.sqrt(lazy_rows.norm_squared(dense, rows))
        if self.clip_norm > 0.0:
            scale = self.clip_norm / jnp.maximum(norm, self.clip_norm)
            dense = {k: g * scale.astype(g.dtype) for k, g in dense.items()}
            rows = {k: (ids, g * scale.astype(g.dtype)) for k, (ids, g) in rows.items()}
        params, opt_state = self.tx.step(state["params"], state["opt_state"], dense, rows, lr)
        metrics = dict(metrics) | {"grad_norm": norm}
        new = {"params": params, "opt_state": opt_state, "step": state["step"] + 1, "rng": rng}
        return new, metrics

    def _eval_impl(self, params: dict, arrays: dict) -> dict:
        logits = self.forward(params, arrays, None, training=False)
        return self.criterion(self.task.eval_criterion, logits, arrays)

    def _logits_impl(self, params: dict, arrays: dict) -> jax.Array:
        return self.forward(params, arrays, None, training=False)

    def train_step(self, state: dict, batch: Any, lr: float) -> tuple[dict, dict]:
        if self.sharded is None:
            return self._train_step(state, dict(batch.arrays), np.float32(lr), self._keeps)
        assert self._train_step is not None, "make the state first (init or with_params)"
        arrays = self.sharded.put_batch(batch.arrays)
        state, metrics = self._train_step(state, arrays, np.float32(lr), self._keeps)
        return state, {k: local(v) for k, v in metrics.items()}

    def local_rows(self, rows: int) -> tuple[int, int] | None:
        """The rows this process's devices hold of a batch (`Sharded.local_rows`)."""
        return None if self.sharded is None else self.sharded.local_rows(rows)

    def read_on_workers(self, records: Any) -> None:
        """Every process of a JAX run makes its own batches: nothing to hand over."""

    def eval_step(self, params: dict, batch: Any) -> dict:
        if self.sharded is None:
            return self._eval_step(params, dict(batch.arrays))
        out = self._eval_step(params, self.sharded.put_batch(batch.arrays, split=False))
        return {k: local(v) for k, v in out.items()}

    def logits(self, params: dict, arrays: Mapping[str, np.ndarray]) -> jax.Array:
        if self.sharded is None:
            return self._logits(params, dict(arrays))
        return local(self._logits(params, self.sharded.put_batch(arrays, split=False)))

    def decoder(self, params: Any, bos: int, eos: int, pad: int) -> None:
        """None: JAX decodes on the host over the jitted forward (`seqc.run.decoding`)."""
        return None
