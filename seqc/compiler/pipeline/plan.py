"""The pipeline a spec asks for, checked: `distribution.pipeline`, `distribution.stages` and the
mesh's `stage` axis made into a `PipelinePlan`.

    distribution {
      mesh = {stage: 4, data: 2}
      pipeline = gpipe(microbatches = 8)
      stages = auto                      # or manual(["blocks.2", "blocks.4", "norm"])
    }

`auto` splits the model's units (`units`) by `partition.best_split` over the cost model: each
unit's forward + backward FLOPs at one micro-batch's sizes on the slowest device listed, and its
memory (params, gradients and optimizer state, split over `fsdp`, plus the activations of every
micro-batch a GPipe step keeps until its backward pass, split over the batch axes). `manual`
names the unit each stage after the first begins at.

Refused at the spec line, before anything trains: a pipeline without a stage axis (or the
reverse), more stages than units, micro-batches that do not divide a batch's rows on one
slice of the batch axes, a stage over its device's memory (both numbers), a `model` axis with
a stage axis, a multi-task model, and the TF backend (whose path across devices is placement).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from seqc.compiler.graph import Graph
from seqc.compiler.origins import notes_at, where
from seqc.compiler.pipeline.partition import best_split, stage_sums
from seqc.compiler.pipeline.stages import Stage, split
from seqc.compiler.pipeline.units import Unit, units_of
from seqc.compiler.placement.problem import UNLIMITED
from seqc.compiler.tables import show_bytes
from seqc.resolve.experiment import ResolvedExperiment
from seqc.spec.errors import CheckError, did_you_mean
from seqc.spec.ir import Span

BACKWARD_FACTOR = 2.0
"""Backward FLOPs per forward FLOP (as the placer's, `placement.from_graph`)."""
DEFAULT_FLOPS = 1e11
"""FLOP/s of a device when the spec lists none (a stage's time is then relative)."""


@dataclass(frozen=True)
class StageCost:
    """One stage of a plan: its units and what it costs."""

    index: int
    units: tuple[str, ...]
    start: int
    """Its first op's id in the training graph."""
    time_s: float
    """Forward + backward of one micro-batch on its device (the cost model's estimate)."""
    param_bytes: int
    memory_bytes: int
    """Params, gradients and optimizer state (this device's share) and kept activations."""


@dataclass
class PipelinePlan:
    """A checked pipeline: the schedule, its micro-batches and the stages."""

    schedule: str
    microbatches: int
    stages: list[StageCost]
    memory_limit: int | None = None
    span: Span | None = None
    """The spec line of `distribution.pipeline`."""
    units: list[Unit] = field(default_factory=list)
    remat: bool = True
    """Each stage's forward recomputed in its backward pass (`gpipe(remat = true)`)."""

    @property
    def count(self) -> int:
        return len(self.stages)

    @property
    def starts(self) -> list[int]:
        """The op id each stage after the first begins at."""
        return [s.start for s in self.stages[1:]]

    @property
    def bubble(self) -> float:
        """The fraction of a GPipe step's stage-slots that idle: (S - 1) / (M + S - 1)."""
        s, m = self.count, self.microbatches
        return (s - 1) / (m + s - 1)

    @property
    def step_time_s(self) -> float:
        """(M + S - 1) slots, each as long as the slowest stage's micro-batch."""
        return (self.microbatches + self.count - 1) * max(s.time_s for s in self.stages)

    def split(self, graph: Graph) -> list[Stage]:
        """The training graph cut at this plan's stages."""
        return split(graph, self.starts)


def pipeline_axes(resolved: ResolvedExperiment) -> tuple[int, Any]:
    """The mesh's stage count and the spec's `distribution.pipeline` kind instance."""
    dist = resolved.config["distribution"]
    return int(dict(dist["mesh"]).get("stage", 1)), dist["pipeline"]


def wants_pipeline(resolved: ResolvedExperiment) -> bool:
    stages, pipeline = pipeline_axes(resolved)
    return stages > 1 or pipeline is not None


def plan_pipeline(
    graph: Graph,
    resolved: ResolvedExperiment,
    task: str,
    *,
    dims: dict[str, int],
    slots: int,
    mesh: dict[str, int],
    memory_limit: int | None,
    flops: float | None,
    memory: bool = True,
    criterion: Graph | None = None,
) -> PipelinePlan:
    """The plan of `graph` (the task's training graph) on `mesh`, costed at `dims` (a whole
    batch: B rows, T positions) on devices of `flops` FLOP/s and `memory_limit` bytes, with an
    optimizer keeping `slots` tensors per param. The training `criterion` runs on the last
    stage (a fused loss holds the output layer): its cost joins the last unit's. With
    `memory`, a stage over the limit is refused (`seqc show --sharding` shows it first)."""
    stages, pipeline = pipeline_axes(resolved)
    at = where(resolved, "distribution.pipeline", "distribution.mesh")
    check_pipeline_spec(resolved, stages, pipeline)
    m = int(pipeline.args["microbatches"])
    batch_split = mesh.get("data", 1) * mesh.get("fsdp", 1)
    rows = int(dims["B"])
    buckets = resolved.config[task]["input"].get("buckets") or {}
    for size in sorted({rows, *(int(b) for b in buckets.values())}):
        check_microbatches(size, batch_split, m, at)
    micro = dict(dims) | {"B": rows // (batch_split * m)}
    units = units_of(graph, micro)
    if criterion is not None and units:
        extra = units_of(criterion, micro)
        last = units[-1]
        units[-1] = Unit(
            last.path,
            last.start,
            last.stop,
            last.flops + sum(u.flops for u in extra),
            last.param_bytes,
            last.activation_bytes + sum(u.activation_bytes for u in extra),
        )
    if stages > len(units):
        raise CheckError(
            f"a pipeline of {stages} stages needs at least {stages} units of layers to fill "
            f"them; the model of `{task}` has {len(units)}: " + ", ".join(u.path for u in units),
            span=where(resolved, "distribution.mesh"),
            code="pipeline-stages",
            expected=f"at most {len(units)} stages",
            found=str(stages),
            hint="lower the mesh's stage axis, or give the model more layers (a deeper repeat)",
        )
    speed = flops or DEFAULT_FLOPS
    remat = bool(pipeline.args["remat"])
    # the step's scan keeps what each of its M + S - 1 ticks needs for the backward pass (a
    # bubble's tick too): with remat, each unit's output (a stage keeps only its inputs, so
    # this bounds it from above) and one micro-batch's activations while its forward runs
    # again; without, every tick's activations
    ticks = m + stages - 1
    factor = 1 + BACKWARD_FACTOR + (1 if remat else 0)
    times = [u.flops * factor / speed for u in units]
    fsdp = mesh.get("fsdp", 1)
    kept = [
        u.out_bytes * ticks + u.activation_bytes if remat else u.activation_bytes * ticks
        for u in units
    ]
    mem = [u.param_bytes * (2 + slots) / fsdp + k for u, k in zip(units, kept, strict=True)]
    limit = float(memory_limit) if memory and memory_limit is not None else math.inf
    chosen = resolved.config["distribution"]["stages"]
    if chosen.kind == "manual":
        cuts = manual_cuts(units, list(chosen.args["starts"]), stages, resolved)
    else:
        found = best_split(times, mem, stages, limit)
        cuts = found if found is not None else best_split(times, mem, stages) or []
    plan = PipelinePlan(
        "gpipe", m, _costs(units, cuts, times, mem, slots, fsdp), memory_limit, at, units, remat
    )
    if memory and memory_limit is not None:
        check_stage_memory(plan, memory_limit, resolved)
    return plan


def _costs(
    units: Sequence[Unit],
    cuts: Sequence[int],
    times: Sequence[float],
    mem: Sequence[float],
    slots: int,
    fsdp: int,
) -> list[StageCost]:
    bounds = [0, *cuts, len(units)]
    t = stage_sums(times, cuts)
    b = stage_sums([u.param_bytes / fsdp for u in units], cuts)
    m = stage_sums(mem, cuts)
    return [
        StageCost(
            k,
            tuple(u.path for u in units[lo:hi]),
            units[lo].start,
            t[k],
            int(b[k]),
            int(m[k]),
        )
        for k, (lo, hi) in enumerate(itertools.pairwise(bounds))
    ]


def check_pipeline_spec(resolved: ResolvedExperiment, stages: int, pipeline: Any) -> None:
    """The combinations a pipeline refuses, each at its line."""
    mesh = dict(resolved.config["distribution"]["mesh"])
    if stages > 1 and pipeline is None:
        raise CheckError(
            f"the mesh has a stage axis of {stages}, but no pipeline says how micro-batches "
            "flow through the stages",
            span=where(resolved, "distribution.mesh"),
            code="pipeline-missing",
            hint="add `pipeline = gpipe(microbatches = 8)` to the distribution block, or drop "
            "the stage axis",
        )
    if stages <= 1 and pipeline is not None:
        raise CheckError(
            "a pipeline needs a stage axis of at least 2 in the mesh",
            span=where(resolved, "distribution.pipeline"),
            code="pipeline-no-stages",
            expected="distribution.mesh with `stage: 2` or more",
            found="{" + ", ".join(f"{a}: {n}" for a, n in mesh.items()) + "}",
            hint="add a stage axis to the mesh (e.g. mesh = {stage: 2, data: 1}), or set "
            "pipeline = none",
            notes=notes_at(
                resolved,
                where(resolved, "distribution.pipeline"),
                ("distribution.mesh", "the mesh is set here"),
            ),
        )
    if int(mesh.get("expert", 1)) > 1:
        raise CheckError(
            "a pipeline's stages compose with the data and fsdp axes; an expert axis inside a "
            "stage is not implemented",
            span=where(resolved, "distribution.mesh"),
            code="pipeline-model-axis",
            hint="pipeline a model without the expert axis, or train it on a data/expert mesh",
        )
    if int(mesh.get("model", 1)) > 1:
        raise CheckError(
            "a pipeline's stages compose with the data and fsdp axes; a model axis inside a "
            "stage is not implemented",
            span=where(resolved, "distribution.mesh"),
            code="pipeline-model-axis",
            hint="split the stages' params over an fsdp axis instead of a model axis",
        )
    if len(resolved.tasks) > 1:
        raise CheckError(
            f"a pipeline runs one task's model; this experiment trains {len(resolved.tasks)} "
            "tasks as one",
            span=where(resolved, "distribution.pipeline", "distribution.mesh"),
            code="pipeline-multitask",
            hint="pipeline one task's experiment, or train the tasks on a data/fsdp mesh",
        )
    if str(resolved.config.get("backend") or "jax") == "tf":
        raise CheckError(
            "pipeline parallelism is implemented on the JAX backend; on TF, spreading a model "
            "over devices is placement",
            span=where(resolved, "distribution.pipeline", "distribution.mesh"),
            code="pipeline-backend",
            hint='train with backend = "jax", or on TF use distribution.placement '
            "(m_etf, m_sct, manual) with distribution.devices",
        )


def check_microbatches(rows: int, batch_split: int, m: int, at: Span | None) -> None:
    """Each slice of the batch axes must split into `m` micro-batches of equal rows."""
    if rows % batch_split or (rows // batch_split) % m:
        raise CheckError(
            f"batches of {rows} rows do not split into {m} micro-batches on each of the "
            f"{batch_split} slice(s) of the batch axes",
            span=at,
            code="microbatches-not-divisible",
            expected=f"batch sizes divisible by {batch_split * m} ({batch_split} x {m})",
            found=str(rows),
            hint="change pipeline's microbatches, the buckets' batch sizes (or "
            "train.batch_size), or the mesh's data axes",
        )


def check_batch_sizes(plan: PipelinePlan, sizes: Iterable[int], batch_split: int) -> None:
    """Every bucket's rows split into the plan's micro-batches (what a run checks)."""
    for rows in sorted(set(int(b) for b in sizes)):
        check_microbatches(rows, batch_split, plan.microbatches, plan.span)


def manual_cuts(
    units: Sequence[Unit], starts: list[str], stages: int, resolved: ResolvedExperiment
) -> list[int]:
    """The unit indices `stages = manual([...])` names: the unit each later stage begins at."""
    at = where(resolved, "distribution.stages")
    paths = [u.path for u in units]
    if len(starts) != stages - 1:
        raise CheckError(
            f"manual stages name where each stage after the first begins: {stages - 1} "
            f"path(s) for {stages} stages, not {len(starts)}",
            span=at,
            code="pipeline-manual",
            expected=f"{stages - 1} layer path(s), e.g. {paths[len(paths) // 2]!r}",
            found=str(len(starts)),
        )
    cuts = []
    for path in starts:
        if path not in paths[1:]:
            raise CheckError(
                f"`{path}` begins no unit a stage can begin at",
                span=at,
                code="pipeline-manual",
                expected="one of " + ", ".join(paths[1:]),
                found=f"`{path}`",
                suggestion=did_you_mean(path, paths[1:]),
            )
        cuts.append(paths.index(path, 1))
    if cuts != sorted(set(cuts)):
        raise CheckError(
            "manual stages must begin in the model's order, each at another unit",
            span=at,
            code="pipeline-manual",
            expected=" < ".join(paths[c] for c in sorted(set(cuts))),
            found=", ".join(starts),
        )
    return cuts


def check_stage_memory(plan: PipelinePlan, limit: int, resolved: ResolvedExperiment) -> None:
    """A stage that needs more than its device has is refused, with both numbers."""
    worst = max(plan.stages, key=lambda s: s.memory_bytes)
    if worst.memory_bytes <= limit:
        return
    at = where(resolved, "distribution.devices", "distribution.stages", "distribution.mesh")
    raise CheckError(
        f"stage {worst.index} ({worst.units[0]} .. {worst.units[-1]}) keeps "
        f"{show_bytes(worst.memory_bytes)} on its device, which has {show_bytes(limit)}",
        span=at,
        code="stage-memory",
        expected=f"at most {show_bytes(limit)} per stage",
        found=f"{show_bytes(worst.memory_bytes)} (params, gradients, optimizer state and what "
        f"its {plan.microbatches} micro-batches keep for the backward pass)",
        hint="use more stages, an fsdp axis, fewer rows per batch, or devices with more memory "
        "(and keep gpipe's remat = true)",
    )


def pipeline_for(
    compiled: Any,
    resolved: ResolvedExperiment,
    task: str,
    mesh: dict[str, int],
    *,
    memory: bool = True,
) -> PipelinePlan:
    """`plan_pipeline` of a compiled task's training graph, at the experiment's batch sizes
    and on the devices it lists (`distribution.devices`: the smallest memory, the slowest)."""
    from seqc.compiler.placement.from_graph import batch_dims, device_specs

    if compiled.experts:
        raise CheckError(
            "a pipeline's stages cannot yet carry a mixture of experts' auxiliary losses and "
            "figures from stage to stage",
            span=where(resolved, "distribution.pipeline", "distribution.mesh"),
            code="pipeline-experts",
            hint="train a model with MoE layers on a data/fsdp/expert mesh, without a pipeline",
        )
    devices = resolved.config["distribution"]["devices"] or []
    specs = device_specs(devices) if devices else []
    limits = [d.memory for d in specs if d.memory < UNLIMITED]
    return plan_pipeline(
        compiled.training_graph,
        resolved,
        task,
        dims=batch_dims(resolved, task),
        slots=compiled.train.optimizer.slots,
        mesh=mesh,
        memory_limit=min(limits) if limits else None,
        flops=min(d.flops for d in specs) if specs else None,
        memory=memory,
        criterion=compiled.train_criterion,
    )
