"""What the editor says about a `sweep`: its hover, as `seqc show -s` prints it, and what may
be written in it.

A sweep's name shows its settings and space; a field of its body (`metric`, `sampler`) what the
field means; a path of its `space { }` the base experiment's value there and the line that set
it, which is what a trial's value replaces. Completion offers the fields, the experiments, the
distributions, samplers and pruners with their arguments, and the paths of the base experiment
part by part. Errors need nothing here: `seqc check`'s own
located errors (with their did-you-mean quick fixes) reach the editor as diagnostics, and
go-to-definition on `experiment = NAME` follows the registry like an `extends`.
"""

from __future__ import annotations

from typing import Any

from lsprotocol import types

from seqc.lsp.context import Cursor, dotted_at
from seqc.lsp.documents import Analysis
from seqc.resolve.program import Program
from seqc.resolve.values import show_value
from seqc.spec import ir
from seqc.spec.errors import SeqcError
from seqc.spec.printable import printable


def _resolved(program: Program, name: str, analysis: Analysis) -> Any:
    """Sweep `name` and its base experiment resolved, once per version of the text; None when
    the sweep does not resolve (its error is a diagnostic already)."""
    key = f"sweep {name}"  # experiments are cached by bare name; a space cannot be in one
    if key not in analysis.resolved:
        from seqc.resolve.experiment import resolve
        from seqc.resolve.sweep import resolve_sweep

        try:
            sweep = resolve_sweep(program, name)
            analysis.resolved[key] = (sweep, resolve(program, sweep.experiment, []))
        except (SeqcError, RecursionError):
            analysis.resolved[key] = None
    return analysis.resolved[key]


def sweep_md(program: Program, name: str, analysis: Analysis) -> str:
    """A sweep's declaration, settings and space beside the base experiment's values."""
    decl = program.sweeps[name]
    out = [f"```seq\nsweep {name}\n```"]
    if decl.body.doc:
        out.append(decl.body.doc)
    if decl.span is not None:
        out.append(f"declared at {decl.span}")
    found = _resolved(program, name, analysis)
    if found is None:
        out.append("*does not resolve: see the diagnostics*")
        return "\n\n".join(out)
    sweep, base = found
    out.append(
        f"over `{sweep.experiment}`, {sweep.goal} `{sweep.metric.text}`, {sweep.trials} trials; "
        f"sampler `{sweep.sampler.describe()}`, pruner `{sweep.pruner.describe()}`"
    )
    rows = [
        f"{d.path} = {_clip(d.describe())}  # now {_clip(show_value(base.get(d.path)))}"
        for d in sweep.space
    ]
    out.append("```seq\n" + "\n".join(rows) + "\n```")
    return "\n\n".join(out)


def field_md(cur: Cursor, text: str, program: Program | None, analysis: Analysis) -> str | None:
    """The left of `=` in a sweep: a field's meaning, or a space path's value in the base."""
    from seqc.resolve.sweep import FIELDS

    assert cur.token is not None
    sweep = cur.enclosing("sweep")
    path = dotted_at(text, cur.token)  # the whole path, wherever in it the cursor is
    if cur.enclosing("block") is None:
        meaning = FIELDS.get(path)
        return f"```seq\n{path}\n```\nfield of a `sweep`\n\n{meaning}" if meaning else None
    if program is None or sweep is None or sweep.name not in program.sweeps:
        return None
    found = _resolved(program, sweep.name, analysis)
    if found is None:
        return None
    resolved, base = found
    try:
        dim = resolved.dimension(path)
    except KeyError:
        return None
    value, origin = base.get(path), base.origin(path)
    return (
        f"```seq\n{path} = {_clip(dim.describe())}\n```\nsearched by sweep `{resolved.name}`"
        f"\n\n**In `{base.name}`** (the base):\n```seq\n{path} = {_clip(show_value(value))}"
        f"  # {origin}\n```"
    )


def _clip(text: str, width: int = 200) -> str:
    """A value quoted in a hover, cut to `width` and `printable`."""
    return printable(text if len(text) <= width else text[:width] + "...")


# ------------------------------------------------------------------------------------ completion


def completions(cur: Cursor, program: Program | None) -> list[types.CompletionItem] | None:
    """What may be written at the cursor inside a sweep; None outside one (or where the
    generic completion knows better: a call of a built-in kind inside a choice)."""
    from seqc.resolve.sweep import FIELDS, PRUNERS, SAMPLERS
    from seqc.resolve.sweep_space import DISTRIBUTIONS

    sweep = cur.enclosing("sweep")
    if sweep is None:
        return None
    frame, prev = cur.frame, cur.prev
    table = {**{k: dict.fromkeys(v) for k, v in DISTRIBUTIONS.items()}, **SAMPLERS, **PRUNERS}
    if frame.kind == "call" and prev is not None and prev.text in ("(", ","):
        if frame.name not in table:
            return None  # a call of a built-in kind, in a choice: its params, as anywhere
        names = [n for n in table[frame.name] if n not in frame.given]
        return [_item(n, types.CompletionItemKind.Property, insert=f"{n} = ") for n in names]
    if frame.kind == "sweep" and cur.statement_start:
        return [_item(k, types.CompletionItemKind.Field, doc=v) for k, v in FIELDS.items()]
    if frame.kind == "block" and cur.statement_start:
        return _paths(cur, sweep.name, program)
    if frame.kind == "sweep" and frame.after_eq:
        # `experiment = ` is left to the generic completion of experiment names
        words = {"goal": ("minimize", "maximize"), "sampler": SAMPLERS, "pruner": PRUNERS}
        found = words.get(".".join(frame.stmt), ())
        return [_item(w, types.CompletionItemKind.Value) for w in found]
    if frame.kind == "block" and frame.after_eq:
        return [_item(k, types.CompletionItemKind.Function) for k in DISTRIBUTIONS]
    if frame.kind == "block" and prev is not None and prev.text == ".":
        return _paths(cur, sweep.name, program)
    return None


def _paths(cur: Cursor, name: str, program: Program | None) -> list[types.CompletionItem]:
    """The next part of a path the base experiment holds, after what is typed (`lm.model.`)."""
    from seqc.resolve.raw import dotted

    decl = program.sweeps.get(name) if program is not None else None
    items = decl.body.items if decl is not None else []
    item = next((i for i in items if isinstance(i, ir.Assign) and i.path == ("experiment",)), None)
    base_name = dotted(item.value) if item is not None else None
    if program is None or base_name not in program.experiments:
        return []
    from seqc.resolve.experiment import resolve

    try:
        base = resolve(program, base_name, [])
    except (SeqcError, RecursionError):
        return []
    typed = cur.chain[:-1] if cur.token is not None else cur.chain
    if cur.statement_start:
        typed = []
    parts = {
        p.split(".")[len(typed)]
        for p, _ in base.leaves()
        if p.split(".")[: len(typed)] == typed and len(p.split(".")) > len(typed)
    }
    return [_item(p, types.CompletionItemKind.Field) for p in sorted(parts)]


def _item(
    label: str, kind: types.CompletionItemKind, doc: str | None = None, insert: str | None = None
) -> types.CompletionItem:
    return types.CompletionItem(
        label=label,
        kind=kind,
        insert_text=insert,
        documentation=types.MarkupContent(kind=types.MarkupKind.Markdown, value=doc)
        if doc
        else None,
    )
