"""Go to definition and the document outline.

Definition follows the program's index of declarations, which spans every imported file: a
user layer, an input, a task, the experiment an `extends` or a sweep's `experiment =` names
(wherever it is declared), a param or sub-layer inside a layer, and the file an `import` names.
The outline lists a buffer's declarations with their params, sub-layers, blocks and fields,
from its parse; a buffer that does not parse has no outline until it does.
"""

from __future__ import annotations

import gc
from pathlib import Path

from lsprotocol import types
from pygls.workspace import Workspace

from seqc.lsp.context import cursor_at, dotted_at
from seqc.lsp.documents import Analysis, Lines, resolved, text_of, uri_of
from seqc.resolve.program import Program
from seqc.spec import ir
from seqc.spec.errors import SeqcError
from seqc.spec.parser import parse_text


def _location(span: ir.Span, workspace: Workspace) -> types.Location:
    uri = uri_of(span.file, workspace)
    lines = Lines(text_of(uri, workspace), workspace.position_encoding)
    return types.Location(uri=uri, range=lines.span_range(span))


def definition(
    text: str, offset: int, folder: Path, analysis: Analysis, workspace: Workspace
) -> types.Location | None:
    cur = cursor_at(text, offset)
    tok = cur.token
    if tok is None:
        return None
    if tok.kind == "string" and cur.prev is not None and cur.prev.text == "import":
        target = resolved(folder / tok.text.strip('"'))
        if target is None or not target.is_file():
            return None
        start = types.Position(line=0, character=0)
        return types.Location(
            uri=uri_of(str(target), workspace), range=types.Range(start=start, end=start)
        )
    if tok.kind != "name":
        return None
    program: Program | None = analysis.program or analysis.last_program  # type: ignore[assignment]
    if program is None:
        return None
    layer = cur.enclosing("layer", "params")
    if layer is not None and not cur.chain[:-1] and cur.frame.kind != "call":
        decl = program.layers.get(layer.name)
        if decl is not None:
            local = decl.param(tok.text) or next(
                (s for s in decl.sublayers if s.name == tok.text), None
            )
            if local is not None and local.span is not None:
                return _location(local.span, workspace)
    for name in (dotted_at(text, tok), ".".join(cur.chain), tok.text):
        tables = (program.experiments, program.sweeps, program.layers, program.tasks)
        for table in (*tables, program.inputs):
            decl = table.get(name)
            if decl is not None and decl.span is not None:
                return _location(decl.span, workspace)
    return None


# ------------------------------------------------------------------------------------ outline

_DECL_KINDS = {
    "input": types.SymbolKind.Struct,
    "layer": types.SymbolKind.Class,
    "task": types.SymbolKind.Function,
    "experiment": types.SymbolKind.Module,
    "sweep": types.SymbolKind.Event,
}


def symbols(text: str, filename: str, encoding: str | None) -> list[types.DocumentSymbol]:
    try:
        spec = parse_text(text, filename)
    except (SeqcError, RecursionError):
        return []
    finally:
        gc.unfreeze()
    lines = Lines(text, encoding)
    out = []
    for decl in spec.decls:
        if decl.span is None:
            continue
        if isinstance(decl, ir.LayerDecl):
            children = [
                _symbol(lines, p.name, types.SymbolKind.Field, p.span, "param") for p in decl.params
            ]
            children += [
                _symbol(lines, s.name, types.SymbolKind.Property, s.span, "sub-layer")
                for s in decl.sublayers
            ]
            if decl.forward is not None:
                children.append(
                    _symbol(lines, "forward", types.SymbolKind.Method, decl.forward.span)
                )
            detail = decl.kind
        else:
            children = _body(lines, decl.body)
            detail = f"extends {decl.extends}" if getattr(decl, "extends", None) else decl.decl
        sym = _symbol(lines, decl.name, _DECL_KINDS[decl.decl], decl.span, detail, children)
        out.append(sym)
    return [s for s in out if s is not None]


def _body(lines: Lines, body: ir.Body) -> list[types.DocumentSymbol | None]:
    out: list[types.DocumentSymbol | None] = []
    for item in body.items:
        if isinstance(item, ir.Assign):
            out.append(_symbol(lines, ".".join(item.path), types.SymbolKind.Field, item.span))
        elif isinstance(item, ir.Block):
            out.append(
                _symbol(
                    lines,
                    item.name,
                    types.SymbolKind.Namespace,
                    item.span,
                    "block",
                    _body(lines, item.body),
                )
            )
        else:
            func = item.call.func
            name = func.id if isinstance(func, ir.Name) else "call"
            out.append(_symbol(lines, name, types.SymbolKind.Function, item.span))
    return out


def _symbol(
    lines: Lines,
    name: str,
    kind: types.SymbolKind,
    span: ir.Span | None,
    detail: str | None = None,
    children: list[types.DocumentSymbol | None] | None = None,
) -> types.DocumentSymbol | None:
    if span is None:
        return None
    rng = lines.span_range(span)
    return types.DocumentSymbol(
        name=name or "?",
        kind=kind,
        range=rng,
        selection_range=_name_range(lines, span, name, rng),
        detail=detail,
        children=[c for c in children or [] if c is not None] or None,
    )


def _name_range(lines: Lines, span: ir.Span, name: str, whole: types.Range) -> types.Range:
    """Where the name is written in its declaration's first line (else the whole range)."""
    line = lines.lines[span.line - 1] if 0 < span.line <= len(lines.lines) else ""
    col = line.find(name, span.col - 1) if name else -1
    if col < 0:
        return whole
    return types.Range(
        start=lines.position(span.line - 1, col), end=lines.position(span.line - 1, col + len(name))
    )
