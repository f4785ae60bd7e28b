"""The one error guard every `seqc` command runs under.

A `SeqcError` (a spec, usage, file, data, device or training error) is rendered located
(file:line:col, caret, expected/found, did-you-mean, hint) on stderr and exits 2; a nesting too
deep for Python is one of those too. Anything else is a bug in seqc: one line saying so, exit 3.
`--debug` shows the Python traceback as well. A reader of the output that went away
(`seqc check x | head -1`) exits 141, as a shell reports a writer that SIGPIPE ended.

Commands are wrapped where they are defined (`@guarded`), so a command runs under the guard
however it is mounted: under `seqc`, or on a Typer app of its own in a test.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer
from rich.text import Text

from seqc.cli.console import err, styled

if TYPE_CHECKING:
    from seqc.spec.errors import SeqcError

CLOSED_PIPE = 141
"""The exit code of any command whose output's reader went away (`seqc check x | head -1`),
as a shell reports a writer killed by SIGPIPE (128 + 13)."""

state = {"debug": False}
"""Whether `seqc --debug` was given: tracebacks are shown with errors."""

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def closed_pipe() -> typer.Exit:
    """Point stdout and stderr at /dev/null (nothing more can reach the reader, and Python's
    flush at exit would fail again and exit 120) and give the exit that says a pipe closed."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):  # no descriptor
            os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
    return typer.Exit(CLOSED_PIPE)


def run_guarded(fn: Callable[[], T], spec: Path | None = None) -> T:
    """Run a command body; turn seqc errors into a message and exit code 2 (see the module
    docstring). `spec` is the file the command was given, to name when nothing better locates
    an error."""
    try:
        return fn()
    except typer.Exit:
        raise
    except RecursionError as e:
        from seqc.spec.errors import too_deep

        if state["debug"]:
            traceback.print_exc()
        print_error(too_deep(e, str(spec) if spec is not None else None))
        raise typer.Exit(2) from None
    except BrokenPipeError:  # `seqc decode ... | head -1`: the reader has all it wanted
        raise closed_pipe() from None
    except Exception as e:
        from seqc.spec.errors import SeqcError  # imported here: a verdict hit never loads it

        if state["debug"]:
            traceback.print_exc()
        if isinstance(e, ImportError):
            exit_if_extra_missing(e)
        if isinstance(e, SeqcError):
            print_error(e)
            raise typer.Exit(2) from None
        # a bug in seqc, not in the spec (its message may quote the spec: made printable)
        from seqc.spec.printable import printable

        err.print(
            styled(
                ("internal error", "bold red"),
                f": {type(e).__name__}: {printable(str(e), lines=True)}\n"
                "This is a bug in seqc. Run again with --debug for the traceback and report it.",
            )
        )
        raise typer.Exit(3) from None


def exit_if_extra_missing(error: ImportError) -> None:
    """Exit 2 with the install line when `error` is a package an extra brings (see
    `seqc.cli.extras`); return for any other import error, which stays a bug (exit 3)."""
    from seqc.cli.extras import missing_extra

    hint = missing_extra(error)
    if hint is None:
        return
    command = " ".join(["seqc", *[a for a in sys.argv[1:2] if not a.startswith("-")]])
    err.print(styled(("error", "bold red"), f": {command}: {hint}"))
    raise typer.Exit(2) from None


def guarded(fn: F) -> F:
    """A command whose body runs under `run_guarded`; its signature (and so its options) is
    the command's own. The spec it names (its `spec` or `file` argument) locates an error
    nothing better locates."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        spec = kwargs.get("spec") or kwargs.get("file")
        return run_guarded(lambda: fn(*args, **kwargs), spec if isinstance(spec, Path) else None)

    return wrapper  # type: ignore[return-value]


def print_error(e: SeqcError) -> None:
    """A seqc error as the command line shows it: the location in bold, the message in red,
    expected/found in cyan, the caret line in red, the suggestion and hint in green."""
    lines = e.render().split("\n")
    head, rest = lines[0], lines[1:]
    loc, _, msg = head.partition(": ")
    err.print(styled((loc, "bold"), ": ", (msg, "bold red")))
    for line in rest:
        style = "cyan" if line.lstrip().startswith(("expected", "found")) else ""
        if line.strip().startswith("|") or ("^" in line and set(line.split("|")[-1]) <= {" ", "^"}):
            style = "bold red"
        if "did you mean" in line or line.strip().startswith("hint:"):
            style = "green"
        err.print(Text(line, style=style))
