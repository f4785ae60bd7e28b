"""Spec IR back to canonical .seq text (`seqc fmt`).

Canonical means: two-space indents, one statement per line, a blank line between declarations,
`name = value` with spaces, calls and collections on one line when they fit in `WIDTH` columns and
one item per line (with a trailing comma) when they do not. Comments are kept where they were
attached. Parsing the output gives the same IR, spans aside, and printing is idempotent.
"""

from __future__ import annotations

import math

from seqc.spec import ir

WIDTH = 100
INDENT = "  "

_PREC = {"+": 1, "-": 1, "*": 2, "/": 2, "//": 2, "%": 2, "**": 4}
_NEG_PREC = 3
_ATOM_PREC = 10


def format_spec(spec: ir.SpecFile) -> str:
    out: list[str] = []
    out.extend(_comment_lines("", spec.header_comments))
    out.append(f"seqc {spec.version}")
    if spec.imports:
        out.append("")
        for imp in spec.imports:
            _stmt(out, "", imp, f"import {_string(imp.path)}")
    for decl in spec.decls:
        out.append("")
        out.extend(_decl(decl))
    if spec.end_comments:
        out.append("")
        out.extend(_comment_lines("", spec.end_comments))
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------ statements


def _stmt(out: list[str], indent: str, node: ir.Stmt, text: str) -> None:
    """Append a statement with its leading comments and trailing comment.

    `text` carries absolute indents on its continuation lines; only its first line is indented here.
    """
    if node.blank_before:
        out.append("")
    out.extend(_comment_lines(indent, node.comments))
    lines = text.split("\n")
    if node.trailing:
        lines[-1] += "  " + node.trailing
    out.append(indent + lines[0])
    out.extend(lines[1:])


def _comment_lines(indent: str, comments: tuple[str, ...]) -> list[str]:
    return [indent + c if c else "" for c in comments]


def _decl(decl: ir.Decl) -> list[str]:
    out: list[str] = []
    if isinstance(decl, ir.LayerDecl):
        text = _layer(decl)
    elif isinstance(decl, ir.ExperimentDecl):
        head = f"experiment {decl.name}"
        if decl.extends:
            head += f" extends {decl.extends}"
        text = head + " " + _body(decl.body, "")
    else:
        text = f"{decl.decl} {decl.name} " + _body(decl.body, "")
    _stmt(out, "", decl, text)
    return out


def _body(body: ir.Body, indent: str) -> str:
    inner = indent + INDENT
    lines: list[str] = []
    if body.doc is not None:
        lines.append(inner + _string(body.doc))
    for item in body.items:
        if isinstance(item, ir.Assign):
            prefix = ".".join(item.path) + " = "
            text = prefix + _expr(item.value, len(inner) + len(prefix), inner)
        elif isinstance(item, ir.Block):
            text = f"{item.name} " + _body(item.body, inner)
        else:
            text = _expr(item.call, len(inner), inner)
        _stmt(lines, inner, item, text)
    lines.extend(_comment_lines(inner, body.end_comments))
    if not lines:
        return "{}"
    return "{\n" + "\n".join(lines) + "\n" + indent + "}"


def _layer(decl: ir.LayerDecl) -> str:
    head = f"{decl.kind} {decl.name}"
    if decl.has_params:
        flat = ", ".join(format_param(p) for p in decl.params)
        multiline = any(p.comments or p.trailing for p in decl.params)
        if not multiline and len(head) + len(flat) + 4 <= WIDTH:
            head += f"({flat})"
        else:
            plines: list[str] = []
            for p in decl.params:
                _stmt(plines, INDENT, p, format_param(p, INDENT) + ",")
            head += "(\n" + "\n".join(plines) + "\n)"
    inner = INDENT
    lines: list[str] = []
    if decl.doc is not None:
        lines.append(inner + _string(decl.doc))
    for sub in decl.sublayers:
        prefix = f"{sub.name} = "
        if sub.repeat is not None:
            prefix += f"repeat({_expr(sub.repeat, 0, inner)}) "
        _stmt(lines, inner, sub, prefix + _expr(sub.call, len(inner) + len(prefix), inner))
    if decl.forward is not None:
        _stmt(lines, inner, decl.forward, _forward(decl.forward, inner))
    lines.extend(_comment_lines(inner, decl.end_comments))
    if not lines:
        return head + " {}"
    return head + " {\n" + "\n".join(lines) + "\n}"


def format_param(p: ir.Param, indent: str | None = None) -> str:
    """One param: flat, or, given the indent of its own line, with a long default wrapped."""
    text = f"{p.name}: {format_type(p.type)}"
    if p.range is not None:
        text += f" {_range(p.range)}"
    if p.default is not None:
        if indent is None:
            text += f" = {format_expr(p.default)}"
        else:
            text += " = " + _expr(p.default, len(indent) + len(text) + 3, indent)
    if p.doc is not None:
        text += f" {_string(p.doc)}"
    return text


def _range(r: ir.RangeExpr) -> str:
    """`> 0`, `<= 1`, `in [0, 1)`: as written (one comparison or an interval)."""
    if r.interval and r.low is not None and r.high is not None:
        open_, close = "(" if r.low_open else "[", ")" if r.high_open else "]"
        return f"in {open_}{r.low.text}, {r.high.text}{close}"
    if r.low is not None:
        return f"{'>' if r.low_open else '>='} {r.low.text}"
    assert r.high is not None
    return f"{'<' if r.high_open else '<='} {r.high.text}"


def _forward(fwd: ir.Forward, indent: str) -> str:
    params = ", ".join(f"{p.name}: {format_type(p.type)}" for p in fwd.params)
    head = f"forward ({params})"
    if fwd.returns:
        rets = ", ".join(format_type(t) for t in fwd.returns)
        head += f" -> ({rets})" if fwd.returns_parenthesized else f" -> {rets}"
    inner = indent + INDENT
    lines: list[str] = []
    for stmt in fwd.body:
        if isinstance(stmt, ir.Let):
            prefix = f"{stmt.name} = "
            text = prefix + _expr(stmt.value, len(inner) + len(prefix), inner)
        else:
            text = "return " + ", ".join(_expr(v, len(inner) + 7, inner) for v in stmt.values)
        _stmt(lines, inner, stmt, text)
    lines.extend(_comment_lines(inner, fwd.end_comments))
    if not lines:
        return head + " {}"
    return head + " {\n" + "\n".join(lines) + "\n" + indent + "}"


# ------------------------------------------------------------------------------------ expressions


def _string(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return '"' + escaped.replace("\t", "\\t") + '"'


def format_type(t: ir.TypeExpr) -> str:
    if t.args is None:
        return t.name
    return f"{t.name}[{', '.join(format_expr(a) for a in t.args)}]"


def _prec(e: ir.Expr) -> int:
    if isinstance(e, ir.BinOp):
        return _PREC[e.op]
    if isinstance(e, ir.Neg):
        return _NEG_PREC
    return _ATOM_PREC


def _wrap(e: ir.Expr, need: bool) -> str:
    text = format_expr(e)
    return f"({text})" if need else text


def _key(entry: ir.MapEntry) -> str:
    if entry.key_quoted or not isinstance(entry.key, str):
        if isinstance(entry.key, str):
            return _string(entry.key)
        # repr(inf) would read back as the name `inf`; any overflowing literal reads back as inf.
        return repr(entry.key) if math.isfinite(entry.key) else "1e999"
    return entry.key


def _postfix_head(e: ir.Expr) -> str:
    """The object of `.name` or the callee of `(...)`, parenthesized where it would re-parse
    differently: `2.x` lexes as `2.` then `x`, and `4 x gpu().y` takes `.y` into the replica."""
    need = _prec(e) < _ATOM_PREC or isinstance(e, ir.Number | ir.Replicate)
    return _wrap(e, need)


def format_expr(e: ir.Expr) -> str:
    """One-line rendering with the fewest parentheses that parse back to the same tree."""
    if isinstance(e, ir.Number):
        return e.text
    if isinstance(e, ir.String):
        return _string(e.value)
    if isinstance(e, ir.Bool):
        return "true" if e.value else "false"
    if isinstance(e, ir.NoneLit):
        return "none"
    if isinstance(e, ir.Name):
        return e.id
    if isinstance(e, ir.Attr):
        return f"{_postfix_head(e.obj)}.{e.name}"
    if isinstance(e, ir.Call):
        return f"{_postfix_head(e.func)}({', '.join(_args(e))})"
    if isinstance(e, ir.BinOp):
        p = _PREC[e.op]
        if e.op == "**":  # right-associative; its left side must be a postfix expression
            left = _wrap(e.left, _prec(e.left) < _ATOM_PREC)
            return f"{left} ** {_wrap(e.right, _prec(e.right) < _NEG_PREC)}"
        return f"{_wrap(e.left, _prec(e.left) < p)} {e.op} {_wrap(e.right, _prec(e.right) <= p)}"
    if isinstance(e, ir.Neg):
        return f"-{_wrap(e.operand, _prec(e.operand) < _NEG_PREC)}"
    if isinstance(e, ir.ListExpr):
        return f"[{', '.join(format_expr(i) for i in e.items)}]"
    if isinstance(e, ir.MapExpr):
        return "{" + ", ".join(f"{_key(en)}: {format_expr(en.value)}" for en in e.entries) + "}"
    if isinstance(e, ir.Replicate):
        return f"{e.count} x {format_expr(e.value)}"
    if isinstance(e, ir.TypeExpr):
        return format_type(e)
    raise TypeError(f"cannot print {type(e).__name__}")


def _args(call: ir.Call) -> list[str]:
    return [format_expr(a) for a in call.args] + [
        f"{k.name} = {format_expr(k.value)}" for k in call.kwargs
    ]


def _expr(e: ir.Expr, column: int, indent: str) -> str:
    """Render at `column`; break calls, lists and maps one item per line when too wide."""
    flat = format_expr(e)
    if column + len(flat) <= WIDTH:
        return flat
    inner = indent + INDENT
    if isinstance(e, ir.Call):
        head = _postfix_head(e.func) + "("
        items = [_expr(a, len(inner), inner) for a in e.args] + [
            f"{k.name} = " + _expr(k.value, len(inner) + len(k.name) + 3, inner) for k in e.kwargs
        ]
        close = ")"
    elif isinstance(e, ir.ListExpr):
        head, close = "[", "]"
        items = [_expr(i, len(inner), inner) for i in e.items]
    elif isinstance(e, ir.MapExpr):
        head, close = "{", "}"
        items = [
            f"{_key(en)}: " + _expr(en.value, len(inner) + len(_key(en)) + 2, inner)
            for en in e.entries
        ]
    else:
        return flat
    if not items:
        return flat
    return head + "\n" + "".join(f"{inner}{i},\n" for i in items) + indent + close
