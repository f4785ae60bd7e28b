"""Verdicts of `seqc check`: an unchanged program that passed is not checked again.

Like mypy's or ruff's cache, one level above the parse cache (`seqc.spec.parse_cache`). When a
program passes `seqc check`, a verdict is written: the digest of every file's text as it was
checked (the root and every import, by resolved path), the import roots it resolved under, the
experiment and `--set` overrides asked for, seqc's own source (every file of the package, by
size and modification time) and Python's version, and what the check counted. The next `seqc
check` of the same root with the same arguments reads each file again and compares digests;
when all match, the verdict is the answer and nothing is imported, parsed or resolved. A
pre-commit hook or CI step that checks a large unchanged program pays for reading its files.

A check reads nothing but the program's files (data sizes wait for a run; see
`seqc.compiler.check`), so those digests, the roots and seqc's source are everything its
outcome depends on. Only passes are recorded: a failing check runs again and shows its error
from the text as it is. Verdicts live beside the parse entries (`checks/` under
`cache_paths.cache_dir()`, off with it), are written atomically, and any verdict that is
missing, stale or unreadable is a miss, never an error.

This module imports nothing outside the standard library until a check must actually run.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqc.resolve.roots import import_roots
from seqc.spec.cache_paths import cache_dir, text_digest
from seqc.spec.files import peek_spec

if TYPE_CHECKING:
    from seqc.resolve.program import Program

FORMAT = 2
"""The layout of a verdict; bumped when it changes (2: the summary counts sweeps)."""

_PACKAGE = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class CheckSummary:
    """What `seqc check` reports about a program that passed."""

    files: int
    layers: int
    tasks: int
    experiments: int
    sweeps: int = 0


def check_file(
    path: str | Path, experiment: str | None = None, overrides: Sequence[str] = ()
) -> CheckSummary:
    """`seqc check`: the cached verdict when the program is unchanged, else a full check (its
    `SeqcError` propagates) whose pass is recorded for next time."""
    cached = lookup(path, experiment, overrides)
    if cached is not None:
        return cached
    from seqc.compiler.check import check_program
    from seqc.resolve.program import load_program

    program = load_program(path)
    resolved = check_program(program, experiment, list(overrides))
    summary = CheckSummary(
        files=len(program.files),
        layers=len(program.layers),
        tasks=len(program.tasks),
        experiments=len(resolved),
        sweeps=len(program.sweeps) if experiment is None else 0,
    )
    record(path, experiment, overrides, program, summary)
    return summary


@functools.cache
def _salt() -> str:
    """seqc's source (each package file's name, size and modification time) and Python's
    version: a verdict from other code is stale. Stat only: reading the package would cost
    more than most checks."""
    h = hashlib.sha256(f"seqc-check-{FORMAT}\0{sys.version_info[:2]}\0{_PACKAGE}".encode())
    rows = []
    for folder, dirs, names in os.walk(_PACKAGE):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in names:
            full = os.path.join(folder, name)
            try:
                st = os.stat(full)
            except OSError:
                continue
            rows.append(f"{os.path.relpath(full, _PACKAGE)}\0{st.st_size}\0{st.st_mtime_ns}")
    for row in sorted(rows):
        h.update(row.encode("utf-8", "surrogatepass") + b"\n")
    return h.hexdigest()


def _question(root: Path, experiment: str | None, overrides: Sequence[str]) -> dict[str, Any]:
    """What a verdict answers: this root, asked this way, under these import roots."""
    return {
        "format": FORMAT,
        "salt": _salt(),
        "root": str(root),
        "experiment": experiment,
        "overrides": list(overrides),
        "roots": [str(r) for r in import_roots(root)],
    }


def _entry(question: dict[str, Any]) -> Path | None:
    folder = cache_dir()
    if folder is None:
        return None
    asked = json.dumps([question["root"], question["experiment"], question["overrides"]])
    name = hashlib.sha256(f"{question['salt']}\0{asked}".encode("utf-8", "surrogatepass"))
    return folder / "checks" / f"{name.hexdigest()[:32]}.json"


def _root(path: str | Path) -> Path | None:
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError, ValueError):  # a symlink loop, a NUL byte: the check says
        return None


def lookup(
    path: str | Path, experiment: str | None = None, overrides: Sequence[str] = ()
) -> CheckSummary | None:
    """The recorded pass of this program, if every file still holds the text it was checked
    with; None otherwise (including when the cache is off or the verdict is unreadable)."""
    root = _root(path)
    if root is None:
        return None
    try:
        question = _question(root, experiment, overrides)
        entry = _entry(question)
        if entry is None:
            return None
        verdict = json.loads(entry.read_bytes())
        if verdict.get("question") != question:
            return None
        for file, digest in verdict["files"]:
            text = peek_spec(file)  # bounded: a file swapped for a device is not read
            if text is None or text_digest(text) != digest:
                return None
        return CheckSummary(**verdict["summary"])
    except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return None


def record(
    path: str | Path,
    experiment: str | None,
    overrides: Sequence[str],
    program: Program,
    summary: CheckSummary,
) -> None:
    """Write the verdict of a check that passed; any failure leaves the cache as it was."""
    from seqc.spec.errors import source_digest

    root = _root(path)
    if root is None:
        return
    files = []
    for spec, resolved in zip(program.files, program.paths, strict=True):
        digest = source_digest(spec.path)
        if digest is None:  # not read in this process: nothing to vouch for
            return
        files.append([str(resolved), digest])
    question = _question(root, experiment, overrides)
    entry = _entry(question)
    if entry is None:
        return
    data = json.dumps({"question": question, "files": files, "summary": asdict(summary)})
    tmp = None
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{entry.name}.", dir=entry.parent)
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write(data)
        os.replace(tmp, entry)
        tmp = None
    except (OSError, ValueError):
        pass
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
