"""`seqc show --sharding`: each param's partition spec and bytes per device, and the total per
device against the device memory the spec states.

What a run over the mesh would refuse, it refuses too, at the same line: a mesh larger than the
devices listed (before the table: there is no plan to show), and a share per device larger
than a device's memory (after the table, so the bytes that do not fit are on the screen). On a
mesh of one device, which a run does not plan, that is a warning.

The report is plain data (`seqc.compiler.tables.Section`); the command line lays it out, then
calls `check_memory` on the plan it comes with."""

from __future__ import annotations

from seqc.compiler.compile import CompiledTask, compile_task
from seqc.compiler.pipeline.plan import pipeline_for, wants_pipeline
from seqc.compiler.pipeline.stages import readers
from seqc.compiler.run_checks import check_mesh_devices
from seqc.compiler.sharding import ShardingPlan, device_memory, plan_sharding, show_bytes
from seqc.compiler.tables import Section, Table
from seqc.resolve.experiment import ResolvedExperiment
from seqc.resolve.program import Program


def sharding_report(
    program: Program, r: ResolvedExperiment, task: str
) -> tuple[Section, ShardingPlan]:
    """`task`'s params over the experiment's mesh, and the plan: a mesh larger than the devices
    is refused here; a share per device larger than a device's memory is refused by
    `seqc.compiler.sharding.check_memory(plan, r)`, which the caller runs once the report is
    shown."""
    check_mesh_devices(r)
    compiled = compile_task(program, r, task)
    plan = plan_sharding(compiled.graph, r, task, memory=False)
    if wants_pipeline(r):
        plan.pipeline = pipeline_for(compiled, r, task, plan.mesh, memory=False)
        _staged_origins(plan, compiled)
    mesh = ", ".join(f"{a}: {n}" for a, n in plan.mesh.items())
    columns = ("param", "shape", "spec", "per device", "bytes/device", "from")
    table = Table(columns, right=frozenset({"bytes/device"}))
    for p in plan.params.values():
        spec = "[" + ", ".join(a or "none" for a in p.spec) + "]"
        shard = "x".join(str(d) for d in plan.shard_shape(p.name)) or "scalar"
        shape = "x".join(str(d) for d in p.shape) or "scalar"
        table.rows.append(
            (p.name, shape, spec, shard, show_bytes(p.device_bytes(plan.mesh)), p.origin)
        )
    total = plan.device_bytes()
    whole = sum(p.device_bytes({a: 1 for a in plan.mesh}) for p in plan.params.values())
    limit = device_memory(r)
    slots = compiled.train.optimizer.slots
    kept = plan.training_bytes(slots)
    line = (
        f"params per device: {show_bytes(total)} of {show_bytes(whole)}; with gradients and the "
        f"optimizer's {slots} tensor(s) per param about {show_bytes(kept)}"
    )
    if limit is not None:
        line += f", against {show_bytes(limit)} of device memory ({kept / limit:.1%})"
    after = [line]
    if plan.pipeline is not None:  # the figures above count every stage's params
        after = [
            f"params: {show_bytes(whole)} in all; under the pipeline each device holds its "
            "stage's (the table's `stage k`) and the shared ones: the stages' figures follow"
        ]
    if limit is not None and kept > limit and plan.trivial:
        after.append(
            f"warning: {show_bytes(kept)} do not fit the {show_bytes(limit)} of one device; a "
            "placement (distribution.placement) or a mesh (distribution.mesh) spreads them"
        )
    rest = f" on mesh {{{mesh}}}: {plan.devices} device(s)"
    return Section(f"{task}.model", rest, table=table, after=after), plan


def _staged_origins(plan: ShardingPlan, compiled: CompiledTask) -> None:
    """Under a pipeline, each param's row says which stage holds it (`shared`: several stages
    read it, so every device holds it whole)."""
    import dataclasses

    assert plan.pipeline is not None
    held_by = readers(plan.pipeline.split(compiled.training_graph), compiled.train_criterion)
    for name, p in plan.params.items():
        held = held_by.get(name, set())
        where = f"stage {min(held)}" if len(held) == 1 else "shared"
        plan.params[name] = dataclasses.replace(p, origin=f"{where}, {p.origin}")
