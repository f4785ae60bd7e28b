"""A checkpoint's files, hashed when the checkpoint is written and checked before it is read.

Why: a checkpoint store's own format does not always notice damage. A flipped bit inside an
orbax (OCDBT, compressed) data file restores without error into wrong weights; a truncated or
emptied file fails deep inside TensorStore with text that means nothing to a user. With a sha256
of every file beside them, a damaged checkpoint is found before it is used, named, and the run
falls back to an older one. A checkpoint without sums (written before them, or by a crash
between the store's commit and the sums) is read as it is.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

CHUNK = 1 << 20


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def write(sums: Path, root: Path, files: Iterable[Path]) -> None:
    """`sums` lists each file's sha256 by its path relative to `root`; written atomically."""
    table = {p.relative_to(root).as_posix(): _sha256(p) for p in sorted(files)}
    tmp = sums.with_name(sums.name + ".tmp")
    tmp.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    tmp.replace(sums)


def verify(sums: Path, root: Path) -> str | None:
    """None when every listed file is there and unchanged (or there are no sums to check);
    else what is wrong, in a few words naming the file."""
    if not sums.is_file():
        return None
    try:
        table = json.loads(sums.read_text())
    except (OSError, json.JSONDecodeError):
        return f"its checksum file {sums.name} is damaged"
    for rel, digest in table.items():
        path = root / rel
        if not path.is_file():
            return f"its file {rel} is missing"
        if path.stat().st_size == 0:
            return f"its file {rel} is empty"
        if _sha256(path) != digest:
            return f"its file {rel} was changed or is damaged (sha256 differs)"
    return None
