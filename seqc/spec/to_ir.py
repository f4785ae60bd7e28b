"""Lark's parse tree to spec IR: the transformer that builds pydantic nodes, each with its
source span, and claims the comments that belong to them (for `seqc fmt`).

It only builds nodes; every semantic check lives in `seqc.resolve` and `seqc.compiler`.
`seqc.spec.parser` binds it to the parser (`ToIR`), so Lark calls it as it parses.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from seqc.spec import ir
from seqc.spec.errors import ParseError
from seqc.spec.ir import trusted, trusted_copy, trusted_span

if TYPE_CHECKING:  # lark is imported on the first parse: a parse-cache hit never needs it
    from lark import Token

SUPPORTED_VERSIONS = (1,)


@dataclass
class _Comment:
    line: int
    col: int
    text: str
    claimed: bool = False


def _pos(span: ir.Span | None) -> tuple[int, int]:
    return (span.line, span.col) if span else (0, 0)


def _end(span: ir.Span | None) -> tuple[int, int]:
    return (span.end_line, span.end_col) if span else (0, 0)


def _unescape(raw: str) -> str:
    body = raw[1:-1]
    out, i = [], 0
    escapes = {"n": "\n", "t": "\t", '"': '"', "\\": "\\"}
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            out.append(escapes.get(body[i + 1], "\\" + body[i + 1]))
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _number(tok: Token, span: ir.Span | None = None) -> int | float:
    text = str(tok).replace("_", "")
    if any(c in text for c in ".eE"):
        return float(text)
    try:
        return int(text)
    except ValueError:  # Python refuses to convert more than 4,300 digits
        raise ParseError(
            "number too long", span=span, code="number-too-long", found=f"{len(text)} digits"
        ) from None


class ToIR:
    """Builds IR nodes bottom-up as Lark reduces each rule; a rule's method receives its
    children (tokens and the nodes built for its sub-rules) and reads its span from `here`.

    Lark calls these methods while it parses (`Lark(transformer=...)`), so no parse tree is
    built; nodes are made with `ir.trusted`: the grammar already guarantees their types.
    """

    def __init__(self) -> None:
        self.begin("", [], "")
        self.error: ParseError | None = None

    def begin(self, filename: str, comments: list[Token], text: str) -> None:
        """Start on a new text: Lark calls the rule methods of this one object for every parse."""
        self.file = filename
        self.comments = [_Comment(c.line, c.column, str(c)) for c in comments]
        self.comment_pos = [(c.line, c.col) for c in self.comments]  # sorted: found in order
        self.blank = [not line.strip() for line in text.split("\n")] if text else []
        self.here: tuple[Any, Any] = (None, None)

    # -- helpers
    def _span(self) -> ir.Span | None:
        """The span of the rule being reduced, from the first to the last of its tokens."""
        start, end = self.here
        if start is None:
            return None
        return trusted_span(self.file, start[0], start[1], end[0], end[1])

    def _tok_span(self, tok: Token) -> ir.Span:
        return trusted_span(self.file, tok.line, tok.column, tok.end_line, tok.end_column)

    def _take(self, lo: tuple[int, int], hi: tuple[int, int]) -> list[_Comment]:
        """Claim the unclaimed comments that start in [lo, hi)."""
        taken = []
        for i in range(bisect.bisect_left(self.comment_pos, lo), len(self.comments)):
            c = self.comments[i]
            if (c.line, c.col) >= hi:
                break
            if not c.claimed:
                c.claimed = True
                taken.append(c)
        return taken

    def _blank_between(self, a: int, b: int) -> bool:
        """Is there a blank line strictly between lines a and b (1-based)?"""
        return any(self.blank[i - 1] for i in range(a + 1, b) if 0 < i <= len(self.blank))

    def _with_blanks(self, comments: list[_Comment], next_line: int) -> list[str]:
        """Comment texts, with "" wherever a blank line separated a comment from what follows."""
        out: list[str] = []
        if not comments:
            return out
        for c, after in zip(comments, [*(c.line for c in comments[1:]), next_line], strict=True):
            out.append(c.text)
            if self._blank_between(c.line, after):
                out.append("")
        return out

    def _attach(
        self,
        children: list[Any],
        lo: tuple[int, int],
        hi: tuple[int, int],
        claim_rest: bool = True,
    ) -> tuple[list[Any], list[str]]:
        """Give each statement the comments before it and on its last line; return the rest.

        Blank lines are kept as the formatter keeps them: one between statements that had any,
        and inside comment blocks; never before the first statement of a block.
        """
        out = []
        prev, prev_line = lo, lo[0]
        for idx, child in enumerate(children):
            span = child.span
            leading = self._take(prev, _pos(span))
            inside = self._take(_pos(span), _end(span))  # comments inside a multi-line value
            # Bounded by `hi`: in `layer L(d: int) {}  # c` the comment is the layer's, not `d`'s.
            line_end = min((span.end_line + 1, 0), hi)
            trailing_list = self._take(_end(span), line_end) if span else []
            first_line = leading[0].line if leading else span.line
            update: dict[str, Any] = {
                "blank_before": idx > 0 and self._blank_between(prev_line, first_line)
            }
            if leading or inside:
                texts = self._with_blanks(leading, span.line) + [c.text for c in inside]
                update["comments"] = tuple(child.comments) + tuple(texts)
            if trailing_list:
                update["trailing"] = " ".join(c.text for c in trailing_list)
            out.append(trusted_copy(child, **update))
            prev = (span.end_line + 1, 0) if trailing_list and span else _end(span)
            prev_line = span.end_line
        if not claim_rest:
            return out, []
        rest = self._take(prev, hi)
        return out, self._with_blanks(rest, rest[-1].line if rest else 0)

    # -- top level
    def start(self, children: list[Any]) -> ir.SpecFile:
        header, *rest = children
        version, header_span = header
        imports = [c for c in rest if isinstance(c, ir.Import)]
        decls = [c for c in rest if not isinstance(c, ir.Import)]
        header_comments = [c.text for c in self._take((0, 0), _pos(header_span))]
        header_end = _end(header_span)  # a comment after `seqc 1` on its line is kept too
        stmts, end = self._attach([*imports, *decls], header_end, (10**9, 0))
        return trusted(
            ir.SpecFile,
            span=header_span,
            path=self.file,
            version=version,
            header_comments=tuple(header_comments),
            imports=tuple(s for s in stmts if isinstance(s, ir.Import)),
            # Declarations are always one blank line apart; only imports keep their own blanks.
            decls=tuple(
                trusted_copy(s, blank_before=False) for s in stmts if not isinstance(s, ir.Import)
            ),
            end_comments=tuple(end),
        )

    def header(self, children: list[Any]) -> tuple[int, ir.Span | None]:
        (num,) = children
        value = _number(num, self._tok_span(num))
        if not float(value).is_integer():  # `seqc 1.5`: say what was written, not a placeholder
            raise ParseError(
                f"unsupported language version {num}",
                span=self._span(),
                code="bad-version",
                expected=" or ".join(f"seqc {v}" for v in SUPPORTED_VERSIONS),
                found=f"seqc {num}",
            )
        return int(value), self._span()

    def import_stmt(self, children: list[Any]) -> ir.Import:
        return trusted(ir.Import, span=self._span(), path=_unescape(str(children[0])))

    def input_decl(self, children: list[Any]) -> ir.InputDecl:
        name, body = children
        return trusted(ir.InputDecl, span=self._span(), name=str(name), body=body)

    def task_decl(self, children: list[Any]) -> ir.TaskDecl:
        name, body = children
        return trusted(ir.TaskDecl, span=self._span(), name=str(name), body=body)

    def experiment_decl(self, children: list[Any]) -> ir.ExperimentDecl:
        (name, _), extends, body = children
        ext_name, ext_span = extends if extends is not None else (None, None)
        return trusted(
            ir.ExperimentDecl,
            span=self._span(),
            name=name,
            extends=ext_name,
            extends_span=ext_span,
            body=body,
        )

    def sweep_decl(self, children: list[Any]) -> ir.SweepDecl:
        (name, _), body = children
        return trusted(ir.SweepDecl, span=self._span(), name=name, body=body)

    def extends(self, children: list[Any]) -> tuple[str, ir.Span | None]:
        return children[0]

    def dotted(self, children: list[Any]) -> tuple[str, ir.Span | None]:
        return ".".join(str(c) for c in children), self._span()

    # -- bodies
    def body(self, children: list[Any]) -> ir.Body:
        doc = children[0] if children and isinstance(children[0], str) else None
        items = [c for c in children if not isinstance(c, str)]
        span = self._span()
        items, end = self._attach(items, _pos(span), _end(span))
        return trusted(ir.Body, span=span, doc=doc, items=tuple(items), end_comments=tuple(end))

    def doc(self, children: list[Any]) -> str:
        return _unescape(str(children[0]))

    def assign(self, children: list[Any]) -> ir.Assign:
        (path, _), value = children
        return trusted(ir.Assign, span=self._span(), path=tuple(path.split(".")), value=value)

    def block(self, children: list[Any]) -> ir.Block:
        name, body = children
        return trusted(ir.Block, span=self._span(), name=str(name), body=body)

    def call_stmt(self, children: list[Any]) -> ir.CallStmt:
        (path, path_span), *args = children
        func: ir.Expr | None = None
        for part in path.split("."):
            func = (
                trusted(ir.Name, span=path_span, id=part)
                if func is None
                else trusted(ir.Attr, span=path_span, obj=func, name=part)
            )
        call = self._make_call(self._span(), func, [a for a in args if a is not None])
        return trusted(ir.CallStmt, span=self._span(), call=call)

    # -- layers
    def layer_kind(self, children: list[Any]) -> str:
        return str(children[0])

    def layer_decl(self, children: list[Any]) -> ir.LayerDecl:
        kind, name, *rest = children
        # `params?` leaves no placeholder: a layer written without parentheses has no tuple here.
        params = rest.pop(0) if rest and isinstance(rest[0], tuple) else None
        doc = rest[0] if rest and isinstance(rest[0], str) else None
        items = [r for r in rest if not isinstance(r, str) and r is not None]
        span = self._span()
        params_list, params_span = params if params is not None else ([], None)
        # From the `(`: comments left in the param list (before its `)`) go to the body, not away.
        lo = _pos(params_span) if params_span else _pos(span)
        items, end = self._attach(items, lo, _end(span))
        forwards = [i for i in items if isinstance(i, ir.Forward)]
        if len(forwards) > 1:
            raise ParseError(
                "a layer has one `forward`",
                span=forwards[1].span,
                code="duplicate-forward",
                hint="merge the two bodies",
            )
        return trusted(
            ir.LayerDecl,
            span=span,
            kind=kind,
            name=str(name),
            params=tuple(params_list),
            has_params=params is not None,
            doc=doc,
            sublayers=tuple(i for i in items if isinstance(i, ir.SubLayer)),
            forward=forwards[0] if forwards else None,
            end_comments=tuple(end),
        )

    def params(self, children: list[Any]) -> tuple[list[ir.Param], ir.Span | None]:
        span = self._span()
        # Comments after the last param stay unclaimed here; `layer_decl` gives them to its body.
        params = [c for c in children if c is not None]
        items, _ = self._attach(params, _pos(span), _end(span), claim_rest=False)
        return [trusted_copy(p, blank_before=False) for p in items], span

    def param(self, children: list[Any]) -> ir.Param:
        name, type_, range_, default, doc = children
        return trusted(
            ir.Param,
            span=self._span(),
            name=str(name),
            type=type_,
            range=range_,
            default=default,
            doc=_unescape(str(doc)) if doc is not None else None,
        )

    def range(self, children: list[Any]) -> ir.RangeExpr:
        span = self._span()
        if len(children) == 2:  # `> 0`
            op, bound = str(children[0]), children[1]
            if op.startswith(">"):
                return trusted(ir.RangeExpr, span=span, low=bound, low_open=op == ">")
            return trusted(ir.RangeExpr, span=span, high=bound, high_open=op == "<")
        _, open_, low, _, high, close = children  # `in [0, 1)`
        return trusted(
            ir.RangeExpr,
            span=span,
            low=low,
            high=high,
            low_open=str(open_) == "(",
            high_open=str(close) == ")",
            interval=True,
        )

    def bound(self, children: list[Any]) -> ir.Number:
        *sign, tok = children
        text = "-" * len(sign) + str(tok)
        value = _number(tok, self._tok_span(tok))
        return trusted(ir.Number, span=self._span(), value=-value if sign else value, text=text)

    def sublayer(self, children: list[Any]) -> ir.SubLayer:
        name, repeat, call = children
        return trusted(ir.SubLayer, span=self._span(), name=str(name), call=call, repeat=repeat)

    def repeat(self, children: list[Any]) -> ir.Expr:
        return children[0]

    def forward(self, children: list[Any]) -> ir.Forward:
        fparams: list[ir.FParam] = []
        returns: tuple[list[ir.TypeExpr], bool] = ([], False)
        stmts: list[Any] = []
        for c in children:
            if isinstance(c, ir.FParam):
                fparams.append(c)
            elif isinstance(c, tuple):
                returns = c
            elif c is not None:
                stmts.append(c)
        span = self._span()
        stmts, end = self._attach(stmts, _pos(span), _end(span))
        return trusted(
            ir.Forward,
            span=span,
            params=tuple(fparams),
            returns=tuple(returns[0]),
            returns_parenthesized=returns[1],
            body=tuple(stmts),
            end_comments=tuple(end),
        )

    def fparam(self, children: list[Any]) -> ir.FParam:
        name, type_ = children
        return trusted(ir.FParam, span=self._span(), name=str(name), type=type_)

    def returns(self, children: list[Any]) -> tuple[list[ir.TypeExpr], bool]:
        parenthesized = len(children) > 1 or self._source_starts_with_paren()
        return [c for c in children if c is not None], parenthesized

    def _source_starts_with_paren(self) -> bool:
        from seqc.spec.errors import source_line

        (line_no, col), _ = self.here
        line = source_line(self.file, line_no) or ""
        return line[col - 1 : col] == "("

    def let_stmt(self, children: list[Any]) -> ir.Let:
        name, value = children
        return trusted(ir.Let, span=self._span(), name=str(name), value=value)

    def return_stmt(self, children: list[Any]) -> ir.Return:
        return trusted(ir.Return, span=self._span(), values=tuple(children))

    # -- types
    def type_expr(self, children: list[Any]) -> ir.TypeExpr:
        name, *args = children
        has_args = not (len(args) == 1 and args[0] is None)
        return trusted(
            ir.TypeExpr,
            span=self._span(),
            name=str(name),
            args=tuple(args) if has_args else None,
        )

    # -- expressions
    def number(self, children: list[Any]) -> ir.Number:
        (tok,) = children
        span = self._tok_span(tok)
        return trusted(ir.Number, span=span, value=_number(tok, span), text=str(tok))

    def string(self, children: list[Any]) -> ir.String:
        (tok,) = children
        return trusted(ir.String, span=self._tok_span(tok), value=_unescape(str(tok)))

    def true(self, children: list[Any]) -> ir.Bool:
        return trusted(ir.Bool, span=self._span(), value=True)

    def false(self, children: list[Any]) -> ir.Bool:
        return trusted(ir.Bool, span=self._span(), value=False)

    def none(self, children: list[Any]) -> ir.NoneLit:
        return trusted(ir.NoneLit, span=self._span())

    def name(self, children: list[Any]) -> ir.Name:
        (tok,) = children
        return trusted(ir.Name, span=self._tok_span(tok), id=str(tok))

    def attr(self, children: list[Any]) -> ir.Attr:
        obj, name = children
        return trusted(ir.Attr, span=self._span(), obj=obj, name=str(name))

    def binop(self, children: list[Any]) -> ir.BinOp:
        left, op, right = children
        return trusted(ir.BinOp, span=self._span(), op=str(op), left=left, right=right)

    def neg(self, children: list[Any]) -> ir.Neg:
        return trusted(ir.Neg, span=self._span(), operand=children[0])

    def call(self, children: list[Any]) -> ir.Call:
        func, *args = children
        return self._make_call(self._span(), func, [a for a in args if a is not None])

    def _make_call(self, span: ir.Span | None, func: Any, args: list[Any]) -> ir.Call:
        positional: list[Any] = []
        kwargs: list[ir.KwArg] = []
        for a in args:
            if isinstance(a, ir.KwArg):
                if any(k.name == a.name for k in kwargs):
                    raise ParseError(
                        f"argument `{a.name}` given twice",
                        span=a.span,
                        code="duplicate-argument",
                    )
                kwargs.append(a)
            elif kwargs:
                raise ParseError(
                    "a positional argument follows a named one",
                    span=a.span,
                    code="positional-after-named",
                    hint="put positional arguments first, or name this one",
                )
            else:
                positional.append(a)
        return trusted(ir.Call, span=span, func=func, args=tuple(positional), kwargs=tuple(kwargs))

    def kwarg(self, children: list[Any]) -> ir.KwArg:
        name, value = children
        return trusted(ir.KwArg, span=self._span(), name=str(name), value=value)

    def replicate(self, children: list[Any]) -> ir.Replicate:
        tok, value = children
        count = _number(tok, self._tok_span(tok))
        if not isinstance(count, int) or count < 1:
            raise ParseError(
                "a device count must be a positive whole number",
                span=self._tok_span(tok),
                code="bad-count",
                found=str(tok),
            )
        return trusted(ir.Replicate, span=self._span(), count=count, value=value)

    def list(self, children: list[Any]) -> ir.ListExpr:
        return trusted(
            ir.ListExpr, span=self._span(), items=tuple(c for c in children if c is not None)
        )

    def map(self, children: list[Any]) -> ir.MapExpr:
        entries = [c for c in children if c is not None]
        seen: dict[Any, ir.MapEntry] = {}
        for e in entries:
            if e.key in seen:
                raise ParseError(
                    f"key `{e.key}` appears twice in this map",
                    span=e.span,
                    code="duplicate-key",
                )
            seen[e.key] = e
        return trusted(ir.MapExpr, span=self._span(), entries=tuple(entries))

    def pair(self, children: list[Any]) -> ir.MapEntry:
        key, value = children
        if isinstance(key, ir.Name):
            k: str | int | float = key.id
            quoted = False
        elif isinstance(key, ir.String):
            k, quoted = key.value, True
        else:
            k, quoted = key.value, False
        return trusted(ir.MapEntry, span=self._span(), key=k, key_quoted=quoted, value=value)
