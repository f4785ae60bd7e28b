"""The cache of encoded splits: found by key, checked, encoded when missing or damaged.

A split's key is a sha256 of everything its ids depend on: the reader call (kind and every
argument), the content of each file it reads (`digest`) and its path (which errors name), the
tokenizers' identities (`tokenizers.fingerprint`), `lowercase`, and the layout's format. So
every later run, every process of a run and every resume finds the same arrays; a changed file
or tokenizer gives a new key and a new encoding. The folder is `CACHE/shards/SPLIT-KEY16`.

Several processes of one run open the same splits at once: a lock file per key makes one of
them encode while the others wait, then read what it wrote. Before a split is encoded, the
splits whose input files are all gone are removed (`sweep_orphans`): the cache does not grow
with every temporary corpus.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import multiprocessing
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from seqc.data.errors import DataError, display_path
from seqc.data.readers import BaseDirs
from seqc.data.shards.digest import file_digests
from seqc.data.shards.encode import Progress, Sides, encode_split
from seqc.data.shards.layout import FORMAT, DamagedSplit, EncodedSplit, open_split
from seqc.data.staging import staging_dir
from seqc.data.tokenizers import fingerprint
from seqc.resolve.values import CallValue

SHARDS = "shards"
Note = Callable[[str], None]


def split_key(
    reader: CallValue, paths: Sequence[Path], digests: Sequence[str], sides: Sides
) -> str:
    """sha256 naming one encoded split (see the module's docstring)."""
    record: dict[str, Any] = {
        "format": FORMAT,
        "reader": reader.kind,
        "args": {k: repr(v) for k, v in sorted(reader.args.items())},
        "files": list(digests),
        "paths": [display_path(p) for p in paths],
        "lowercase": sides.lowercase,
        "source": fingerprint(sides.source) if sides.source else None,
        "target": fingerprint(sides.target) if sides.target else None,
    }
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


def encoded(
    split: str,
    reader: CallValue,
    files: Sequence[Path],
    base_dir: BaseDirs | None,
    sides: Sides,
    cache_dir: Path,
    *,
    workers: int = 1,
    progress: Progress | None = None,
    note: Note | None = None,
) -> EncodedSplit:
    """The split's encoded arrays, from the cache or encoded now."""
    key = split_key(reader, files, file_digests(files, cache_dir), sides)
    root = Path(cache_dir) / SHARDS
    folder = root / f"{split}-{key[:16]}"
    try:
        return open_split(folder, key)
    except FileNotFoundError:
        reason = None
    except DamagedSplit as e:
        reason = str(e)
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / f".{split}-{key[:16]}.lock"):
        try:  # another process may have encoded it while this one waited
            return open_split(folder, key)
        except (FileNotFoundError, DamagedSplit):
            pass
        if reason is not None and note is not None:
            note(f"encoding the {split} split again: the cached one is unusable ({reason})")
        sweep_orphans(root)
        encode_split(
            reader, files, base_dir, sides, folder, key, workers=workers, progress=progress
        )
    return open_split(folder, key)


class _locked:
    """An exclusive `flock` on a file for the block (released if the process dies)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> None:
        if getattr(multiprocessing.current_process(), "_inheriting", False):
            # An encoding worker starting up re-runs the script that started the pool, when its
            # top level is unguarded: waiting here, for the lock its parent holds until the
            # workers are done, would never end.
            raise DataError(
                "a worker process of seqc's encoding is re-running the script that started it",
                code="unguarded-script",
                hint='put the script\'s top level under `if __name__ == "__main__":` (Python '
                "starts worker processes by importing the main module)",
            )
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def sweep_orphans(root: Path) -> None:
    """Remove the encoded splits whose input files are all gone (a temporary corpus, a moved
    or deleted one): nothing can ask for them again, since their key names those files'
    content. Each is renamed aside before it is removed, so a reader sees it whole or not at
    all; a split being read by another run keeps its open memory maps (POSIX)."""
    for meta_path in root.glob("*/meta.json"):
        try:
            sources = json.loads(meta_path.read_text(encoding="utf-8")).get("sources") or []
        except (OSError, ValueError, AttributeError):
            continue
        if sources and not any(Path(s).exists() for s in sources):
            discard_folder(meta_path.parent)
    for lock in root.glob(".*.lock"):  # the locks of splits no longer there, unless held
        if (root / lock.name[1:-5]).exists():
            continue
        with contextlib.suppress(OSError):
            fd = os.open(lock, os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                lock.unlink()
            finally:
                os.close(fd)


def discard_folder(folder: Path) -> None:
    aside = staging_dir(folder.parent, folder.name + "-gone")
    with contextlib.suppress(OSError):  # another run removed it first
        folder.rename(aside / folder.name)
    shutil.rmtree(aside, ignore_errors=True)
