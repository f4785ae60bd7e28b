"""Completion: the names that may be written where the cursor is.

Read from the cursor's frames, not from a parse (the text being completed rarely parses):
layer kinds where a sub-layer is declared, a kind's params inside its call's parentheses,
block fields at the start of a statement, the kinds a field's type accepts after its `=`,
experiment names after `extends`, and `.seq` files and folders inside an `import` string.
"""

from __future__ import annotations

import os
from pathlib import Path

from lsprotocol import types

from seqc.lsp import lookup, sweeps
from seqc.lsp.context import BODIES, Cursor, cursor_at
from seqc.lsp.documents import Analysis, Lines, resolved
from seqc.lsp.hover import kind_md, layer_md, param_md, user_param_md
from seqc.resolve.program import Program
from seqc.spec.kinds import REGISTRY, KindSpec

TOP_KEYWORDS = ("import", "input", "layer", "model", "task", "experiment", "sweep")
MAX_PATHS = 200


def complete(
    text: str, offset: int, file: Path, analysis: Analysis, encoding: str | None
) -> types.CompletionList:
    """The completions at `offset` of the buffer `text`, which is the file `file` (imports are
    relative to its folder, and it is never offered as an import of itself)."""
    cur = cursor_at(text, offset)
    lines = Lines(text, encoding)
    program = analysis.program or analysis.last_program
    items = _items(cur, text, offset, file, program, lines)
    return types.CompletionList(is_incomplete=False, items=items)


def _items(
    cur: Cursor, text: str, offset: int, file: Path, program: Program | None, lines: Lines
) -> list[types.CompletionItem]:
    tok, frame, prev = cur.token, cur.frame, cur.prev
    if tok is not None and tok.kind == "string":
        if prev is not None and prev.text == "import" and frame.kind == "top":
            return _paths(cur.prefix[1:], file, offset, lines)
        return []
    if tok is not None and tok.kind != "name":
        return []
    if frame.kind == "top":
        if "extends" in frame.stmt and frame.stmt[:1] == ["experiment"]:
            return _experiments(cur, text, offset, program, lines)
        if cur.statement_start:
            return [_keyword(k) for k in TOP_KEYWORDS]
        return []
    base = frame.kind == "sweep" and frame.after_eq and frame.stmt == ["experiment"]
    if base and not cur.statement_start:  # a sweep's `experiment = `
        return _experiments(cur, text, offset, program, lines)
    in_sweep = sweeps.completions(cur, program)
    if in_sweep is not None:
        return in_sweep
    if frame.kind == "call" and prev is not None and prev.text in ("(", ","):
        return _params(frame.name, frame.given, frame.positional, program)
    if frame.kind in BODIES and cur.statement_start:
        return _fields(cur, [], program)
    if frame.kind in BODIES and not frame.after_eq and prev is not None and prev.text == ".":
        head = cur.chain[:-1] if tok is not None else cur.chain
        return _fields(cur, head, program) if head else []
    if frame.kind == "layer" and frame.after_eq:
        return _layer_kinds(program)
    if frame.kind == "layer" and cur.statement_start:
        return [_keyword("forward")]
    return _values(cur, program)


def _keyword(word: str) -> types.CompletionItem:
    return types.CompletionItem(label=word, kind=types.CompletionItemKind.Keyword)


def _md(value: str) -> types.MarkupContent:
    return types.MarkupContent(kind=types.MarkupKind.Markdown, value=value)


def _kind_item(spec: KindSpec) -> types.CompletionItem:
    return types.CompletionItem(
        label=spec.name,
        kind=types.CompletionItemKind.Class
        if spec.namespace == "layer"
        else types.CompletionItemKind.Function,
        detail=f"{spec.namespace}: {spec.doc}",
        documentation=_md(kind_md(spec)),
    )


def _layer_kinds(program: Program | None) -> list[types.CompletionItem]:
    """Built-in layer kinds and the program's own layers."""
    items = [_kind_item(s) for s in REGISTRY.namespaces.get("layer", {}).values()]
    for decl in lookup.user_layers(program):
        items.append(
            types.CompletionItem(
                label=decl.name,
                kind=types.CompletionItemKind.Class,
                detail=f"{decl.kind} (user)",
                documentation=_md(layer_md(decl)),
            )
        )
    return items


def _params(
    callee: str, given: list[str], positional: int, program: Program | None
) -> list[types.CompletionItem]:
    """The params of the called kind not written yet (by name or position), as `name = `."""
    items = []
    decl = program.layers.get(callee) if program is not None else None
    if decl is not None:
        for p in decl.params[positional:]:
            if p.name not in given:
                items.append(
                    types.CompletionItem(
                        label=p.name,
                        kind=types.CompletionItemKind.Property,
                        detail=f"{p.name}: {p.type.name}",
                        documentation=_md(user_param_md(p, callee)),
                        insert_text=f"{p.name} = ",
                    )
                )
        return items
    for spec in lookup.kinds_named(callee):
        for p in spec.params:
            if p.name not in given and p.name not in spec.positional[:positional]:
                items.append(
                    types.CompletionItem(
                        label=p.name,
                        kind=types.CompletionItemKind.Property,
                        detail=f"{p.name}: {p.type}",
                        documentation=_md(param_md(p, spec.name)),
                        insert_text=f"{p.name} = ",
                    )
                )
    return items


def _fields(cur: Cursor, head: list[str], program: Program | None) -> list[types.CompletionItem]:
    """The fields a statement may set in this body (after `head.`, the fields of `head`)."""
    frames = cur.frames
    spec, prefix = lookup.body_spec(frames, len(frames) - 1)
    if spec is None:
        return []
    path = [*prefix, *head]
    owner = spec
    extra: list[str] = []
    if spec.name == "experiment" or prefix:
        if not path:
            extra = [*lookup.EXPERIMENT_BLOCKS, "share", *(program.tasks if program else [])]
        elif len(path) == 1 and path[0] in lookup.EXPERIMENT_BLOCKS:
            owner = lookup.block(path[0]) or spec
        elif len(path) == 1 and program is not None and path[0] in program.tasks:
            owner = lookup.block("task") or spec
        else:
            return []
    elif head:
        return []
    items = [
        types.CompletionItem(
            label=p.name,
            kind=types.CompletionItemKind.Field,
            detail=str(p.type),
            documentation=_md(param_md(p, owner.name, block=True)),
        )
        for p in owner.params
    ]
    for word in extra:
        block = lookup.block(word)
        items.append(
            types.CompletionItem(
                label=word,
                kind=types.CompletionItemKind.Module,
                detail="block" if block or word == "share" else "task",
                documentation=_md(kind_md(block)) if block else None,
            )
        )
    return items


def _values(cur: Cursor, program: Program | None) -> list[types.CompletionItem]:
    """What the type of the value being written accepts: kinds of its namespaces, the
    strings of an enum, and declarations for the fields that name them."""
    t = lookup.expected_type(cur, program)
    items = []
    for ns in lookup.namespaces(t):
        items.extend(_kind_item(s) for s in REGISTRY.namespaces.get(ns, {}).values())
    for choice in lookup.choices(t):
        items.append(
            types.CompletionItem(
                label=f'"{choice}"', kind=types.CompletionItemKind.EnumMember, filter_text=choice
            )
        )
    if program is not None and (t is None or t.name in ("any", "list")):
        owner = cur.enclosing(*BODIES)
        stmt = owner.stmt if owner is not None else []
        names: list[str] = []
        if owner is not None and owner.kind == "task" and stmt == ["input"]:
            names = list(program.inputs)
        elif owner is not None and owner.kind == "task" and stmt == ["model"]:
            names = [n for n, d in program.layers.items() if d.kind == "model"]
        elif owner is not None and owner.kind == "experiment" and stmt == ["tasks"]:
            names = list(program.tasks)
        items.extend(
            types.CompletionItem(label=n, kind=types.CompletionItemKind.Reference) for n in names
        )
    return items


def _experiments(
    cur: Cursor, text: str, offset: int, program: Program | None, lines: Lines
) -> list[types.CompletionItem]:
    """Experiment names after `extends`, replacing the whole dotted name typed so far."""
    typed = ".".join(cur.chain) if cur.token is not None else ""
    if cur.token is None and cur.prev is not None and cur.prev.text == ".":
        typed = ".".join(cur.chain) + "."
    start = lines.at_offset(offset - len(typed))
    rng = types.Range(start=start, end=lines.at_offset(offset))
    names = sorted(program.experiments) if program is not None else []
    own = cur.frames[0].stmt
    current = ".".join(own[1 : own.index("extends")]) if "extends" in own else ""
    return [
        types.CompletionItem(
            label=n,
            kind=types.CompletionItemKind.Module,
            filter_text=n,
            text_edit=types.TextEdit(range=rng, new_text=n),
            detail=str(program.experiments[n].span) if program is not None else None,
        )
        for n in names
        if n != current
    ]


def _paths(typed: str, file: Path, offset: int, lines: Lines) -> list[types.CompletionItem]:
    """Folders and `.seq` files for an import path typed so far, relative to the buffer's file;
    not that file itself (a file importing itself is an import cycle), by whatever path."""
    head, _, last = typed.rpartition("/")
    base = file.parent / head if head else file.parent
    itself = resolved(file)
    rng = types.Range(start=lines.at_offset(offset - len(last)), end=lines.at_offset(offset))
    items = []
    try:
        entries = sorted(os.scandir(base), key=lambda e: e.name)
    except OSError:
        return []
    for entry in entries:
        if entry.name.startswith(".") or len(items) >= MAX_PATHS:
            continue
        try:
            is_dir = entry.is_dir()
        except OSError:
            continue
        if not is_dir and not entry.name.endswith(".seq"):
            continue
        if not is_dir and itself is not None and resolved(Path(entry.path)) == itself:
            continue
        name = entry.name + ("/" if is_dir else "")
        items.append(
            types.CompletionItem(
                label=name,
                kind=types.CompletionItemKind.Folder if is_dir else types.CompletionItemKind.File,
                text_edit=types.TextEdit(range=rng, new_text=name),
            )
        )
    if head in ("", ".", "..") or head.endswith(".."):
        items.insert(
            0,
            types.CompletionItem(
                label="../",
                kind=types.CompletionItemKind.Folder,
                text_edit=types.TextEdit(range=rng, new_text="../"),
            ),
        )
    return items
