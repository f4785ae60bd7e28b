"""Parse some of a program's imports in a forked helper while this process parses the others.

A cold `seqc check` of a large program (nothing in the parse cache) spends most of its time in
Lark's lexer and LALR loop, one file after another, on one core. When a file imports several
files that are not cached yet, `load_program` forks one helper that parses the later ones into
the parse cache while it parses the earlier ones itself; when it reaches a file the helper
took, it waits for the helper and loads that file's cache entry, like any cached file.

The helper only fills the cache, so it cannot change an outcome: the loader still reads,
checks and loads every file itself, in the same order, and a file the helper could not parse
(a syntax error, a crash, a cache folder that cannot be written) simply has no entry, so the
loader parses it and reports its error as it always did.

Forking is only safe in a plain process, so a helper is started only on Linux, in a process
with a single Python thread and no TensorFlow or JAX loaded (the language server, a training
run and pytest-xdist's workers parse on their own), with the parse cache on, on a machine with
at least two cores, and for at least `MIN_BYTES` of uncached text. `SEQC_PARALLEL_PARSE=0` turns
it off. At most one helper runs at a time; it is waited for (or killed after `TIMEOUT_S`) before
the loader goes on, so no process outlives a load.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from seqc.spec import parse_cache
from seqc.spec.files import peek_spec

ENV = "SEQC_PARALLEL_PARSE"
"""`0` (or `off`, `false`, `no`) disables the helper."""

MIN_BYTES = 64 * 1024
"""Less uncached text than this is parsed faster than a fork and a cache round trip."""

TIMEOUT_S = 60.0
"""The longest the loader waits for a helper before killing it and parsing the files itself."""

_active = threading.Lock()
"""Held while a helper runs: imports found inside the files being parsed start no second one."""


class Helper:
    """A forked process parsing `paths` into the parse cache."""

    def __init__(self, pid: int, done: int, paths: Sequence[Path]) -> None:
        self.pid, self.done, self.paths = pid, done, set(paths)
        self.finished = False

    def takes(self, path: Path) -> bool:
        return path in self.paths

    def cancel(self) -> None:
        """Stop the helper now (the load failed: its work is no longer wanted) and reap it."""
        if not self.finished:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
        self.wait()

    def wait(self) -> None:
        """Until the helper exits (killed after `TIMEOUT_S`); idempotent."""
        if self.finished:
            return
        self.finished = True
        try:
            ready, _, _ = select.select([self.done], [], [], TIMEOUT_S)
            if not ready:
                with contextlib.suppress(OSError):
                    os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (OSError, ValueError):
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
        finally:
            with contextlib.suppress(OSError):
                os.close(self.done)
            _active.release()


def enabled() -> bool:
    """Whether forking a helper is safe and could pay off here (see the module docstring)."""
    if os.environ.get(ENV, "1").strip().lower() in {"0", "off", "false", "no"}:
        return False
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return False
    if threading.active_count() != 1 or "tensorflow" in sys.modules or "jax" in sys.modules:
        return False
    if parse_cache.cache_dir() is None:
        return False
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return cores >= 2


def start(candidates: Sequence[Path], parse: Callable[[Path], object]) -> Helper | None:
    """Fork a helper for the later half (by size) of the `candidates` not in the parse cache,
    or None when it would not pay or is not safe. `parse` is how the helper parses one path
    (`parse_file`, which writes the cache entry)."""
    if len(candidates) < 2 or not enabled():
        return None
    sizes: list[tuple[Path, int]] = []
    for path in candidates:
        text = peek_spec(path)  # bounded: a pipe or a device is never read
        if text is None:
            continue  # the loader reports it when it gets there
        if not parse_cache.holds(text, str(path)):
            sizes.append((path, len(text)))
    total = sum(size for _, size in sizes)
    if len(sizes) < 2 or total < MIN_BYTES:
        return None
    later: list[Path] = []
    taken = 0
    for path, size in reversed(sizes):  # the loader reaches these last
        if taken + size > total / 2 and later:
            break
        later.append(path)
        taken += size
    if not _active.acquire(blocking=False):
        return None
    try:
        done, signal_done = os.pipe()
        pid = os.fork()
    except OSError:
        _active.release()
        return None
    if pid == 0:  # the helper: parse, signal, exit without running the parent's cleanups
        try:
            os.close(done)
            for path in reversed(later):
                with contextlib.suppress(BaseException):
                    parse(path)
            os.write(signal_done, b"1")
        finally:
            os._exit(0)
    os.close(signal_done)
    return Helper(pid, done, later)
