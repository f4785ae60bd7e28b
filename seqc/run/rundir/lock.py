"""A lock on a run directory while a run owns it, so two runs never write into one.

An OS file lock (`flock` on `RUN/.lock`) rather than a marker file: the kernel releases it when the
owning process ends, however it ends (a kill -9 included), so a dead run never leaves a stale
lock behind. The owner writes its pid into the file, for the message a second run gets.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType

from seqc.spec.errors import FileError

LOCK = ".lock"


class RunLock:
    """`with RunLock(path):` owns the run directory `path` (created if missing)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def check(self) -> None:
        """Raise `run-locked` if another run owns the directory now (writes nothing)."""
        lock = self.path / LOCK
        if not lock.is_file():
            return
        try:
            fd = os.open(lock, os.O_RDONLY)
        except OSError:
            return
        try:
            self._try(fd)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _try(self, fd: int) -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise FileError(
                f"run directory {self.path} is in use by another seqc run (pid {owner})",
                path=str(self.path),
                code="run-locked",
                hint="wait for that run to finish (or stop it), or choose another --run-dir",
            ) from None

    def __enter__(self) -> RunLock:
        lock = self.path / LOCK
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise unwritable(self.path, e) from None
        try:
            self._try(fd)
        except FileError:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def unwritable(path: Path, e: OSError) -> FileError:
    """The error of a run directory seqc cannot write to (read-only, a file, no space...)."""
    what = "is a file, not a directory" if path.is_file() else f"cannot be written ({e.strerror})"
    return FileError(
        f"run directory {path} {what}",
        path=str(path),
        code="run-dir-unwritable",
        hint="choose another --run-dir, or make this one writable",
    )
