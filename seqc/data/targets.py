"""Paths a command will write, checked before it does any work.

Why one module: every command that writes (`--out`, `--cache-dir`, `--json`, `--gantt`) met the
same wrong paths — a file where a folder belongs, a folder where a file belongs, a parent that
does not exist, a suffix nothing can write — and each met them as a different crash after its
work was done. Each check here names the option and the path, says what was expected and found,
and how to fix it, before anything is computed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from seqc.spec.errors import FileError


def output_folder(path: Path, option: str) -> Path:
    """A folder this command writes into, made if missing; what it holds already may stay
    (a cache, the folder of several exports). Not a file, and writable."""
    if path.exists() and not path.is_dir():
        raise _not_a_folder(path, option, path)
    _writable_parent(path, option, folder=True)
    return path


def new_folder(path: Path, option: str, what: str) -> Path:
    """A folder this command creates and fills with `what`: missing, or empty. Never written
    over: what is there may be someone's results."""
    output_folder(path, option)
    if path.is_dir() and any(path.iterdir()):
        raise FileError(
            f"{option} {path} already holds files",
            path=str(path),
            code="exists",
            expected=f"a new or empty folder for {what}",
            found=f"a folder with {_count(path.iterdir())}",
            hint=f"remove it, or choose another {option}",
        )
    return path


def output_file(path: Path, option: str, suffixes: Iterable[str] = ()) -> Path:
    """A file this command writes (replacing one there): not a folder, in a folder that exists
    and is writable, with one of `suffixes` when the format follows the name."""
    allowed = tuple(suffixes)
    if path.is_dir():
        raise FileError(
            f"{option} {path} is a folder",
            path=str(path),
            code="is-a-folder",
            expected="a file name" + (f" ending in {' or '.join(allowed)}" if allowed else ""),
            found="a folder",
            hint=f"name a file in it: {option} {path / ('out' + (allowed[0] if allowed else ''))}",
        )
    if allowed and path.suffix.lower() not in allowed:
        raise FileError(
            f"{option} {path}: cannot write a {path.suffix or 'file without a suffix'}",
            path=str(path),
            code="bad-suffix",
            expected=f"a name ending in {' or '.join(allowed)} (the suffix picks the format)",
            found=f"`{path.name}`",
            hint=f"{option} {path.with_suffix(allowed[0])}",
        )
    _writable_parent(path, option, folder=False)
    return path


def _writable_parent(path: Path, option: str, *, folder: bool) -> None:
    """The nearest folder that exists above `path` (a folder target's missing parents are
    made; a file's folder must exist) is a folder this process may write."""
    parent = path.parent
    if not folder and not parent.is_dir():
        raise FileError(
            f"{option} {path}: the folder {parent} does not exist",
            path=str(path),
            code="no-folder",
            hint=f"create it first (mkdir -p {parent}), or choose another {option}",
        )
    existing = path if folder and path.is_dir() else parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        raise _not_a_folder(path, option, existing)
    if not os.access(existing, os.W_OK | os.X_OK):
        raise FileError(
            f"{option} {path}: no permission to write in {existing}",
            path=str(path),
            code="unwritable",
            hint=f"choose another {option}, or fix the folder's permissions",
        )


def _not_a_folder(path: Path, option: str, culprit: Path) -> FileError:
    where = (
        f"{option} {path} is a file" if culprit == path else f"{option} {path}: {culprit} is a file"
    )
    return FileError(
        f"{where}, not a folder",
        path=str(culprit),
        code="not-a-folder",
        expected="a folder (made if missing)",
        found="a file",
        hint=f"choose another {option}, or move the file away",
    )


def _count(entries: Iterable[Path]) -> str:
    n = sum(1 for _ in entries)
    return f"{n} entr{'y' if n == 1 else 'ies'}"
