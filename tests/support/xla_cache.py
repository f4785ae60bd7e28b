"""XLA's compiled programs for a test session, and the store that keeps them between sessions.

Why: compiling is much of a test's time (two of the slowest JAX files took 82 s with nothing
compiled before and 48 s with everything; the step decoders' file on TF, 38 s and 20 s), and
most programs are the same from one run of the suite to the next. Both caches key an entry by
the program itself: JAX's persistent compilation cache by the program's text, the compile
options and flags and the jax and XLA versions; TensorFlow's (`--tf_xla_persistent_cache_
directory`, for `tf.function(jit_compile=True)`) by the function's signature and the program's
fingerprint, checked again when an entry is loaded. So an entry is only ever reused for the
same program, and no test sees another outcome.

A session compiles into fresh folders of its own (every xdist worker and every `seqc` process a
test starts shares them), seeded with hard links to the store's entries. At the session's end the
entries it wrote join the store, whole ones only: JAX writes an entry in place, so a process
killed mid-write (the multi-process tests kill some; Ctrl-C stops pytest) leaves a torn one,
which JAX would report on every later read; TensorFlow writes a temporary file and renames it.
The store is per machine (a compiled CPU program is specific to the CPU's features, which JAX's
key leaves out) and starts over past `LIMIT`. `rm -rf .cache/xla-tests` (or `make clean`) gives
a cold run.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import shutil
import tempfile
from pathlib import Path

from seqc.run.sweep.compile_cache import whole

STORE = Path(
    os.environ.get("SEQC_TEST_XLA_STORE")
    or Path(__file__).resolve().parents[2] / ".cache/xla-tests"
)
"""Where compiled programs are kept between sessions; `SEQC_TEST_XLA_STORE=DIR` names another
(an empty one gives a cold run without touching the work tree's store)."""
LIMIT = 2 << 30
"""Bytes: past this the store is emptied before a session's entries join it."""

KINDS = ("jax", "tf")
"""A folder each: JAX's cache and TensorFlow's, whose entries differ in form."""


def start() -> Path:
    """A new folder for this session's caches, `jax/` and `tf/`, holding the stored entries."""
    session = Path(tempfile.mkdtemp(prefix="seqc-test-xla-"))
    store = _machine_store()
    for kind in KINDS:
        (session / kind).mkdir()
        if (store / kind).is_dir():
            for entry in (store / kind).iterdir():
                with contextlib.suppress(OSError):
                    _link_or_copy(entry, session / kind / entry.name)
    return session


def keep(session: Path) -> None:
    """The session's new, whole entries into the store; the session's folder removed."""
    store = _machine_store()
    try:
        if store.is_dir() and sum(p.stat().st_size for p in store.rglob("*")) > LIMIT:
            shutil.rmtree(store, ignore_errors=True)
        for kind in KINDS:
            (store / kind).mkdir(parents=True, exist_ok=True)
            for entry in (session / kind).iterdir():
                target = store / kind / entry.name
                if target.exists() or not entry.is_file() or not _whole(kind, entry):
                    continue
                part = store / kind / f".{entry.name}.part"
                _link_or_copy(entry, part)
                os.replace(part, target)  # a reader sees the whole entry or none
    except OSError:
        pass  # a read-only or full disk: the next session compiles again
    finally:
        shutil.rmtree(session, ignore_errors=True)


def _machine_store() -> Path:
    flags = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = line
                break
    machine = hashlib.sha256(f"{platform.machine()} {flags}".encode()).hexdigest()[:12]
    return STORE / machine


def _link_or_copy(source: Path, target: Path) -> None:
    """A hard link where both are on one file system (no entry is ever rewritten), else a copy."""
    with contextlib.suppress(FileNotFoundError):
        target.unlink()
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def _whole(kind: str, entry: Path) -> bool:
    """Whether an entry is complete: TensorFlow's are renamed into place when written (its
    temporary files are left out), JAX's must be a whole compressed stream (an entry it cannot
    judge is left out of the store too)."""
    if kind == "tf":
        return entry.suffix == ".pb"
    return whole(entry.read_bytes()) is True
