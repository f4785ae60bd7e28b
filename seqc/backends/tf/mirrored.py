"""Synchronous data parallelism on TensorFlow: a `tf.distribute` mirrored strategy per mesh.

A mesh `{data: N}` trains one model on N replicas, each with a full copy of the variables
(`MirroredVariable`s, created under the strategy's scope). In one process the replicas are N
GPUs, or N logical CPUs (`seqc.backends.tf.devices.replicas`): `MirroredStrategy`. Across the
worker processes of a run, `MultiWorkerMirroredStrategy`, which the backend created when the
process joined the run (`seqc.backends.tf.multiworker`).

Each step gives replica r rows [r*B/R, (r+1)*B/R) of the global batch (every process builds
the same global batch, a pure function of seed and step, and feeds only its own replicas'
rows). A replica computes the criterion and its gradient on its rows; the gradients are summed
across replicas and the update (global-norm clipping from the summed gradient's norm, then the
optimizer) is applied once, in cross-replica context, to every copy.

Why each replica's loss is weighted: the criterion's `loss` is a mean over the replica's rows
(its total over its count of tokens, or of non-empty sequences under `reduction =
"sequence"`), and the mean of the global batch is sum_r total_r / sum_r count_r, not the mean
of the replicas' means. Weighting replica r's loss by count_r / global count makes the summed
gradient the single device's gradient, so a mirrored run follows the single device's loss curve
to float32 roundoff. Dropout folds the replica id into the step's seed: its masks are
deterministic, but not those of one device.

`fsdp` and `model` axes split params, which a mirrored strategy never does: they stay an error
at the mesh's line, pointing at the JAX backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from seqc.backends.tf.devices import replicas
from seqc.backends.tf.train import TfModel
from seqc.compiler.compile import CompiledTask
from seqc.compiler.config import TrainConfig
from seqc.compiler.expert_terms import is_figure
from seqc.compiler.sharding import ShardingPlan, check_devices
from seqc.spec.errors import DeviceError, UsageError

SUM = tf.distribute.ReduceOp.SUM


def check_axes(plan: ShardingPlan) -> None:
    """Only the `data` axis splits anything on TF: params are never split here."""
    split = {a: n for a, n in plan.mesh.items() if a != "data" and n > 1}
    if split:
        shown = ", ".join(f"{a}: {n}" for a, n in split.items())
        raise DeviceError(
            f"the TensorFlow backend trains data parallel only (a mesh of `data`); it cannot "
            f"split params over {shown}",
            span=plan.span,
            code="cannot-shard",
            expected="distribution.mesh = {data: N}",
            found=shown,
            hint="train with --backend jax (it shards params over fsdp and model axes), or "
            "set the mesh to {data: N}",
        )


def local_strategy(plan: ShardingPlan) -> tf.distribute.MirroredStrategy:
    """A `MirroredStrategy` over this process's devices for the mesh's replicas."""
    return tf.distribute.MirroredStrategy(replicas(plan.devices, plan.span))


def mirrored_model(
    task: CompiledTask,
    train: TrainConfig,
    plan: ShardingPlan | None,
    workers: tf.distribute.MultiWorkerMirroredStrategy | None,
    *,
    processes: int = 1,
    jit_compile: bool = False,
) -> MirroredTfModel:
    """The data-parallel model of a mesh: over the run's workers when this process joined a
    multi-worker run (`workers`), else over this process's devices."""
    if plan is not None:
        check_axes(plan)
    if jit_compile:
        raise UsageError(
            "jit_compile is not implemented for a data-parallel TensorFlow model",
            code="not-implemented",
            hint="train without jit_compile, or with distribution.mesh = {data: 1}",
        )
    if workers is not None:
        where = f"this run ({processes} TensorFlow workers)"
        check_devices(plan or ShardingPlan({"data": 1}), workers.num_replicas_in_sync, where)
        strategy: tf.distribute.Strategy = workers
    else:
        assert plan is not None, "a single process mirrors only a mesh over several devices"
        strategy = local_strategy(plan)
    return MirroredTfModel(task, train, strategy, seed=train.seed)


class MirroredTfModel(TfModel):
    """A `TfModel` whose variables are mirrored on every replica of `distribution`, and whose
    training step splits the global batch over the replicas (see the module docstring).

    Evaluation, logits and decoding run on one copy (the variables' primary), on the whole
    batch, as `TfModel`'s do: they involve no other replica and no other process."""

    def __init__(
        self,
        task: CompiledTask,
        train: TrainConfig,
        distribution: tf.distribute.Strategy,
        seed: int = 0,
    ) -> None:
        self.distribution = distribution
        self.strategy = (
            "multi_worker_mirrored"
            if isinstance(distribution, tf.distribute.MultiWorkerMirroredStrategy)
            else "mirrored"
        )
        with distribution.scope():
            super().__init__(task, train, seed)
            self.compiled_step = tf.function(
                self._mirrored_impl, autograph=False, reduce_retracing=True
            )
        self.replicas = int(distribution.num_replicas_in_sync)
        self._devices = list(distribution.extended.worker_devices)
        self._per_sequence = task.per_sequence
        self._local = _local_replicas(distribution)

    def train_step(
        self, state: dict[str, Any], batch: Any, lr: float
    ) -> tuple[dict, dict[str, tf.Tensor]]:
        if state["params"] is not self.params:
            raise ValueError("a TfModel steps only its own variables (pass model.state)")
        arrays, weights = self._split(batch.arrays)
        return state, self.compiled_step(arrays, weights, tf.constant(lr, tf.float32))

    def local_rows(self, rows: int) -> tuple[int, int] | None:
        """The rows of this worker's replicas (each replica takes `rows / replicas` in order),
        when they are not all of them; None for one worker."""
        share = rows // self.replicas
        lo, hi = self._local[0] * share, (self._local[-1] + 1) * share
        return None if (lo, hi) == (0, rows) else (lo, hi)

    def count(self, mask: np.ndarray) -> int:
        """What the criterion divides a replica's total by: its real tokens, or its non-empty
        sequences under `reduction = "sequence"` (`seqc.compiler.lower.criterion`)."""
        real = np.asarray(mask).astype(bool)
        return int(real.any(axis=-1).sum() if self._per_sequence else real.sum())

    def _split(self, arrays: Mapping[str, np.ndarray]) -> tuple[Any, Any]:
        """This process's replicas' rows of the global batch, each on its replica's device,
        with the weight of each replica's loss (its count over the batch's)."""
        rows = {int(np.shape(v)[0]) for v in arrays.values()}
        if len(rows) != 1 or next(iter(rows)) % self.replicas:
            raise ValueError(f"batch rows {sorted(rows)} do not split over {self.replicas}")
        share = next(iter(rows)) // self.replicas
        mask = np.asarray(arrays[self.task.labels[1]])
        counts = [self.count(mask[r * share : (r + 1) * share]) for r in range(self.replicas)]
        total = max(sum(counts), 1)

        def value(ctx: tf.distribute.experimental.ValueContext) -> tuple[dict, tf.Tensor]:
            r = ctx.replica_id_in_sync_group
            rows = slice(r * share, (r + 1) * share)
            with tf.device(self._devices[r % len(self._devices)]):
                part = {k: tf.convert_to_tensor(v[rows]) for k, v in arrays.items()}
                return part, tf.constant(counts[r] / total, tf.float32)

        distributed = self.distribution.experimental_distribute_values_from_function(value)
        return distributed[0], distributed[1]

    def _mirrored_impl(self, arrays: Any, weights: Any, lr: tf.Tensor) -> dict:
        strategy = self.distribution
        # a mixture of experts' figures (`seqc.compiler.expert_terms`), averaged over the
        # replicas by their shares of the tokens, as the loss is
        figures = [n for n in self.task.train_criterion.output_names if is_figure(n)]

        def replica(arrays: dict, weight: tf.Tensor) -> tuple[list, list]:
            ctx = tf.distribute.get_replica_context()
            step_rng = tf.random.experimental.stateless_fold_in(self.seed, self.step)
            rng = tf.random.experimental.stateless_fold_in(step_rng, ctx.replica_id_in_sync_group)
            metrics, grads = self.gradients(arrays, rng, weight)
            grads = ctx.all_reduce(SUM, grads)
            shares = [metrics["loss"] * weight, metrics["nll_sum"], metrics["tokens"]]
            shares += [metrics[k] * weight for k in figures]
            return grads, ctx.all_reduce(SUM, shares)

        with strategy.scope():  # cross-replica context: the update writes every copy
            grads, sums = strategy.run(replica, args=(arrays, weights))
            # Every replica holds the same sums: the update reads the first one's.
            first = lambda v: strategy.experimental_local_results(v)[0]  # noqa: E731
            norm = self.update([first(g) for g in grads], lr)
        loss, nll_sum, tokens, *shared = (first(v) for v in sums)
        out = {"loss": loss, "nll_sum": nll_sum, "tokens": tokens, "grad_norm": norm}
        return out | dict(zip(figures, shared, strict=True))


def _local_replicas(distribution: tf.distribute.Strategy) -> list[int]:
    """The ids (in the sync group) of this process's replicas: a distributed value's function
    is called for the local replicas only. Contiguous in every layout TensorFlow makes."""
    ids: list[int] = []

    def record(ctx: tf.distribute.experimental.ValueContext) -> tf.Tensor:
        ids.append(int(ctx.replica_id_in_sync_group))
        return tf.constant(0)

    distribution.experimental_distribute_values_from_function(record)
    return sorted(ids)
