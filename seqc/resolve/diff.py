"""The resolved values two experiments (or runs) disagree on, with where each side set them.

Lingvo keeps a `key : value` dump beside every run and diffs two of them; this is that diff for
seqc: `seqc diff A B` prints it, and `seqc sweep show` says with it how the best trial differs
from the base experiment.

Both sides are read from the one form a run directory records (`resolved.json`: the config as
`to_json` writes it and each leaf's origin as text, see `experiment_record`), so a resolved
experiment and a run from last month compare leaf for leaf, by the same walk. Values compare
as the `.seq` text `seqc show` prints for them (`show_value`): a difference is exactly what a
reader sees differ (`1` and `1.0`, `"true"` and `true` differ; a call differs in its kind, its
args each on a line of their own).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from seqc.resolve.experiment import ResolvedExperiment
from seqc.resolve.values import CallValue, Symbol, show_value, to_json
from seqc.spec.printable import printable

ABSENT = "<absent>"
"""How a value that one side does not have prints (a task only one side trains, an arg of a
kind the other side does not call)."""

UNRECORDED = "unrecorded"
"""The origin of a leaf a run's record gives none for (a record written without provenance)."""

ALIGN = 60
"""Lines whose `path: a -> b` is at most this wide have their origins in one column; longer
ones (a list of devices) are not padded, so one long value does not push every line right."""


@dataclass(frozen=True)
class ResolvedSide:
    """One side of a diff: every leaf of a resolved experiment as `.seq` text, with its origin.

    `values` and `origins` are keyed by the dotted paths `ResolvedExperiment.leaves` gives
    (`train.optimizer` is the call, `adam(...)`, and `train.optimizer.beta1` its arg), in the
    experiment's order. `label` names the side in a report (`lm.shakespeare.quick`, a run's
    folder). Made by `from_experiment`, `from_record`, or `seqc.run.rundir.record.from_run_dir`.
    """

    label: str
    values: Mapping[str, str]
    origins: Mapping[str, str]

    @classmethod
    def from_experiment(
        cls, resolved: ResolvedExperiment, label: str | None = None
    ) -> ResolvedSide:
        """A resolved experiment (`--set` overrides included), read as its run would record it."""
        return cls.from_record(experiment_record(resolved), label or resolved.name)

    @classmethod
    def from_record(cls, record: Mapping[str, Any], label: str) -> ResolvedSide:
        """The side a record in `experiment_record`'s form gives: `config` (a JSON object) and
        `provenance` (path -> origin text; missing leaves read as `UNRECORDED`). The caller
        checks the shape of a record it read from a file (`from_run_dir` does)."""
        provenance = record.get("provenance") or {}
        values: dict[str, str] = {}
        _walk(record["config"], "", set(provenance), values)
        origins = {path: _origin(provenance, path) for path in values}
        return cls(label=label, values=values, origins=origins)


@dataclass(frozen=True)
class Difference:
    """A path whose value differs between side a and side b.

    `a` and `b` are the values as `.seq` text (`1000`, `"jax"`, `adam(...)`, `[2, 4]`), or
    None where that side has no such path. `a_origin` and `b_origin` say where each side set
    it: `default`, a spec's `file:line:col`, `--set PATH=VALUE` (or `unrecorded`); "" where
    the side has no such path."""

    path: str
    a: str | None
    b: str | None
    a_origin: str
    b_origin: str


def experiment_record(resolved: ResolvedExperiment) -> dict[str, Any]:
    """What a run directory keeps of a resolved experiment (`resolved.json`): its name, chain,
    tasks, config as JSON and each leaf's origin as text. The one shape both sides of a diff
    are read from."""
    return {
        "name": resolved.name,
        "chain": list(resolved.chain),
        "tasks": list(resolved.tasks),
        "config": to_json(resolved.config),
        "provenance": {p: str(resolved.origin(p)) for p, _ in resolved.leaves()},
    }


def differences(a: ResolvedSide, b: ResolvedSide) -> list[Difference]:
    """Every path whose value differs, or that one side lacks, in a's order; a path only b has
    comes where b has it (a task only b trains comes last, whole)."""
    out = []
    for path in _merged_paths(a, b):
        va, vb = a.values.get(path), b.values.get(path)
        if va != vb:
            out.append(
                Difference(
                    path=path,
                    a=va,
                    b=vb,
                    a_origin=a.origins.get(path, "") if va is not None else "",
                    b_origin=b.origins.get(path, "") if vb is not None else "",
                )
            )
    return out


def format_differences(diffs: list[Difference]) -> list[str]:
    """One line per difference, `path: a -> b   (where a was set; where b was set)`, the
    origins in one column where the lines are short enough (`ALIGN`). Made `printable`: a
    value or a path read from a run's record cannot drive the terminal or forge a line."""
    heads = [f"{d.path}: {_shown(d.a)} -> {_shown(d.b)}" for d in diffs]
    width = max((len(h) for h in heads if len(h) <= ALIGN), default=0)
    lines = []
    for head, d in zip(heads, diffs, strict=True):
        where = f"({d.a_origin or '-'}; {d.b_origin or '-'})"
        lines.append(printable(f"{head:<{width}}   {where}"))
    return lines


def _shown(value: str | None) -> str:
    return ABSENT if value is None else value


def _merged_paths(a: ResolvedSide, b: ResolvedSide) -> list[str]:
    """a's paths in order, and each path only b has after the path b lists before it and that
    path's own args on a's side (sgd's `momentum` after adam's `lr.warmup`, not between `lr`
    and `lr.peak`)."""
    after: dict[str | None, list[str]] = {}
    anchor: str | None = None
    for path in b.values:
        if path in a.values:
            anchor = path
        else:
            after.setdefault(anchor, []).append(path)
    merged = list(after.get(None, []))
    pending: list[tuple[str, list[str]]] = []  # anchors whose args on a's side are still to come
    for path in a.values:
        while pending and not path.startswith(pending[-1][0] + "."):
            merged.extend(pending.pop()[1])
        merged.append(path)
        if path in after:
            pending.append((path, after[path]))
    while pending:
        merged.extend(pending.pop()[1])
    return merged


def _is_call(node: Any) -> bool:
    """A call as `to_json` writes it: `{"kind": ..., "args": {...}}`."""
    return (
        isinstance(node, dict)
        and set(node) == {"kind", "args"}
        and isinstance(node["kind"], str)
        and isinstance(node["args"], dict)
    )


def _walk(node: Any, prefix: str, leaves: set[str], out: dict[str, str]) -> None:
    """The leaves of a JSON config as `ResolvedExperiment.leaves` walks the config itself: a
    call is a leaf (`kind(...)`) and so is each of its args; an object of named fields is
    walked into. `to_json` writes every dict's keys as text, so a dict the experiment keeps
    whole (`buckets = {64: 32}`, integer keys) is known by its path among the recorded
    `leaves` (the provenance's keys)."""
    if _is_call(node):
        out[prefix] = f"{node['kind']}(...)"
        for name, arg in node["args"].items():
            _walk(arg, f"{prefix}.{name}", leaves, out)
    elif isinstance(node, dict) and node and (not prefix or prefix not in leaves):
        for name, value in node.items():
            _walk(value, f"{prefix}.{name}" if prefix else str(name), leaves, out)
    else:
        out[prefix] = show_value(_from_json(node))


def _from_json(node: Any) -> Any:
    """A value back from `to_json`'s form, to be shown as `seqc show` shows it (a call's
    namespace is not recorded, and showing does not need it)."""
    if _is_call(node):
        args = {k: _from_json(v) for k, v in node["args"].items()}
        return CallValue.model_construct(kind=node["kind"], namespace="", args=args)
    if isinstance(node, dict) and set(node) == {"symbol"} and isinstance(node["symbol"], str):
        return Symbol(ref=node["symbol"])
    if isinstance(node, dict):
        return {k: _from_json(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_from_json(v) for v in node]
    return node


def _origin(provenance: Mapping[str, Any], path: str) -> str:
    """Where `path` was set: its own entry, else the nearest enclosing path's (as
    `ResolvedExperiment.origin` looks it up)."""
    parts = path.split(".")
    for n in range(len(parts), 0, -1):
        found = provenance.get(".".join(parts[:n]))
        if found is not None:
            return str(found)
    return UNRECORDED
