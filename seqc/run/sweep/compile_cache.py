"""The compiled programs a sweep's trials share: JAX's persistent compilation cache in the
sweep's folder (`SWEEP_DIR/xla/`), given to every trial process through its environment.

Why: a trial is a fresh `seqc train` process, and compiling its programs (the step, the dev
evaluation, the sample's decoder: 22 of them for the quick Shakespeare LM) took 6.5 of the
about 18 s a trial pays before its first useful step. Trials of one depth compile the same
programs: the learning rate is an argument of the step already, and so are the dropout rates
(`seqc.backends.jax.context.Ctx.keeps`). So the second trial of a depth loads them instead.

JAX keys an entry by the program's text, the compile options and flags and the jax and XLA
versions, so an entry is only ever reused for the same program on the same software. Entries
are written under a file lock where the `filelock` package is installed (the `sweep` extra has
it), with the folder capped at `LIMIT` (least recently used entries go first). A trial killed
mid-write (SIGKILL; SIGTERM lets the write finish) can leave a torn entry, which JAX reads as
an error, warns about and compiles afresh: `drop_torn` removes those when a sweep starts or
resumes. A user's own `JAX_COMPILATION_CACHE_DIR` is left alone.
"""

from __future__ import annotations

import contextlib
import importlib.util
import time
import zlib
from collections.abc import Mapping
from pathlib import Path

FOLDER = "xla"
"""The cache's folder inside the sweep's."""
LIMIT = 1 << 30
"""Bytes the folder may hold (JAX evicts the least recently used entries past it)."""
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
SETTLED_S = 60.0
"""Seconds after which an entry being written is surely finished (a few MB, on a local disk)."""
SUFFIX = "-cache"
"""JAX's entries' suffix (their access times are `-atime` files beside them)."""


def trial_env(sweep_folder: Path, env: Mapping[str, str]) -> dict[str, str]:
    """`env` with the sweep's cache for a trial process, unless it names a cache already."""
    out = dict(env)
    if out.get("JAX_COMPILATION_CACHE_DIR"):
        return out
    out["JAX_COMPILATION_CACHE_DIR"] = str(sweep_folder / FOLDER)
    out["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"  # every program: most take < 1 s
    out["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "-1"
    if importlib.util.find_spec("filelock") is not None:  # JAX needs it to lock and evict
        out["JAX_COMPILATION_CACHE_MAX_SIZE"] = str(LIMIT)
    return out


def drop_torn(sweep_folder: Path, settled_s: float = SETTLED_S) -> int:
    """Remove the cache's entries that are not whole (a process killed while writing one);
    how many. Entries younger than `settled_s` may be another worker's write in progress, and
    are left."""
    folder = sweep_folder / FOLDER
    dropped = 0
    now = time.time()
    for entry in folder.glob(f"*{SUFFIX}") if folder.is_dir() else ():
        with contextlib.suppress(FileNotFoundError):  # evicted meanwhile
            if now - entry.stat().st_mtime >= settled_s and whole(entry.read_bytes()) is False:
                entry.unlink()
                dropped += 1
    return dropped


def whole(data: bytes) -> bool | None:
    """Whether a JAX cache entry is a complete compressed stream (zstd or zlib, as JAX wrote
    it); None where it cannot tell (zstd without the `zstandard` package to read it)."""
    if data.startswith(ZSTD_MAGIC):
        try:
            import zstandard
        except ImportError:
            return None
        try:
            zstandard.ZstdDecompressor().decompress(data)
        except zstandard.ZstdError:
            return False
        return True
    reader = zlib.decompressobj()
    try:
        reader.decompress(data)
    except zlib.error:
        return False
    return reader.eof and not reader.unused_data
