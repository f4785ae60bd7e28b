"""What a run's checkpoints belong to: its model, its tokenizers and its training data.

Why: a checkpoint holds weights by name, and weights of the right names and shapes load into a
model that computes something else (`--set lm.model.heads=8` on a run trained with 4 heads, an
imported layer's default edited), or are read with a tokenizer fitted on other text (a prepared
corpus edited since). Neither fails; both give wrong figures, and a resume that gets as far as
restoring fails there, where a good checkpoint looked damaged. So a run records, at its start,
each task's model (every layer's resolved args, the params' shapes, a digest of the lowered
graph) and data (each tokenizer's identity, each split's examples); a resume must match all of
it, and an evaluation, a decode or an export the model and the tokenizers, before anything is
read. A run from before this record is compared by its settings alone (`seqc.run.rundir.resume`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from seqc.compiler.graph import Graph
from seqc.resolve.layers.instance import LayerInstance
from seqc.resolve.values import to_json
from seqc.run.session import MultiTaskSession, Session
from seqc.spec.errors import UsageError

KEY = "identity"
"""Where `run.json` holds the record."""

SHOWN = 5
"""Differences named in an error; the rest are counted."""


def record(session: Session | MultiTaskSession) -> dict[str, Any]:
    """The run's record of each task's model and data (see the module doc)."""
    sessions = (
        session.sessions if isinstance(session, MultiTaskSession) else {session.task: session}
    )
    return {"tasks": {task: _task_record(one) for task, one in sessions.items()}}


def _task_record(session: Session) -> dict[str, Any]:
    return {
        "model": model_args(session.resolved.models[session.task]),
        "params": {
            name: [p.type.dtype, [int(d) for d in p.type.shape]]
            for name, p in session.graph.params.items()
        },
        "graph": graph_digest(session.graph),
        "data": session.pipeline.fingerprint(),
    }


def model_args(model: LayerInstance) -> dict[str, str]:
    """Every layer's resolved args by path (`heads`, `blocks.heads`, `blocks.*.attn.heads`;
    `*` for the copies of a `repeat`), as JSON text: what a spec decides about the model, its
    defaults included."""
    out: dict[str, str] = {":kind": json.dumps(model.kind)}

    def args(node: LayerInstance, here: str) -> None:
        for name, value in sorted(node.args.items()):
            key = f"{here}.{name}" if here else name
            out[key] = json.dumps(to_json(value), sort_keys=True, default=str)

    def walk(node: LayerInstance, prefix: str) -> None:
        here = f"{prefix}.{_name(node)}" if prefix else _name(node)
        out[f"{here}:kind"] = json.dumps(node.kind)
        args(node, here)
        if node.repeat:  # one template for every copy: its layers once, under `*`
            out[f"{here}:repeat"] = json.dumps(node.repeat)
            for child in node.children[0].children if node.children else ():
                walk(child, f"{here}.*")
            return
        for child in node.children:
            walk(child, here)

    args(model, "")
    for child in model.children:
        walk(child, "")
    return out


def _name(node: LayerInstance) -> str:
    return node.path.rsplit(".", 1)[-1]


def graph_digest(graph: Graph) -> str:
    """sha256 of a lowered graph: every op's kind, operands, attributes, type and layer, every
    param's type and initializer, and the graphs inside it (a recurrence's body)."""
    h = hashlib.sha256()
    _feed(h, graph)
    return h.hexdigest()


def _feed(h: Any, graph: Graph) -> None:
    for name, p in sorted(graph.params.items()):
        h.update(f"param {name} {p.type} {p.init}\n".encode())
    for name, op in sorted(graph.inputs.items()):
        h.update(f"input {name} {op}\n".encode())
    for op in graph.ops:
        attrs = json.dumps(op.attrs, sort_keys=True, default=repr)
        h.update(f"op {op.kind} {op.inputs} {attrs} {op.type} {op.layer}\n".encode())
    h.update(f"outputs {graph.outputs}\n".encode())
    for name, sub in sorted(graph.subgraphs.items()):
        h.update(f"subgraph {name}\n".encode())
        _feed(h, sub)


def run_of(source: Path) -> Path | None:
    """The run directory that `source` (a run directory, its checkpoints folder, or one step
    of it) belongs to, if it is one with a `run.json`."""
    for candidate in (source, source.parent, source.parent.parent):
        if (candidate / "run.json").is_file():
            return candidate
    return None


def stored(run: Path) -> dict[str, Any] | None:
    """The record in `run`'s `run.json`; None for a run from before it (or no readable one)."""
    try:
        info = json.loads((run / "run.json").read_text())
    except (OSError, ValueError):
        return None
    found = info.get(KEY) if isinstance(info, dict) else None
    return found if isinstance(found, dict) else None


def check_resume(run: Path, session: Session | MultiTaskSession) -> None:
    """Refuse a resume whose model or data is not the run's, naming the first differences."""
    then = stored(run)
    if then is None:
        return
    found = differences(then, record(session), with_train_data=True)
    if found:
        raise UsageError(
            f"the run in {run} trained another model or data; a resumed run must use its own:"
            + _listed(found),
            path=str(run),
            code="resume-mismatch",
            hint=f"resume with the run's own spec and data (its frozen spec is in "
            f"{run / 'spec'}; `seqc data prepare` rebuilds a corpus whose files changed), or "
            "start a new run with another --run-dir",
        )


def check_use(run: Path, session: Session) -> None:
    """Refuse to evaluate, decode or export a run's weights with another model or tokenizer
    than the ones that trained them (other data to score on is fine)."""
    then = stored(run)
    if then is None or session.task not in then.get("tasks", {}):
        return
    now = {"tasks": {session.task: _task_record(session)}}
    mine = {"tasks": {session.task: then["tasks"][session.task]}}
    found = differences(mine, now, with_train_data=False)
    if found:
        fixes = []
        if any(not _about_data(line) for line in found):
            fixes.append(
                f"use the run's own spec ({run / 'spec'}) and settings (no --set that changes "
                "the model)"
            )
        if any(_about_data(line) for line in found):
            fixes.append(
                "the tokenizer is fitted on the train split, which changed since the run "
                "trained: restore the data it trained on (`seqc data list` names a damaged "
                "prepared corpus)"
            )
        raise UsageError(
            f"the weights in {run} were trained with another model or tokenizer than this "
            "spec gives now: they would compute something else here:" + _listed(found),
            path=str(run),
            code="run-mismatch",
            hint="; ".join(fixes),
        )


def _about_data(line: str) -> bool:
    return any(f"{what}: " in line for what in ("tokenizer", "train split"))


def differences(then: dict[str, Any], now: dict[str, Any], *, with_train_data: bool) -> list[str]:
    """What differs, task by task, in words: the model's args, its tensors, its graph (when
    nothing above names the change), the tokenizers, and with `with_train_data` the train
    split; with a changed tokenizer, the train split too (it is what a tokenizer is fitted on)."""
    out: list[str] = []
    before, after = then.get("tasks", {}), now.get("tasks", {})
    for task in sorted(set(before) | set(after)):
        if task not in before or task not in after:
            had = "had" if task in before else "did not have"
            out.append(f"task `{task}`: the run {had} it")
            continue
        a, b = before[task], after[task]
        head = f"{task}: " if len(after) > 1 or len(before) > 1 else ""
        model = _changed(a.get("model", {}), b.get("model", {}))
        model.sort(key=lambda change: (change[0].count("."), change[0]))  # the outermost first
        out += [
            f"{head}{task}.model{'' if p.startswith(':') else '.'}{p}: {x} when trained, {y} now"
            for p, x, y in model
        ]
        tensors = _changed(a.get("params", {}), b.get("params", {}))
        out += [f"{head}tensor {p}: {x} when trained, {y} now" for p, x, y in tensors]
        if not model and not tensors and a.get("graph") != b.get("graph"):
            out.append(
                f"{head}the model's graph differs (a forward body, or a layer's lowering in "
                "another version of seqc), though its settings and tensors are the same"
            )
        data_a, data_b = a.get("data", {}), b.get("data", {})
        tokenizers = False
        for key in ("tokenizer", "target_tokenizer"):
            if data_a.get(key) != data_b.get(key):
                tokenizers = True
                out.append(
                    f"{head}{key.replace('_', ' ')}: {_tok(data_a.get(key))} when trained, "
                    f"{_tok(data_b.get(key))} now"
                )
        train_a = data_a.get("splits", {}).get("train")
        train_b = data_b.get("splits", {}).get("train")
        if (with_train_data or tokenizers) and train_a != train_b:
            out.append(f"{head}train split: {_split(train_a)} when trained, {_split(train_b)} now")
    return out


def _changed(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (k, _shown(a.get(k)), _shown(b.get(k)))
        for k in sorted(set(a) | set(b))
        if a.get(k) != b.get(k)
    ]


def _shown(value: Any) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, list) and len(value) == 2 and isinstance(value[1], list):
        return f"{value[0]}{value[1]}"  # a tensor: float32[128, 512]
    return str(value)


def _tok(fp: dict[str, Any] | None) -> str:
    if not fp:
        return "(none)"
    return (
        f"{fp.get('kind')} with {fp.get('vocab_size'):,} ids (sha256 {str(fp.get('sha256'))[:12]})"
    )


def _split(info: dict[str, Any] | None) -> str:
    if not info:
        return "(none)"
    return f"{info.get('examples'):,} examples (sha256 {str(info.get('sha256'))[:12]})"


def _listed(found: list[str]) -> str:
    shown = "".join(f"\n  - {line}" for line in found[:SHOWN])
    more = f"\n  ... and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
    return shown + more
