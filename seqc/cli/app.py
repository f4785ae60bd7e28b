"""The `seqc` command line: the root app, its commands by group, and `main`.

Exit codes: 0 success, 1 `fmt --check` found files to reformat, 2 a spec or usage error, 3 an
internal error, 141 the reader of the output closed the pipe (`seqc check x | head -1`), as a
shell reports a writer that SIGPIPE ended (130 and 143: a run stopped by SIGINT or SIGTERM with
a checkpoint). Every command runs under one error guard (`seqc.cli.guard`); `--debug` adds the
Python traceback, and lets the libraries the backends load log as they like
(`seqc.cli.logs`).

User text is printed literally: the consoles interpret neither rich markup (`[bold]`) nor emoji
codes (`:smile:`), so a spec line, a file name or a decoded sample shows as written and a caret
stays under its column (`seqc.cli.console`).

The front end's commands (`seqc.cli.frontend`) are here from the start; the others load with
their group's module when the command line names one (`LAZY_COMMANDS`), so `seqc check` and
`seqc fmt`, run on every save in an editor, never pay for numpy, the data pipeline or a
backend.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Annotated

import click
import typer
from typer.core import TyperGroup

from seqc.cli import frontend
from seqc.cli.guard import CLOSED_PIPE, closed_pipe, exit_if_extra_missing, state
from seqc.cli.logs import quiet_libraries_too, quiet_native_logs

LAZY_GROUPS = {"data": "seqc.cli.data"}
"""Command groups (`seqc data prepare`) by the module that holds their Typer app (`APP`)."""

LAZY_COMMANDS = {
    "diff": "seqc.cli.diff",
    "train": "seqc.cli.train",
    "eval": "seqc.cli.eval",
    "decode": "seqc.cli.decode",
    "rescore": "seqc.cli.rescore",
    "convert": "seqc.cli.weights",
    "average": "seqc.cli.weights",
    "choose": "seqc.cli.choose",
    "export": "seqc.cli.export",
    "place": "seqc.cli.devices",
    "profile": "seqc.cli.devices",
    "calibrate": "seqc.cli.devices",
    "launch": "seqc.cli.launch",
    "serve": "seqc.cli.serve",
    "sweep": "seqc.cli.sweep",
}
"""The commands loaded on demand (those that run experiments, and `diff`, which reads run
directories), by the module that holds them (in its `COMMANDS`), in `--help` order."""

HEAVY_COMMANDS = (*LAZY_GROUPS, *LAZY_COMMANDS)
"""Every command loaded on demand, in `--help` order: imported when the command line names
one, or asks for the list of all commands (`seqc --help`)."""


def _load_command(name: str) -> click.Command:
    """A lazy command (or group) as click runs it, from its module."""
    if name in LAZY_GROUPS:
        try:
            module = importlib.import_module(LAZY_GROUPS[name])
        except ImportError as e:
            exit_if_extra_missing(e)
            raise
        return typer.main.get_group(module.APP)
    try:
        module = importlib.import_module(LAZY_COMMANDS[name])
    except ImportError as e:  # loading the command is outside its guard
        exit_if_extra_missing(e)
        raise
    one = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    one.command(name)(module.COMMANDS[name])
    return typer.main.get_group(one).commands[name]


class _LazyGroup(TyperGroup):
    """The top-level group: the front end's commands, plus `HEAVY_COMMANDS` loaded on demand."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        own = super().list_commands(ctx)
        return [*own, *(n for n in HEAVY_COMMANDS if n not in own)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in HEAVY_COMMANDS:
            command = _load_command(cmd_name)
            quiet_libraries_too()  # it loads the libraries that log
        return command


app = typer.Typer(
    name="seqc",
    cls=_LazyGroup,
    help="Compile .seq sequence-model specs and run them: check and format a spec, show what "
    "it resolves and lowers to, train it on JAX or TensorFlow (one process or several), "
    "evaluate and decode, export ONNX, TFLite and SavedModel artifacts, place and profile a "
    "training step on devices, prepare the example corpora.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

for _name, _command in frontend.COMMANDS.items():
    app.command(_name)(_command)


@app.callback()
def _main(
    debug: Annotated[
        bool, typer.Option("--debug", help="Show Python tracebacks with errors.")
    ] = False,
) -> None:
    state["debug"] = debug


def main() -> None:
    """The `seqc` entry point: the app, with the libraries' log lines kept out of its output
    unless `--debug`, and a closed output pipe reported as one however it was met."""
    stdout = _identity(1)
    try:
        if "--debug" in sys.argv[1:]:
            app()
            return
        undo = quiet_native_logs()
        try:
            app()
        finally:
            undo()
    except SystemExit as e:
        # A closed pipe met outside seqc's own handlers (typer's and rich's: `--help`, a usage
        # error, a table) exits 1 there, the code `fmt --check` gives for "would reformat".
        if e.code not in (0, None, CLOSED_PIPE) and _output_closed(stdout):
            closed_pipe()
            raise SystemExit(CLOSED_PIPE) from None
        raise


def _identity(fd: int) -> tuple[int, int] | None:
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _output_closed(stdout: tuple[int, int] | None) -> bool:
    """Whether a write to stdout or stderr met a closed pipe and a library handled it: rich
    puts /dev/null in stdout's place, typer wraps the streams so their flush at exit is quiet."""
    devnull = os.stat(os.devnull)
    now = _identity(1)
    if stdout is not None and now != stdout and now == (devnull.st_dev, devnull.st_ino):
        return True
    return any(type(s).__name__.endswith("PacifyFlushWrapper") for s in (sys.stdout, sys.stderr))
