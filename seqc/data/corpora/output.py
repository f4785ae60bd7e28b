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
