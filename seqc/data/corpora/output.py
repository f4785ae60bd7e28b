"""Writing a prepared corpus: split files with their line counts and checksums.

Why checksums: a prepared corpus is an input to every experiment that names it. The manifest's
sha256 of each split lets a run record exactly which data it saw, and lets two machines check
they prepared the same thing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
"""Written last: its presence means the corpus folder is complete."""


def write_lines(path: Path, lines: Iterable[str]) -> dict[str, Any]:
    """Write one line per item (UTF-8, "\\n" endings); the file name, line count and sha256."""
    h = hashlib.sha256()
    n = 0
    with path.open("w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            if "\n" in line or "\r" in line:
                raise ValueError(f"line {n + 1} of {path.name} contains a newline")
            data = line + "\n"
            f.write(data)
            h.update(data.encode("utf-8"))
            n += 1
    return {"file": path.name, "lines": n, "sha256": h.hexdigest()}


def write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    text = json.dumps(manifest, ensure_ascii=False, indent=2, sort_keys=False) + "\n"
    (folder / MANIFEST).write_text(text, encoding="utf-8")


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """The manifest of a prepared corpus, or None if the folder is not (completely) prepared."""
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def damage(folder: Path, manifest: dict[str, Any]) -> str | None:
    """What differs between a prepared corpus's split files and its manifest (the first
    difference), or None when every split file is there with the sha256 the manifest records.
    A folder is only as prepared as its files: a truncated or edited split would otherwise be
    reported ready, and trained on, under the manifest's old counts."""
    splits = manifest.get("splits")
    if not isinstance(splits, dict) or not splits:
        return "the manifest lists no split files"
    for info in splits.values():
        if not isinstance(info, dict) or not {"file", "sha256"} <= info.keys():
            return "the manifest's record of a split is incomplete"
        path = folder / str(info["file"])
        if not path.is_file():
            return f"{info['file']} is missing"
        if file_sha256(path) != info["sha256"]:
            lines = _count_lines(path)
            return (
                f"{info['file']} differs from its manifest: {lines:,} lines, sha256 "
                f"{file_sha256(path)[:12]}; the manifest says {info.get('lines', '?'):,} lines, "
                f"sha256 {str(info['sha256'])[:12]}"
            )
    return None


def _count_lines(path: Path) -> int:
    with path.open("rb") as f:
        return sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 20), b""))
