"""Stopping a training run cleanly on SIGINT (Ctrl-C) or SIGTERM (what schedulers send).

The first signal only asks: the loop finishes the step in flight, writes a checkpoint, flushes
its metrics and ends with `Interrupted`, whose message says how to resume. A second signal
aborts at once, for a user who cannot wait for the checkpoint: the process ends there (exit
128 + the signal), as a kill would end it. Not a KeyboardInterrupt: raised in the middle of a
checkpoint write, it would leave orbax's writer threads running into interpreter shutdown
(their tracebacks), while ending the process leaves the last complete checkpoint intact (they
are written to a temporary folder and renamed) and at most a torn last metrics line, which a
resume drops. Handlers are installed only in the main thread (Python delivers signals there)
and restored on exit.

`PARENT_GONE` (SIGUSR1) is the signal a sweep's trial asks the kernel to send when the worker
that started it dies (`PR_SET_PDEATHSIG`). It stops the run like the first SIGTERM, but a repeat
never aborts: Linux sends the parent-death signal again each time the orphan is handed to
another of the dying worker's threads, several times within milliseconds, and a SIGTERM used
for it read those echoes as a user's second signal and lost the stop checkpoint.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

PARENT_GONE = signal.SIGUSR1
SIGNALS = (signal.SIGINT, signal.SIGTERM, PARENT_GONE)
NAMES = {
    signal.SIGINT: "SIGINT",
    signal.SIGTERM: "SIGTERM",
    PARENT_GONE: "SIGUSR1 (the process that started this run ended)",
}


class Interrupted(Exception):
    """Training stopped on a signal after writing a checkpoint at `step`."""

    def __init__(self, step: int, signum: int) -> None:
        super().__init__(f"stopped by {NAMES.get(signum, signum)} at step {step}")
        self.step = step
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """128 + the signal number, as a shell reports a process a signal ended."""
        return 128 + int(self.signum)


class StopRequests:
    """`with StopRequests(on_first) as stop:` ... `if stop.signum is not None:` stop cleanly."""

    def __init__(self, on_first: Callable[[int], None] | None = None) -> None:
        self.signum: int | None = None
        self._on_first = on_first
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None and signum == PARENT_GONE:
            return  # the kernel's echo of the parent's death: already stopping
        if self.signum is not None:  # the second: abort now
            sys.stderr.write(f"\n{NAMES.get(signum, signum)} again: aborted\n")
            sys.stderr.flush()
            os._exit(128 + int(signum))
        self.signum = signum
        if self._on_first is not None:
            self._on_first(signum)

    def __enter__(self) -> StopRequests:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in SIGNALS}
        return self

    def _restore(self) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._restore()
