"""Where a training run's model runs, decided before anything is written: a placement of its
ops on devices (`distribution.placement`), or a mesh it is sharded over (`distribution.mesh`),
never both, each checked against the backend and the run's processes at the spec's line.
"""

from __future__ import annotations

import math

from seqc.backends.api import Backend, Cluster
from seqc.compiler.pipeline.plan import check_batch_sizes, pipeline_for, wants_pipeline
from seqc.compiler.placement.plan import Placement, place
from seqc.compiler.sharding import ShardingPlan, check_batches, mesh_of, plan_sharding
from seqc.resolve.experiment import ResolvedExperiment
from seqc.run.report import Reporter
from seqc.run.session import Session
from seqc.spec.errors import CheckError


def plan_placement(session: Session, engine: Backend, reporter: Reporter) -> Placement | None:
    """The placement the spec asks for, planned and checked, or None when the plan puts
    everything on one device (what an unplaced program runs anyway). A backend that runs a
    step as one program on one device refuses a plan over several, at the spec's line."""
    dist = session.resolved.config["distribution"]
    asked = dist["placement"]
    if asked.kind == "single" and int(asked.args.get("device", 0)) == 0:
        return None
    from seqc.compiler.placement.report import summary

    placed = place(session.graph, session.resolved, session.task)
    if placed.trivial:
        reporter.info(f"placement {placed.plan.algorithm}: every op on device 0")
        return None
    if not engine.places_ops:
        raise CheckError(
            f"`placement = {asked.kind}` puts the model's ops on {placed.used} devices, but the "
            f"{engine.title} backend runs a training step as one program on one device",
            span=placed.span,
            code="cannot-place",
            hint="train with --backend tf (it pins each op to its device), or set "
            "distribution.placement = single",
        )
    reporter.info(f"placement ({engine.title} devices):\n{summary(placed.problem, placed.plan)}")
    return placed


def check_mesh_processes(resolved: ResolvedExperiment, cluster: Cluster) -> None:
    """A synchronous run of several processes trains one model over every process's devices: a
    mesh smaller than the processes (the default `{data: 1}`) would have each train alone, and
    their collective checkpoint fail after training. The spec and the process count decide it,
    so `check_strategy` refuses it before the processes join (a group that would only fail
    then starts no backend)."""
    mesh = mesh_of(resolved)
    processes = cluster.num_processes
    if cluster.several and "ps" not in cluster.spec and math.prod(mesh.values()) < processes:
        shown = ", ".join(f"{a}: {n}" for a, n in mesh.items())
        raise CheckError(
            f"a run of {processes} processes trains one model over every process's devices, "
            f"but the mesh {{{shown}}} spans {devices_text(math.prod(mesh.values()))}",
            span=resolved.span("distribution.mesh") or resolved.span("distribution"),
            code="mesh-devices",
            expected=f"a mesh of at least {processes} devices (processes x devices each)",
            found=f"{{{shown}}}",
            hint=f"set the mesh to the run's devices: --set \"distribution.mesh={{data: "
            f'{processes}}}" for one device per process (more with several each); or train '
            "in one process",
        )


def plan_mesh(
    session: Session, placement: Placement | None, cluster: Cluster
) -> ShardingPlan | None:
    """The sharding plan of the spec's mesh, or None for one device; the training batches must
    split over its data axes, and the mesh span the run's processes (`check_mesh_processes`)."""
    resolved = session.resolved
    check_mesh_processes(resolved, cluster)
    mesh = mesh_of(resolved)
    if math.prod(mesh.values()) == 1:
        return None
    if placement is not None:
        raise CheckError(
            "a run either places ops on devices (distribution.placement) or shards over a mesh "
            "(distribution.mesh), not both",
            span=resolved.span("distribution.mesh"),
            code="place-and-shard",
            hint="set distribution.placement = single, or the mesh to {data: 1}",
        )
    plan = plan_sharding(session.graph, resolved, session.task)
    sizes = [b.batch_size for b in session.pipeline.buckets]
    check_batches(plan, sizes, resolved.span(f"{session.task}.input.buckets"))
    if wants_pipeline(resolved):
        plan.pipeline = pipeline_for(session.compiled, resolved, session.task, plan.mesh)
        check_batch_sizes(plan.pipeline, sizes, plan.batch_split)
    return plan


def devices_text(n: int) -> str:
    return f"{n} device" + ("s" if n != 1 else "")
