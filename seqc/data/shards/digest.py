"""Naming a data file by its content, without reading it again on every run.

A cache of encoded corpora must be keyed by what the files hold, not by their names: a corpus
rebuilt in place (same path, new text) must be encoded again. Hashing a gigabyte on every run
costs seconds, so a file's sha256 is memoised against its stat (device, inode, size and
modification time in nanoseconds), as git's index does: a rewritten file changes at least its
mtime, and then it is hashed again. The memo is a small JSON file in the cache folder, written
atomically; a damaged memo is ignored (the files are hashed again), never trusted.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

MEMO_FILE = "file-digests.json"
CHUNK = 1 << 22


def stat_key(path: Path) -> str:
    """What changes when a file is rewritten: device, inode, size, mtime (ns)."""
    st = path.stat()
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def sha256_file(path: Path) -> str:
    """sha256 of a file's bytes, read in 4 MiB chunks (memory flat in its size)."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def file_digests(paths: Sequence[Path], cache_dir: Path) -> list[str]:
    """sha256 of each file, from the memo where its stat is unchanged."""
    memo_path = Path(cache_dir) / MEMO_FILE
    memo: dict[str, dict[str, str]] = {}
    with contextlib.suppress(OSError, ValueError):
        loaded = json.loads(memo_path.read_text(encoding="utf-8"))
        if isinstance(loaded, dict):
            memo = {k: v for k, v in loaded.items() if isinstance(v, dict)}
    out, changed = [], False
    for path in paths:
        name = str(Path(path).resolve())
        key = stat_key(path)
        entry = memo.get(name)
        if entry is None or entry.get("stat") != key or not entry.get("sha256"):
            entry = {"stat": key, "sha256": sha256_file(path)}
            if stat_key(path) != key:  # written while being hashed: not a stable digest
                entry["stat"] = ""
            memo[name] = entry
            changed = True
        out.append(entry["sha256"])
    if changed:
        _write_memo(memo_path, memo)
    return out


def _write_memo(path: Path, memo: dict[str, dict[str, str]]) -> None:
    """The memo, without the files that no longer exist (a temporary corpus, a moved one), so
    it does not grow with every file ever read."""
    memo = {name: entry for name, entry in memo.items() if Path(name).exists()}
    with contextlib.suppress(OSError):  # a read-only cache only costs hashing again
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(memo, indent=0, sort_keys=True), encoding="utf-8")
        tmp.replace(path)
