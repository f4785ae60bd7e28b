"""Room for a checkpoint on the device it is written to.

Why a module of its own: a full device fails a checkpoint deep inside its library, each in its
own words. orbax raises `ValueError("RESOURCE_EXHAUSTED: Error writing ... No space left on
device [os_error_code='28']")`, after its writer threads have logged the error several times
and the callbacks of its closed event loops have failed by the dozen; TensorFlow raises
`ResourceExhaustedError("...; No space left on device [Op:SaveV2]")`; Python's own writes (the
checksums) raise `OSError(ENOSPC)`. A store checks the room first where its library fails
noisily (JAX: `free_bytes` against the state's size), and recognises a full device in any of
these (`is_full`), so that a run ends with one clear error (`seqc.backends.api.NoSpace`, made by
`no_space`) and its earlier checkpoints intact.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from seqc.backends.api import NoSpace

FULL = os.strerror(errno.ENOSPC)
"""The OS's words for a full device ("No space left on device"), which every library quotes."""


def is_full(error: BaseException) -> bool:
    """Whether `error` (or one it was raised from) says the device is full."""
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno == errno.ENOSPC:
            return True
        text = str(e)
        if FULL in text or f"os_error_code='{errno.ENOSPC}'" in text:
            return True
        e = e.__cause__ or e.__context__
    return False


def _existing(path: Path) -> Path:
    """`path`, or its nearest ancestor that exists (a folder not made yet)."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def device_of(path: Path) -> Path:
    """The mount point of the file system that holds `path`: what a user frees space on."""
    here = _existing(path).resolve()
    while not os.path.ismount(here) and here != here.parent:
        here = here.parent
    return here


def free_bytes(path: Path) -> int:
    return shutil.disk_usage(_existing(path)).free


def no_space(step: int, directory: Path, needed: int | None = None) -> NoSpace:
    """The `NoSpace` of checkpoint `step` in `directory`, with the device and its free bytes."""
    return NoSpace(step, directory, device_of(directory), free_bytes(directory), needed)
