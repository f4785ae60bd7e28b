"""Whether a run directory's run can be resumed with the settings given now.

A resumed run continues bit for bit only from the settings it started with, so the resolved
experiment is compared with the one in `RUN/resolved.json` before anything is written. Settings
that only say how long the loop runs and how often it reports (`ALLOWED`) may change, so that a
run can be extended; everything else (model, data, optimizer, seeds) must be the same, and the
first differences are named.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from seqc.resolve.experiment import BLOCKS, ResolvedExperiment
from seqc.resolve.values import CallValue, to_json
from seqc.spec.errors import FileError, UsageError
from seqc.spec.kinds import REGISTRY

ALLOWED = (
    "train.steps",
    "train.log_every",
    "train.eval_every",
    "train.checkpoint_every",
    "train.init_from",
    "distribution.",
    "export.",
    "description",
)
"""Paths (or prefixes, ending in `.`) that a resume may change."""

TRAINING_IGNORES = ("decode", "warp")
"""`TASK.decode.warp` and below: a speech decode's voice warp, which training's dev evaluations
leave out (`seqc.run.train.dev`), so a resume may add, change or drop it."""

SHOWN = 5


def flatten(tree: Any, prefix: str = "") -> dict[str, str]:
    """A JSON tree as dotted path -> the JSON text of each leaf. A call (`{"kind", "args"}`,
    see `to_json`) reads as the spec writes it: `lm.model` is its kind, `lm.model.d` an arg."""
    if isinstance(tree, dict) and set(tree) == {"kind", "args"}:
        args = flatten(tree["args"], prefix) if tree["args"] else {}
        return {prefix: json.dumps(tree["kind"])} | args
    if isinstance(tree, dict) and tree:
        out: dict[str, str] = {}
        for k, v in tree.items():
            out |= flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    return {prefix: json.dumps(tree, sort_keys=True, default=str)}


def changes(stored: dict[str, Any], resolved: ResolvedExperiment) -> list[tuple[str, str, str]]:
    """(path, then, now) for each setting that differs and may not."""
    then = flatten(stored)
    now = flatten(to_json(resolved.config))
    out = []
    for path in sorted(set(then) | set(now)):
        if any(path == a or (a.endswith(".") and path.startswith(a)) for a in ALLOWED):
            continue
        if tuple(path.split(".")[1:3]) == TRAINING_IGNORES:
            continue
        if path not in then and _added_default(resolved, path, now[path]):
            continue
        if then.get(path) != now.get(path):
            out.append((path, then.get(path, "(unset)"), now.get(path, "(unset)")))
    return out


def _added_default(resolved: ResolvedExperiment, path: str, value: str) -> bool:
    """True when `path` is an arg of a call (or a field of a block) that this version of seqc
    has and the run's version did not, at its default: the run trains as it did (e.g. `adam`'s
    `lazy_rows`, added after runs had started, is false unless asked for; `train.mix` is
    empty)."""
    owner, _, name = path.rpartition(".")
    try:
        call = resolved.get(owner) if owner else None
    except (KeyError, IndexError, ValueError, TypeError):
        return False
    if path == "share":  # no shared layers: what a run from before multi-task models had
        return value == "{}"
    if isinstance(call, dict) and owner in BLOCKS:  # a block field added since, at its default
        kind = REGISTRY.get("block", owner)
    elif isinstance(call, CallValue):
        kind = REGISTRY.get(call.namespace, call.kind)
    else:
        return False
    spec = kind.param(name) if kind is not None else None
    if spec is None or spec.required:
        return False
    return value == flatten(to_json({"v": spec.default}))["v"]


def check_resume(run: Path, resolved: ResolvedExperiment) -> None:
    """Refuse a resume whose settings differ from the run's, naming the first differences."""
    record = run / "resolved.json"
    try:
        stored = json.loads(record.read_text())
    except FileNotFoundError:
        return  # a run directory from before resolved.json: nothing to compare
    except (OSError, json.JSONDecodeError) as e:
        raise FileError(
            f"{record} cannot be read ({e}); the run's settings are unknown",
            path=str(record),
            code="bad-run-record",
            hint="start a new run with another --run-dir",
        ) from None
    found = changes(stored.get("config", {}), resolved)
    if stored.get("name") not in (None, resolved.name):
        found.insert(0, ("experiment", json.dumps(stored["name"]), json.dumps(resolved.name)))
    if not found:
        return
    listed = "".join(f"\n  - {p}: {a} when the run started, {b} now" for p, a, b in found[:SHOWN])
    more = f"\n  ... and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
    raise UsageError(
        f"the run in {run} was started with other settings; a resumed run must use its own:"
        f"{listed}{more}",
        path=str(run),
        code="resume-mismatch",
        hint=f"resume with the run's settings (its frozen spec is in {run / 'spec'}), or start "
        "a new run with another --run-dir",
    )
