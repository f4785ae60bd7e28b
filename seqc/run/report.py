"""How library code in `seqc.run` tells its user what it does: a `Reporter` the caller supplies.

Why: the same training loop, evaluation or process launcher runs under `seqc train` (two rich
consoles and a progress bar, `seqc.cli.console.ConsoleReporter`), inside a test or a benchmark
(plain lines, or none), and under whatever front end comes next. The library says *what* to
report; the caller decides *how*. Three kinds of line and one bar:

- `info`: what is being done or was found (`resumed from step 40`), for a person watching: a
  command line prints it on stderr, so a pipe reading stdout never sees it;
- `warn`: something the user should know and may act on, printed as `warning: ...`;
- `result`: a figure or a path the call exists to give (`test_bleu: 21.30 ...`), on stdout;
- `progress`: the training loop's bar (step, loss, tokens/s).

Lines are plain text, printed as written: no markup is read in them.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Protocol


class StepProgress(Protocol):
    """A training loop's progress bar, open while the loop runs (`with`)."""

    def __enter__(self) -> StepProgress: ...

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None: ...

    def update(
        self, step: int | None = None, *, loss: str | None = None, tokens_per_s: float | None = None
    ) -> None:
        """The steps done, the latest training loss (text: one task's, or each task's), and
        the throughput; each as it becomes known."""


class Reporter(Protocol):
    """Where a library call's lines go (see the module docstring)."""

    def info(self, text: str) -> None: ...

    def warn(self, text: str) -> None: ...

    def result(self, text: str) -> None: ...

    def progress(self, total: int, start: int) -> StepProgress:
        """A bar for a loop of `total` steps that starts after step `start` (a resume)."""
        ...


class NoProgress:
    """A progress bar that shows nothing: `--no-progress`, and reporters without a terminal."""

    def __enter__(self) -> NoProgress:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        return None

    def update(
        self, step: int | None = None, *, loss: str | None = None, tokens_per_s: float | None = None
    ) -> None:
        return None


class PlainReporter:
    """Plain lines on stderr (info, warnings) and stdout (results), no bar: what library code
    reports through when its caller supplies no reporter (a test, a notebook). The streams are
    looked up at each line, so a capture set up later (pytest's) sees them."""

    def info(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def warn(self, text: str) -> None:
        print(f"warning: {text}", file=sys.stderr, flush=True)

    def result(self, text: str) -> None:
        print(text, file=sys.stdout, flush=True)

    def progress(self, total: int, start: int) -> StepProgress:
        return NoProgress()


class SilentReporter:
    """Reports nothing: for benchmarks, whose own output is the measurement."""

    def info(self, text: str) -> None:
        return None

    def warn(self, text: str) -> None:
        return None

    def result(self, text: str) -> None:
        return None

    def progress(self, total: int, start: int) -> StepProgress:
        return NoProgress()
