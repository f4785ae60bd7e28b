"""`seqc launch -n N [--ps K] -- train FILE -e EXP ...`: a seqc command run as a group of local
processes (`seqc.run.processes.launch`), exiting as the group's first failure did."""

from __future__ import annotations

from typing import Annotated

import typer

from seqc.cli.console import ConsoleReporter
from seqc.cli.guard import guarded
from seqc.run.processes.launch import GRACE_S, launch


@guarded
def launch_cmd(
    command: Annotated[
        list[str] | None,
        typer.Argument(help="The seqc command each process runs, after `--`.", show_default=False),
    ] = None,
    n: Annotated[int, typer.Option("-n", "--processes", help="Worker processes.")] = 2,
    ps: Annotated[
        int,
        typer.Option(
            "--ps", help="Parameter servers (TF asynchronous training; adds a chief process)."
        ),
    ] = 0,
    grace: Annotated[
        float,
        typer.Option(
            help="Seconds the others get to checkpoint and stop when one process fails, "
            "before they are killed."
        ),
    ] = GRACE_S,
    pin: Annotated[
        bool, typer.Option(help="Pin worker i to CPU core i (one core per worker process).")
    ] = False,
) -> None:
    """Run a seqc command as a group of local processes: `seqc launch -n 2 -- train FILE -e EXP`."""
    code = launch(list(command or []), n, ps, grace, pin, ConsoleReporter())
    if code:
        raise typer.Exit(code)


COMMANDS = {"launch": launch_cmd}
"""This module's commands by name (`seqc.cli.app.LAZY_COMMANDS`)."""
