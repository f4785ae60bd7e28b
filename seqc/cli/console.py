"""The command line's two consoles (results on stdout, messages on stderr), shared by `seqc.cli`
and the run commands.

User text is printed literally: neither console interprets rich markup (`[bold]`) or emoji codes
(`:smile:`), so a spec line, a path or a decoded sample shows as written. Styles are given as
`Text` spans (`styled`), never as markup inside a string. Off a terminal (pipes, CI logs) rich
would assume 80 columns and cut table cells, so stdout is 200 wide there.
"""

from __future__ import annotations

import errno
import sys

from rich.console import Console
from rich.text import Text


class _Console(Console):
    """rich's console, except for a closed pipe: rich exits 1 at once (the code `fmt --check`
    gives for "would reformat"); here the `BrokenPipeError` goes on to the command line's
    handler, which gives every command the same exit for it (`seqc.cli.CLOSED_PIPE`)."""

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
