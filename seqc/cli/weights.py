"""Commands on trained weights: `seqc convert` (into the other backend's format) and `seqc
average` (the mean of a run's last checkpoints). The work is `seqc.run.weights.convert` and
`seqc.run.weights.average`; the results load with --checkpoint in eval, decode and export."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from seqc.backends.registry import title
from seqc.cli.console import err, out
from seqc.cli.guard import guarded
from seqc.run.weights.average import average
from seqc.run.weights.convert import convert_weights


@guarded
def convert_cmd(
    source: Annotated[
        Path, typer.Argument(help="A run directory or checkpoints folder.", show_default=False)
    ],
    to: Annotated[str, typer.Option("--to", help="Backend format to write: jax or tf.")],
    out_dir: Annotated[Path, typer.Option("--out", help="New folder for the converted weights.")],
    step: Annotated[
        int | None, typer.Option(help="Step of the checkpoint (default: the latest).")
    ] = None,
) -> None:
    """Write a checkpoint's weights in the other backend's format, tensor by tensor by layer
    path; the result loads with --checkpoint in eval, decode and export."""
    done = convert_weights(source, to, out_dir, step)
    out.print(
        f"converted {done.tensors} tensors ({done.nbytes / 2**20:.1f} MiB) of step {done.step} "
        f"from {title(done.source_backend)} to {title(done.backend)}: {done.path}"
    )
    if done.dropped_state:
        err.print("the optimizer state stays behind: the converted checkpoint holds weights only")


@guarded
def average_cmd(
    run: Annotated[
        Path,
        typer.Argument(help="A run directory or its checkpoints folder.", show_default=False),
    ],
    last: Annotated[
        int, typer.Option("--last", help="Average the newest N checkpoints.", show_default=False)
    ],
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", help="New folder for the average (default RUN/averaged/...)."),
    ] = None,
) -> None:
    """Average the weights of a run's last N checkpoints (of either backend) into a new
    checkpoint in the same format, for eval, decode and export with --checkpoint."""
    done = average(run, last, out_dir)
    steps = ", ".join(str(s) for s in done.steps)
    out.print(
        f"averaged steps {steps} ({len(done.steps)} {title(done.backend)} checkpoints, "
        f"{done.tensors} tensors): {done.path}"
    )


COMMANDS = {"convert": convert_cmd, "average": average_cmd}
"""This module's commands by name (`seqc.cli.app.LAZY_COMMANDS`)."""
