"""Hover: what a name at the cursor is, in the words of the catalogue and the spec.

A layer kind shows its signature and params (what `seqc layers KIND` prints), a parameter or a
block field its type, default and description, a user layer its declaration, an experiment its
`extends` chain and every resolved value with where it was set (what `seqc show --provenance`
prints), a sweep its space beside the base experiment's values (`seqc.lsp.sweeps`). Inside an
experiment, a field or argument also shows the value it resolves to and which line set it.
"""

from __future__ import annotations

from lsprotocol import types

from seqc.lsp import lookup, sweeps
from seqc.lsp.context import BODIES, Cursor, cursor_at, dotted_at
from seqc.lsp.documents import Analysis, Lines
from seqc.resolve.program import Program
from seqc.resolve.values import show_value
from seqc.spec import ir
from seqc.spec.errors import SeqcError
from seqc.spec.kinds import KindSpec, ParamSpec
from seqc.spec.printable import printable
from seqc.spec.printer import format_param as param_text
from seqc.spec.types import Type

MAX_LEAVES = 60
"""The most resolved values an experiment's hover lists (`seqc show` prints them all)."""


def hover(text: str, offset: int, analysis: Analysis, encoding: str | None) -> types.Hover | None:
    cur = cursor_at(text, offset)
    tok = cur.token
    if tok is None or tok.kind != "name":
        return None
    program = analysis.program or analysis.last_program
    value = describe(cur, text, program, analysis)
    if not value:
        return None
    lines = Lines(text, encoding)
    rng = types.Range(start=lines.at_offset(tok.start), end=lines.at_offset(tok.end))
    return types.Hover(
        contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=value), range=rng
    )


def describe(cur: Cursor, text: str, program: Program | None, analysis: Analysis) -> str | None:
    """Markdown for the name under the cursor, or None when it is nothing seqc knows."""
    tok = cur.token
    assert tok is not None
    name, frame, nxt = tok.text, cur.frame, cur.next.text if cur.next else ""
    if frame.kind == "top":
        return _header(cur, text, program, analysis)
    if (nxt == "=" and frame.kind in ("call", "params")) or (frame.kind == "params" and nxt == ":"):
        return _argument(cur, program, analysis)
    lhs = cur.lhs
    if lhs is not None and nxt != "{" and cur.enclosing("sweep") is not None:
        return sweeps.field_md(cur, text, program, analysis)
    if lhs is not None and nxt != "{" and frame.kind in BODIES:
        return _field(cur, lhs, program, analysis)
    if nxt == "{" and lookup.block(name) is not None:
        return kind_md(lookup.block(name))  # type: ignore[arg-type]
    layer = cur.enclosing("layer")
    if layer is not None and program is not None and nxt != "(":
        decl = program.layers.get(layer.name)
        local = _layer_local(decl, name) if decl is not None else None
        if local:
            return local
    return _name(name, dotted_at(text, tok), program, analysis, lookup.expected_type(cur, program))


def _header(cur: Cursor, text: str, program: Program | None, analysis: Analysis) -> str | None:
    """A name in a declaration's header: the declared thing itself, or the experiment that an
    `extends` names."""
    assert cur.token is not None
    return _name(cur.token.text, dotted_at(text, cur.token), program, analysis, None)


def _name(
    name: str, dotted: str, program: Program | None, analysis: Analysis, expected: Type | None
) -> str | None:
    if program is not None:
        if dotted in program.experiments:
            return experiment_md(program, dotted, analysis)
        if dotted in program.sweeps:
            return sweeps.sweep_md(program, dotted, analysis)
        if name in program.layers:
            return layer_md(program.layers[name])
        for table in (program.tasks, program.inputs):
            decl = table.get(name)
            if decl is not None:
                return _decl_md(decl)
    for ns in [*lookup.namespaces(expected), None]:
        specs = lookup.kinds_named(name, ns)
        if specs:
            return "\n\n---\n\n".join(kind_md(s) for s in specs)
    return None


def _argument(cur: Cursor, program: Program | None, analysis: Analysis) -> str | None:
    """A keyword argument of a call, or a param in a layer's own param list."""
    frame, name = cur.frame, cur.word
    if frame.kind == "params":
        decl = program.layers.get(frame.name) if program is not None else None
        p = decl.param(name) if decl is not None else None
        return user_param_md(p, frame.name) if p is not None else None
    frame.keyword = name  # the argument under the cursor, not the one before it
    p = lookup.call_param(frame, program)
    if p is None:
        return None
    out = param_md(p, frame.name) if isinstance(p, ParamSpec) else user_param_md(p, frame.name)
    path = value_path(cur)
    if path is not None:
        out += _provenance(program, cur, path, analysis)
    return out


def _field(cur: Cursor, lhs: list[str], program: Program | None, analysis: Analysis) -> str | None:
    """A field on the left of `=` in an input, task or experiment body, or in a block."""
    frames = cur.frames
    spec, owner = lookup.field(frames, len(frames) - 1, lhs, program)
    exp = cur.enclosing("experiment")
    out = ""
    if spec is not None:
        out = param_md(spec, owner, block=True)
    elif exp is not None and program is not None:
        head = lhs[0]
        if len(lhs) == 1 and head in program.tasks:
            out = _decl_md(program.tasks[head])
        elif len(lhs) == 1 and lookup.block(head) is not None:
            out = kind_md(lookup.block(head))  # type: ignore[arg-type]
    path = value_path(cur)
    if exp is not None and path is not None:
        out += _provenance(program, cur, path, analysis)
    return out or None


def value_path(cur: Cursor) -> list[str] | None:
    """The dotted path of the value under the cursor in an experiment's resolved config:
    the block, the assignment path and the keyword arguments of the calls around it."""
    frames = cur.frames
    start = next((i for i, f in enumerate(frames) if f.kind == "experiment"), None)
    if start is None:
        return None
    path: list[str] = []
    for i in range(start, len(frames)):
        f, last = frames[i], i == len(frames) - 1
        if f.kind == "block":
            path.append(f.name)
        if f.kind in ("experiment", "block"):
            if last:
                break
            if frames[i + 1].kind != "block":  # else the block's own frame names it
                path.extend(f.stmt)
        elif f.kind == "call":
            if last:
                break
            if f.keyword is None:
                return None
            path.append(f.keyword)
        else:  # inside a list, map or parentheses: no path addresses it
            return None
    if frames[-1].kind == "call":
        path.append(cur.word)
    elif cur.lhs is not None:
        path.extend(cur.lhs)
    else:
        return None
    return path


def _provenance(program: Program | None, cur: Cursor, path: list[str], analysis: Analysis) -> str:
    exp = cur.enclosing("experiment")
    r = resolved(program, exp.name if exp else "", analysis)
    if r is None:
        return ""
    dotted = ".".join(path)
    try:
        value = r.get(dotted)
    except (KeyError, IndexError, ValueError, TypeError, AttributeError):
        return ""
    origin = r.origin(dotted)
    return (
        f"\n\n**In `{r.name}`** (resolved):\n```seq\n{dotted} = {_clip(show_value(value))}"
        f"  # {origin}\n```"
    )


def resolved(program: Program | None, name: str, analysis: Analysis) -> object | None:
    """Experiment `name` resolved as `seqc show` resolves it, once per version of the text;
    None when it does not resolve (its error is a diagnostic already)."""
    if program is None or name not in program.experiments:
        return None
    if name not in analysis.resolved:
        from seqc.resolve.experiment import resolve

        try:
            analysis.resolved[name] = resolve(program, name)
        except (SeqcError, RecursionError):
            analysis.resolved[name] = None
    return analysis.resolved[name]


def _clip(text: str, width: int = 200) -> str:
    """A value quoted in a hover, cut to `width` and `printable` (a spec's string may hold an
    escape sequence or a bidi override)."""
    return printable(text if len(text) <= width else text[:width] + "...")


# ------------------------------------------------------------------------------------ markdown


def kind_md(spec: KindSpec) -> str:
    """A kind as `seqc layers KIND` prints it: signature, description, params."""
    out = [f"```seq\n{spec.name}({', '.join(spec.positional)})\n```", f"*{spec.namespace}*"]
    if spec.doc:
        out.append(spec.doc)
    if spec.params:
        rows = ["| param | type | default | description |", "|---|---|---|---|"]
        for p in spec.params:
            default = "required" if p.required else f"`{_cell(show_value(p.default))}`"
            rows.append(f"| `{p.name}` | `{_cell(str(p.type))}` | {default} | {_cell(p.doc)} |")
        out.append("\n".join(rows))
    return "\n\n".join(out)


def _cell(text: str) -> str:
    return _clip(text.replace("\n", " "), 120).replace("|", "\\|")


def param_md(p: ParamSpec, owner: str, block: bool = False) -> str:
    default = "required" if p.required else show_value(p.default)
    what = f"field of `{owner} {{ }}`" if block else f"param of `{owner}`"
    out = f"```seq\n{p.name}: {p.type}\n```\n{what}; default: `{_clip(default)}`"
    return out + (f"\n\n{p.doc}" if p.doc else "")


def user_param_md(p: ir.Param, owner: str) -> str:
    out = f"```seq\n{param_text(p)}\n```\nparam of `{owner}`"
    return out + (f"\n\n{p.doc}" if p.doc else "")


def layer_md(decl: ir.LayerDecl) -> str:
    params = ", ".join(param_text(p) for p in decl.params)
    out = [f"```seq\n{decl.kind} {decl.name}({params})\n```"]
    if decl.doc:
        out.append(decl.doc)
    if decl.sublayers:
        out.append(
            "sub-layers: " + ", ".join(f"`{s.name}: {_callee(s.call)}`" for s in decl.sublayers)
        )
    if decl.span is not None:
        out.append(f"declared at {decl.span}")
    return "\n\n".join(out)


def _callee(call: ir.Call) -> str:
    return call.func.id if isinstance(call.func, ir.Name) else "?"


def _layer_local(decl: ir.LayerDecl, name: str) -> str | None:
    """A name used inside a layer: one of its params or sub-layers."""
    p = decl.param(name)
    if p is not None:
        return user_param_md(p, decl.name)
    sub = next((s for s in decl.sublayers if s.name == name), None)
    if sub is not None:
        repeat = "repeat(...) " if sub.repeat is not None else ""
        head = f"{sub.name} = {repeat}{_callee(sub.call)}(...)"
        return f"```seq\n{head}\n```\nsub-layer of `{decl.name}`"
    return None


def _decl_md(decl: ir.InputDecl | ir.TaskDecl) -> str:
    out = f"```seq\n{decl.decl} {decl.name}\n```"
    if decl.body.doc:
        out += f"\n\n{decl.body.doc}"
    if decl.span is not None:
        out += f"\n\ndeclared at {decl.span}"
    return out


def experiment_md(program: Program, name: str, analysis: Analysis) -> str:
    """An experiment: its chain, description, and its resolved values with their origins (the
    lines of `seqc show -e NAME --provenance`)."""
    decl = program.experiments[name]
    out = [f"```seq\nexperiment {name}" + (f" extends {decl.extends}" if decl.extends else "")]
    out[0] += "\n```"
    if decl.body.doc:
        out.append(decl.body.doc)
    if decl.span is not None:
        out.append(f"declared at {decl.span}")
    r = resolved(program, name, analysis)
    if r is None:
        out.append("*does not resolve: see the diagnostics*")
        return "\n\n".join(out)
    out.append("chain: " + " <- ".join(f"`{c}`" for c in r.chain))  # type: ignore[attr-defined]
    leaves = r.leaves()  # type: ignore[attr-defined]
    width = max((len(p) for p, _ in leaves[:MAX_LEAVES]), default=0)
    rows = []
    for path, value in leaves[:MAX_LEAVES]:
        text = value if isinstance(value, str) and value.endswith("(...)") else show_value(value)
        rows.append(f"{path:<{width}} = {_clip(text, 80)}  # {r.origin(path)}")  # type: ignore[attr-defined]
    if len(leaves) > MAX_LEAVES:
        rows.append(f"# ... {len(leaves) - MAX_LEAVES} more: seqc show -e {name} --provenance")
    out.append("```seq\n" + "\n".join(rows) + "\n```")
    return "\n\n".join(out)
