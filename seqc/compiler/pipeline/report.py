"""`seqc place --pipeline` and `seqc show --sharding`: a pipeline plan's stages, each one's
layers, estimated time per micro-batch and memory per device, and the bubble its schedule
implies. Plain data (`seqc.compiler.tables.Section`); the command line lays it out."""

from __future__ import annotations

from seqc.compiler.pipeline.plan import PipelinePlan
from seqc.compiler.tables import Section, Table, show_bytes


def pipeline_report(plan: PipelinePlan, task: str, mesh: dict[str, int]) -> Section:
    columns = ("stage", "layers", "ms / micro-batch", "params/device", "memory/device")
    table = Table(columns, right=frozenset(columns[2:]))
    for s in plan.stages:
        layers = s.units[0] if len(s.units) == 1 else f"{s.units[0]} .. {s.units[-1]}"
        table.rows.append(
            (
                str(s.index),
                f"{layers} ({len(s.units)})",
                f"{s.time_s * 1e3:.3f}",
                show_bytes(s.param_bytes),
                show_bytes(s.memory_bytes),
            )
        )
    slowest = max(s.time_s for s in plan.stages)
    mean = sum(s.time_s for s in plan.stages) / plan.count
    after = [
        f"schedule {plan.schedule}: {plan.microbatches} micro-batches through {plan.count} "
        f"stages, bubble (S - 1) / (M + S - 1) = {plan.bubble:.1%} of each stage's step",
        f"balance: the slowest stage {slowest * 1e3:.3f} ms against a mean of "
        f"{mean * 1e3:.3f} ms per micro-batch ({slowest / mean if mean else 1.0:.2f}x); "
        f"estimated step {plan.step_time_s * 1e3:.2f} ms",
    ]
    if plan.memory_limit is not None:
        worst = max(s.memory_bytes for s in plan.stages)
        after.append(
            f"memory: the fullest stage {show_bytes(worst)} of the "
            f"{show_bytes(plan.memory_limit)} a device has ({worst / plan.memory_limit:.1%})"
        )
    shown = ", ".join(f"{a}: {n}" for a, n in mesh.items())
    return Section(f"{task} pipeline", f" on mesh {{{shown}}}", table=table, after=after)
