"""A run directory's record of what it ran (`resolved.json`), read back as one side of a diff.

`seqc diff RUN_DIR ...` and `seqc sweep show` (how the best trial differs from its base) read a
run's settings from here rather than from its frozen `spec/`: the record holds the values the
run resolved, `--set` overrides included, with where each was set, and reads the same under a
later seqc whose catalogue has moved on. Reading it loads no framework.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from seqc.resolve.diff import ResolvedSide
from seqc.spec.errors import FileError

RESOLVED = "resolved.json"
"""The file of a run directory that records its resolved experiment (`RunDir.start`)."""


def from_run_dir(path: Path, label: str | None = None) -> ResolvedSide:
    """The resolved experiment `path` ran, as one side of a diff (`seqc.resolve.diff`); its
    label is the folder and the experiment's name unless `label` is given. A path that is no
    run directory, or a record that cannot be read, is a located `FileError`."""
    record_path = path / RESOLVED
    if not path.is_dir():
        raise FileError(
            f"no run directory at {path}",
            path=str(path),
            code="file-not-found" if not path.exists() else "not-a-folder",
            hint="give a folder written by `seqc train` (it holds resolved.json and spec/)",
        )
    if not record_path.is_file():
        raise FileError(
            f"{path} is not a run directory: it holds no {RESOLVED}",
            path=str(path),
            code="bad-run-record",
            hint="give a folder written by `seqc train` (it holds resolved.json and spec/), "
            "or a .seq file with -e EXPERIMENT",
        )
    record = _read(record_path)
    name = record.get("name")
    shown = label or (f"{path} ({name})" if isinstance(name, str) else str(path))
    return ResolvedSide.from_record(record, shown)


def _read(record_path: Path) -> dict[str, Any]:
    """The record as JSON, its shape checked: an object with a `config` object and, where it
    has one, a `provenance` object of texts."""
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise FileError(
            f"{record_path} is not JSON ({e.msg}); the run's settings are unknown",
            path=f"{record_path}:{e.lineno}:{e.colno}",
            code="bad-run-record",
            hint="a run directory's resolved.json is written by `seqc train`; "
            "diff the run's frozen spec (RUN/spec/) with -e EXPERIMENT instead",
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise FileError(
            f"{record_path} cannot be read ({e}); the run's settings are unknown",
            path=str(record_path),
            code="bad-run-record",
        ) from None
    problem = _shape_problem(record)
    if problem is not None:
        raise FileError(
            f"{record_path} is not a run's record of its resolved experiment: {problem}",
            path=str(record_path),
            code="bad-run-record",
            expected='{"name": ..., "config": {...}, "provenance": {...}}',
            hint="a run directory's resolved.json is written by `seqc train`; "
            "diff the run's frozen spec (RUN/spec/) with -e EXPERIMENT instead",
        )
    return record


_JSON_TYPES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}
_JSON_TYPES[type(None)] = "null"


def _shape_problem(record: Any) -> str | None:
    if not isinstance(record, dict):
        return f"it holds a JSON {_JSON_TYPES.get(type(record), 'value')}, not an object"
    if not isinstance(record.get("config"), dict):
        return "it has no `config` object"
    provenance = record.get("provenance", {})
    if not isinstance(provenance, dict) or not all(isinstance(v, str) for v in provenance.values()):
        return "its `provenance` is not an object of texts"
    return None
