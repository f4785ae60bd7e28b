"""The command line's two consoles (results on stdout, messages on stderr), and the `Reporter`
through which the libraries of `seqc.run` print under a command (`ConsoleReporter`).

User text is printed literally: neither console interprets rich markup (`[bold]`) or emoji codes
(`:smile:`), so a spec line, a path or a decoded sample shows as written. Styles are given as
`Text` spans (`styled`), never as markup inside a string. Off a terminal (pipes, CI logs) rich
would assume 80 columns and cut table cells, so stdout is 200 wide there.
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Iterable
from types import TracebackType
from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

if TYPE_CHECKING:  # rich's tables and bars load only when a command prints one
    from rich.table import Table

    from seqc.compiler.tables import Section
    from seqc.compiler.tables import Table as TextTable


class _Console(Console):
    """rich's console, except for a closed pipe: rich exits 1 at once (the code `fmt --check`
    gives for "would reformat"); here the `BrokenPipeError` goes on to the command line's
    handler, which gives every command the same exit for it (`seqc.cli.guard.CLOSED_PIPE`)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True  # nothing more reaches the reader: later prints are dropped
        raise BrokenPipeError(errno.EPIPE, "the output's reader closed the pipe")


out = _Console(
    highlight=False,
    markup=False,
    emoji=False,
    soft_wrap=True,
    width=None if sys.stdout.isatty() else 200,
)
err = _Console(stderr=True, highlight=False, markup=False, emoji=False, soft_wrap=True)


def styled(*parts: str | tuple[str, str]) -> Text:
    """A line from plain and (text, style) parts; no part is read as markup."""
    return Text.assemble(*parts)


def plain_table(columns: Iterable[str], right: Iterable[str] = ()) -> Table:
    """A borderless table, two spaces between columns, `right` aligned right (figures): how
    `seqc layers`, `show --graph`, `show --sharding` and `profile` lay out their figures.
    Cells added as `Text` are printed as written."""
    from rich.table import Table

    table = Table(box=None, padding=(0, 2))
    aligned = set(right)
    for col in columns:
        table.add_column(col, justify="right" if col in aligned else "left")
    return table


def rich_table(data: TextTable) -> Table:
    """A report's table (`seqc.compiler.tables.Table`) laid out as the commands print tables."""
    table = plain_table(data.columns, data.right)
    for row in data.rows:
        table.add_row(*(Text(cell) for cell in row))
    return table


def print_section(section: Section, console: Console = out) -> None:
    """A report (`seqc.compiler.tables.Section`): its heading in bold, its lines, its table, and
    the lines after it."""
    console.print(styled((section.heading, "bold"), section.rest))
    for line in section.lines:
        console.print(line)
    if section.table is not None:
        console.print(rich_table(section.table))
    for line in section.after:
        console.print(line)


class _StepBar:
    """`seqc train`'s progress bar (`seqc.run.report.StepProgress`): step of steps, the latest
    loss, tokens/s, elapsed time and an estimate of the rest."""

    def __init__(self, console: Console, total: int, start: int) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(
            TextColumn("[bold]step"),
            MofNCompleteColumn(),
            BarColumn(),
            TextColumn("loss {task.fields[loss]}"),
            TextColumn("{task.fields[tps]:,.0f} tok/s"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        # no loss yet: a dash, not "nan", which would read as a loss that diverged
        self._task = self._progress.add_task(
            "train", total=total, completed=start, loss="-", tps=0.0
        )

    def __enter__(self) -> _StepBar:
        self._progress.__enter__()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._progress.__exit__(kind, error, trace)

    def update(
        self, step: int | None = None, *, loss: str | None = None, tokens_per_s: float | None = None
    ) -> None:
        fields: dict[str, object] = {}
        if loss is not None:
            fields["loss"] = loss
        if tokens_per_s is not None:
            fields["tps"] = tokens_per_s
        self._progress.update(self._task, completed=step, **fields)


class ConsoleReporter:
    """What the libraries of `seqc.run` say under a command: notes and warnings on stderr,
    results on stdout, the training bar on stderr (`seqc.run.report.Reporter`)."""

    def info(self, text: str) -> None:
        err.print(text)

    def warn(self, text: str) -> None:
        err.print(f"warning: {text}")

    def result(self, text: str) -> None:
        out.print(text)

    def progress(self, total: int, start: int) -> _StepBar:
        return _StepBar(err, total, start)
