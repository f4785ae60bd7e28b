"""A pipeline's stages on the terminal: `seqc show --sharding` (after the params' table) and
`seqc place --pipeline` print the same report (`seqc.compiler.pipeline.report`), then refuse a
stage over its device's memory, with the numbers already on screen."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from seqc.cli.console import print_section
from seqc.spec.errors import UsageError


def show_pipeline(plan: Any, r: Any, task: str) -> None:
    """`plan`: a `ShardingPlan` with its pipeline."""
    from seqc.compiler.pipeline.plan import check_stage_memory
    from seqc.compiler.pipeline.report import pipeline_report

    print_section(pipeline_report(plan.pipeline, task, plan.mesh))
    if plan.pipeline.memory_limit is not None:
        check_stage_memory(plan.pipeline, plan.pipeline.memory_limit, r)


def place_pipeline(spec: Path, experiment: str | None, set_: list[str] | None) -> None:
    """`seqc place --pipeline`: the experiment's pipeline stages."""
    from seqc.compiler.pipeline.plan import wants_pipeline
    from seqc.compiler.sharding_report import sharding_report
    from seqc.resolve.experiment import resolve
    from seqc.resolve.program import load_program

    program = load_program(spec)
    r = resolve(program, experiment, set_ or [])
    if not wants_pipeline(r):
        raise UsageError(
            f"experiment `{r.name}` has no pipeline: its mesh has no stage axis",
            code="no-pipeline",
            hint="add `mesh = {stage: 2}` and `pipeline = gpipe(microbatches = 8)` to its "
            "distribution block (or --set them)",
        )
    for task in r.tasks:
        _, plan = sharding_report(program, r, task)
        show_pipeline(plan, r, task)
