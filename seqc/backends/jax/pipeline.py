"""A GPipe training step on the JAX mesh: the model's stages on the devices of the `stage` axis,
micro-batches streamed through them, one jitted program.

The plan (`seqc.compiler.pipeline`) cuts the training graph into stage graphs; each runs with
the one interpreter (`run_graph`), so nothing of the model is written again here. The step is a
`shard_map` over the whole mesh. On each device:

- its stage's params are its row of the `StagedParams` buffer (`seqc.backends.jax.staged`),
  gathered over `fsdp` when that axis splits the rows; shared params (a tied table) are whole;
- the batch's rows (its slice of the batch axes) are split into M micro-batches;
- a `lax.scan` runs M + S - 1 ticks: at tick t, stage s runs micro-batch t - s (a stage with no
  micro-batch at that tick computes on zeros and its result is dropped: GPipe's bubble), picked
  by `lax.switch` on the device's stage index; what it hands the next stage (the values live
  across the boundary, `stages.split`) goes there by `ppermute`;
- the last stage runs the task's training criterion and keeps the sums a loss needs (the loss
  times its token or sequence count, nll, tokens), psum-ed over the mesh at the end.

The gradient is JAX's of that program: the scan's transpose runs the ticks backward (each
stage's backward after the next stage's, as GPipe's), `ppermute` sends cotangents back, and
the replicated inputs' transposes sum gradients over the devices that share them (shared
params over the stages, every param over the batch axes). Dividing by the global count gives
the gradient of the whole batch's mean: the one-device step's, to float32 roundoff.

Dropout draws a key per (micro-batch, data slice), so its masks differ from a one-device
run's; with dropout off the losses and gradients are the one-device step's (tested, 1e-5).
Evaluation runs the whole forward over the packed params (no pipeline: an eval batch's rows
need not divide into micro-batches), its result replicated.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from seqc.backends.jax.context import DTYPES, Ctx
from seqc.backends.jax.data_parallel import count
from seqc.backends.jax.mesh import Sharded, global_array
from seqc.backends.jax.ops import run_graph
from seqc.backends.jax.staged import Layout, StagedParams, unpack_row
from seqc.backends.jax.train import JaxModel, Noise
from seqc.compiler.compile import CompiledTask
from seqc.compiler.config import TrainConfig
from seqc.compiler.pipeline.stages import Stage, carry_name, readers
from seqc.compiler.sharding import BATCH_AXES, ShardingPlan
from seqc.spec.errors import CheckError

STAGE = "stage"


class PipelinedModel(JaxModel):
    """`JaxModel` whose training step is the pipeline above (`ShardingPlan.pipeline`)."""

    def __init__(self, task: CompiledTask, train: TrainConfig, sharding: ShardingPlan) -> None:
        super().__init__(task, train, None)
        plan = sharding.pipeline
        assert plan is not None
        if self.lazy:
            raise CheckError(
                "adam(lazy_rows = true) is not implemented with a pipeline",
                span=plan.span,
                code="not-implemented",
                hint="set lazy_rows = false",
            )
        self.plan = plan
        self.sharded = Sharded(sharding, self.tx)
        self.strategy = "pipeline"
        mesh = self.sharded.mesh
        self.fsdp = sharding.mesh.get("fsdp", 1)
        self.stages: list[Stage] = plan.split(task.training_graph)
        count_ = len(self.stages)
        owners = readers(self.stages, task.train_criterion)
        params = self.graph.params
        self.layout = Layout.of(
            owners,
            {n: tuple(int(d) for d in p.type.shape) for n, p in params.items()},
            {n: p.type.dtype for n, p in params.items()},
            count_,
            self.fsdp,
        )
        self.replicated = NamedSharding(mesh, PartitionSpec())
        row_axis = "fsdp" if self.fsdp > 1 else None
        self.packed_sharding = NamedSharding(mesh, PartitionSpec(STAGE, row_axis))
        self.batch_axes = tuple(a for a in BATCH_AXES if sharding.mesh.get(a, 1) > 1)
        self._data_parallel = None
        self._train_step = None
        self._eval_step = jax.jit(self._eval_impl, out_shardings=self.replicated)
        self._logits = jax.jit(self._logits_impl, out_shardings=self.replicated)
        self._pipelined = self._program()

    # ---------------------------------------------------------------- state
    def param_shardings(self) -> StagedParams:
        shared = {n: self.replicated for n in self.layout.shared}
        return StagedParams(self.packed_sharding, shared, self.layout)

    def _state(self, params: Mapping[str, Any], seed: int) -> dict[str, Any]:
        buf, shared = self.layout.pack({k: np.asarray(v) for k, v in params.items()})
        put = StagedParams(
            global_array(buf, self.packed_sharding),
            {k: global_array(np.asarray(v), self.replicated) for k, v in shared.items()},
            self.layout,
        )
        shardings = self.param_shardings()
        staged = lambda x: isinstance(x, StagedParams)  # noqa: E731
        opt_shardings = jax.tree.map(
            lambda x: shardings if staged(x) else self.replicated,
            jax.eval_shape(self.tx.init, put),
            is_leaf=staged,
        )
        opt_state = jax.jit(self.tx.init, out_shardings=opt_shardings)(put)
        rep = self.replicated
        state = {
            "params": put,
            "opt_state": opt_state,
            "step": global_array(np.zeros((), np.int32), rep),
            "rng": global_array(np.asarray(jax.random.PRNGKey(seed + 1)), rep),
        }
        if self._train_step is None:
            state_shardings = {
                "params": shardings,
                "opt_state": opt_shardings,
                "step": rep,
                "rng": rep,
            }
            self._train_step = jax.jit(
                self._train_impl, donate_argnums=(0,), out_shardings=(state_shardings, rep)
            )
        return state

    # ---------------------------------------------------------------- the step
    def _gradients(self, params: StagedParams, arrays: dict, rng: Noise) -> tuple[dict, dict]:
        labels_mask = self.task.labels[1]
        weight = jnp.maximum(count(arrays[labels_mask], self.task.per_sequence), 1.0)

        def objective(p: StagedParams) -> tuple[jax.Array, jax.Array]:
            sums = self._pipelined(p.packed, p.shared, arrays, rng)
            return sums[0] / weight, sums

        (loss, sums), grads = jax.value_and_grad(objective, has_aux=True)(params)
        return {"loss": loss, "nll_sum": sums[1], "tokens": sums[2]}, grads

    def _run_stage(
        self, k: int, params: Mapping[str, Any], feeds: dict, carry: Mapping[int, Any], rng: Noise
    ) -> list[Any]:
        stage = self.stages[k]
        inputs = self.task.inputs(feeds) | {carry_name(v): carry[v] for v in stage.carry_in}
        # each stage its own stream: a stage's dropouts count from 1, as every stage's do
        key = jax.random.fold_in(rng.key, k)
        ctx = Ctx(rng=key, training=True, compute_dtype=self.compute_dtype)
        ctx.keeps, ctx.rates = rng.keeps, self.dropout_rates
        return run_graph(stage.graph, params, inputs, ctx)

    def _program(self) -> Callable[..., jax.Array]:
        """(packed, shared, arrays, noise) -> the step's sums over the mesh: [loss x count,
        nll_sum, tokens, count] (see the module's docstring)."""
        stages, m = self.stages, self.plan.microbatches
        n = len(stages)
        axes = tuple(self.sharded.mesh.axis_names)
        batch_axes = self.batch_axes
        perm = [(i, i + 1) for i in range(n - 1)]
        slots = [self.layout.stage_slots(k) for k in range(n)]
        labels_mask = self.task.labels[1]
        per_sequence = self.task.per_sequence
        shapes = {
            name: jax.ShapeDtypeStruct(tuple(int(d) for d in p.type.shape), DTYPES[p.type.dtype])
            for name, p in self.graph.params.items()
        }

        def local(packed: Any, shared: dict, arrays: dict, noise: Noise) -> jax.Array:
            s = jax.lax.axis_index(STAGE)
            row = packed[0]
            if self.fsdp > 1:
                row = jax.lax.all_gather(row, "fsdp", tiled=True)
            # varying over every axis: each device's gradient is its own until the casts'
            # transposes sum them (a custom VJP, the fused loss's, needs its types so)
            row = _varying(row, axes)
            shared = _varying(shared, axes)
            rows = next(iter(arrays.values())).shape[0]
            # arrays of the batch's rows split into micro-batches; others (per step) whole
            split = {
                k: v.reshape((m, rows // m, *v.shape[1:]))
                for k, v in arrays.items()
                if v.shape[:1] == (rows,)
            }
            whole = {k: v for k, v in arrays.items() if k not in split}
            data_index = jax.lax.axis_index(batch_axes) if batch_axes else 0

            def feeds_at(i: Any) -> dict:
                return whole | {k: v[i] for k, v in split.items()}

            # what crosses each boundary, shaped at one micro-batch (traced abstractly, once)
            structs: dict[int, Any] = {}
            first = {k: jax.ShapeDtypeStruct(v.shape, v.dtype) for k, v in feeds_at(0).items()}
            for k in range(n - 1):
                outs = jax.eval_shape(
                    lambda p, f, c, k=k: self._run_stage(k, p, f, c, noise),
                    {name: shapes[name] for name in stages[k].params},
                    first,
                    {v: structs[v] for v in stages[k].carry_in},
                )
                structs.update(zip(stages[k].carry_out, outs, strict=True))

            def zeros() -> dict[int, Any]:
                return _varying({v: jnp.zeros(t.shape, t.dtype) for v, t in structs.items()}, axes)

            def branch(k: int) -> Callable[..., tuple[dict, jax.Array]]:
                def run(row: Any, feeds: dict, carry: dict, key: Noise) -> tuple[dict, jax.Array]:
                    params = unpack_row(row, slots[k]) | shared
                    outs = self._run_stage(k, params, feeds, carry, key)
                    out = zeros()
                    if k < n - 1:
                        out.update(zip(stages[k].carry_out, outs, strict=True))
                        return out, _varying(jnp.zeros(4, jnp.float32), axes)
                    crit = self.train_criterion(params, self.task.model_output(outs), feeds)
                    weight = count(feeds[labels_mask], per_sequence)
                    sums = jnp.stack(
                        [crit["loss"] * weight, crit["nll_sum"], crit["tokens"], weight]
                    ).astype(jnp.float32)
                    return out, sums

                return run

            branches = [branch(k) for k in range(n)]
            if self.plan.remat:  # keep a stage's inputs; its forward runs again in backward
                branches = [jax.checkpoint(b) for b in branches]

            def tick(carry: dict, t: Any) -> tuple[dict, jax.Array]:
                i = t - s
                valid = (i >= 0) & (i < m)
                at = jnp.clip(i, 0, m - 1)
                key = jax.random.fold_in(jax.random.fold_in(noise.key, at), data_index)
                out, sums = jax.lax.switch(
                    s, branches, row, feeds_at(at), carry, Noise(key, noise.keeps)
                )
                sums = jnp.where(valid, sums, 0.0)
                sent = {v: jax.lax.ppermute(x, STAGE, perm) for v, x in out.items()}
                return sent, sums

            _, sums = jax.lax.scan(tick, zeros(), jnp.arange(m + n - 1))
            return jax.lax.psum(sums.sum(axis=0), axes)

        spec = PartitionSpec(STAGE, "fsdp" if self.fsdp > 1 else None)
        batch = PartitionSpec(batch_axes) if batch_axes else PartitionSpec()
        return jax.shard_map(
            local,
            mesh=self.sharded.mesh,
            in_specs=(spec, PartitionSpec(), batch, PartitionSpec()),
            out_specs=PartitionSpec(),
        )


def _varying(tree: Any, axes: tuple[str, ...]) -> Any:
    """`tree` cast to varying over those of `axes` it is not varying over already."""

    def cast(x: Any) -> Any:
        missing = tuple(a for a in axes if a not in jax.typeof(x).mat.varying)
        return jax.lax.pcast(x, missing, to="varying") if missing else x

    return jax.tree.map(cast, tree)
