"""Commands about devices: `seqc place` (a training step placed on the spec's devices),
`seqc profile` (each op of a step measured on this machine, for the placer) and `seqc
calibrate` (this machine's device numbers for the placement cost model). The work is
`seqc.run.devices.place`, `seqc.run.devices.profile` and `seqc.run.devices.calibrate`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from seqc.cli.console import ConsoleReporter, err, out, plain_table
from seqc.cli.guard import guarded
from seqc.cli.options import ExpOpt, FileArg, SetOpt, TokenizerCacheOpt

if TYPE_CHECKING:
    from seqc.compiler.graph import Op


@guarded
def place_cmd(
    spec: FileArg,
    experiment: ExpOpt,
    algorithm: Annotated[
        str | None,
        typer.Option(
            "--algorithm",
            "-a",
            help="m_topo, m_etf, m_sct or single (default: the experiment's "
            "distribution.placement).",
        ),
    ] = None,
    json_file: Annotated[
        Path | None, typer.Option("--json", help="Write the plan as JSON to this file.")
    ] = None,
    gantt_file: Annotated[
        Path | None,
        typer.Option(
            "--gantt",
            help="Draw a Gantt chart with memory per device to this file (.png, .svg or .pdf).",
        ),
    ] = None,
    set_: SetOpt = None,
    cache_dir: TokenizerCacheOpt = None,
    fuse: Annotated[
        bool,
        typer.Option(help="Fuse single-reader chains into one node (Baechi's co-placement)."),
    ] = True,
    keep_activations: Annotated[
        bool,
        typer.Option(
            "--keep-activations",
            help="Count each activation as held until backward (a training step's real peak), "
            "not only until its readers ran.",
        ),
    ] = False,
    task: Annotated[
        str | None,
        typer.Option(
            "--task",
            help="Place this task's graph only (a multi-task experiment is placed whole "
            "by default).",
        ),
    ] = None,
    profile: Annotated[
        Path | None,
        typer.Option(
            "--profile",
            help="Op times measured by `seqc profile --json F`, in place of the estimates.",
        ),
    ] = None,
    pipeline: Annotated[
        bool,
        typer.Option(
            "--pipeline",
            help="Print the pipeline's stages (distribution.pipeline over the mesh's stage "
            "axis): each one's layers, time and memory, and the schedule's bubble.",
        ),
    ] = False,
) -> None:
    """Place a training step on the experiment's devices with a Baechi placer; prints memory
    and busy time per device and the step time against its lower bound. With --pipeline, the
    stages of the experiment's pipeline instead."""
    if pipeline:
        from seqc.cli.pipeline_view import place_pipeline

        place_pipeline(spec, experiment, set_)
        return
    from seqc.run.devices.place import place_experiment

    place_experiment(
        spec,
        experiment,
        algorithm,
        json_file,
        gantt_file,
        set_,
        cache_dir,
        fuse=fuse,
        keep_activations=keep_activations,
        task=task,
        profile=profile,
        reporter=ConsoleReporter(),
    )


@guarded
def profile_cmd(
    spec: FileArg,
    experiment: ExpOpt,
    backend: Annotated[str, typer.Option("--backend", help="jax or tf.")] = "jax",
    json_file: Annotated[
        Path | None, typer.Option("--json", help="Write the table for `seqc place --profile`.")
    ] = None,
    reps: Annotated[int, typer.Option("--reps", help="Timed runs of each op.", min=1)] = 10,
    task: Annotated[str | None, typer.Option("--task", help="The task to profile.")] = None,
    set_: SetOpt = None,
) -> None:
    """Measure each op of a training step (forward and backward) on this machine's device;
    write the table `seqc place --profile` plans with."""
    from seqc.run.devices.profile import profile_experiment, summary

    on_op = _op_line if err.is_terminal else None
    profiled = profile_experiment(
        spec, experiment, backend, reps, task, set_, ConsoleReporter(), on_op
    )
    if err.is_terminal:
        err.print()
    columns = ("op kind", "ops", "measured ms", "estimated ms", "measured / estimated")
    table = plain_table(columns, right=columns[1:])
    for kind, n, measured, estimated in summary(profiled.rows):
        ratio = f"{measured / estimated:.2f}" if estimated > 0 else "-"
        table.add_row(kind, str(n), f"{measured:.3f}", f"{estimated:.3f}", ratio)
    out.print(table)
    out.print(
        f"measured ops: {profiled.measured_ms:.2f} ms a step, "
        f"estimated {profiled.estimated_ms:.2f} ms"
    )
    if json_file is not None:
        profiled.write(json_file)
        out.print(f"profile: {json_file}")


def _op_line(n: int, total: int, op: Op) -> None:
    """The op being measured, on one terminal line that the next overwrites."""
    err.print(f"  op {n + 1}/{total}: {op.kind} ({op.layer})", end="\r")


@guarded
def calibrate_cmd(
    quick: Annotated[bool, typer.Option(help="Smaller sizes, fewer repetitions.")] = False,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the measurements as JSON.")
    ] = False,
) -> None:
    """Measure this machine's flops, memory bandwidth, and link and latency between two logical
    devices, and print a device line for a distribution block."""
    from seqc.run.devices.calibrate import described, measure

    err.print("measuring (matmul, memory copy, transfers between two logical CPUs) ...")
    m = measure(quick)
    if json_out:
        out.print(json.dumps(m, indent=2))
        return
    for line in described(m):
        out.print(line)


COMMANDS = {"place": place_cmd, "profile": profile_cmd, "calibrate": calibrate_cmd}
"""This module's commands by name (`seqc.cli.app.LAZY_COMMANDS`)."""
