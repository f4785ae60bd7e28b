"""Hidden folders that a command builds its output in, beside the destination, before renaming
it into place (a prepared corpus, an exported artifact).

Why a module: a build interrupted by SIGKILL, a crash or a power cut cannot remove its folder,
and a later run cannot tell a dead run's folder from a live one's by its name alone. So each
folder's name carries the process that owns it (`.zipf.seqc-4242-k2j1x9`), and whoever makes a
new one in the same place first removes those whose owner is no longer running. While a
long build runs in one (`staged`), SIGTERM raises as Ctrl-C does, so the folder is removed then
too; Python's default would end the process on the spot.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

_OWNED = re.compile(r"^\..+\.seqc-(\d+)-[^.]+$")
"""`.LABEL.seqc-PID-RANDOM`: the names `staging_dir` gives."""


def staging_dir(parent: Path, label: str) -> Path:
    """A new, empty hidden folder in `parent` (made if missing) for building `label` in, owned
    by this process; the stale ones of dead processes in `parent` are removed first."""
    parent.mkdir(parents=True, exist_ok=True)
    sweep(parent)
    return Path(tempfile.mkdtemp(prefix=f".{label}.seqc-{os.getpid()}-", dir=parent))


@contextmanager
def staged(parent: Path, label: str) -> Iterator[Path]:
    """A staging folder (`staging_dir`) for the block to build in and rename into place; removed
    when the block ends (already gone if it was renamed). A SIGTERM during the block raises
    SystemExit (exit 143), so the folder is removed at once, not left to the next sweep.

    A raise from a signal handler can be lost: met while C code runs Python (a Cython module's
    init during an import clears what it raises), the build goes on. The block then finishes
    its output whole, and SystemExit is raised as it ends."""
    signalled: list[int] = []
    armed = [False]  # raise at a SIGTERM only while the block runs, not while making or removing

    def terminated(signum: int, frame: FrameType | None) -> None:
        signalled.append(signum)
        if armed[0]:
            raise SystemExit(128 + signum)

    own = threading.current_thread() is threading.main_thread() and (
        signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    )
    # the handler goes in before the folder is made and comes out after it is gone: a SIGTERM
    # between the two with Python's default handler would end the process and leave the folder
    previous = signal.signal(signal.SIGTERM, terminated) if own else None
    try:
        tmp = staging_dir(parent, label)
        try:
            armed[0] = True
            if signalled:
                raise SystemExit(128 + signalled[0])
            yield tmp
        finally:
            armed[0] = False
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        if own:
            signal.signal(signal.SIGTERM, previous)
    if signalled:
        raise SystemExit(128 + signalled[0])


def sweep(parent: Path) -> list[Path]:
    """Remove the staging folders in `parent` whose owning process has ended; those removed."""
    removed = []
    try:
        entries = list(parent.iterdir())
    except OSError:
        return removed
    for entry in entries:
        owned = _OWNED.match(entry.name)
        if owned is None or not entry.is_dir() or _alive(int(owned.group(1))):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (on this machine: a folder on a shared disk that another
    machine's process owns looks dead here, which is why staging folders sit beside outputs
    that one machine writes)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    except OSError:
        return True
    return True
