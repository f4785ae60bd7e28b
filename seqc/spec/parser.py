"""Text to spec IR: Lark parses `grammar.lark`, a small transformer builds pydantic nodes.

The transformer only builds nodes; every semantic check lives in `seqc.compiler`. Lark's syntax
errors are translated here into `ParseError`s that say what was expected in words a user knows.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import gc
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lark import Lark, Token, Tree
from lark.exceptions import (
    UnexpectedCharacters,
    UnexpectedEOF,
    UnexpectedInput,
    UnexpectedToken,
)

from seqc.spec import ir
from seqc.spec.errors import FileError, ParseError, did_you_mean, remember_source, shows_source

SUPPORTED_VERSIONS = (1,)
GRAMMAR = Path(__file__).with_name("grammar.lark")


@functools.cache
def _lark() -> Lark:
    return Lark(
        GRAMMAR.read_text(),
        parser="lalr",
        start=["start", "expr"],
        propagate_positions=True,
        maybe_placeholders=True,
    )


def parse_file(path: str | Path) -> ir.SpecFile:
    """Read and parse one file; a missing or unreadable file is a `FileError`, not an OSError."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileError(f"no such file: {p}", path=str(p), code="file-not-found") from None
    except IsADirectoryError:
        raise FileError(
            f"{p} is a directory, not a .seq file", path=str(p), code="is-dir"
        ) from None
    except UnicodeDecodeError as e:
        raise FileError(
            f"{p} is not UTF-8 text (byte {e.start})", path=str(p), code="not-utf8"
        ) from None
    except OSError as e:
        raise FileError(f"cannot read {p}: {e.strerror}", path=str(p), code="unreadable") from None
    return parse_text(text, str(p))


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a tree is built.

    A parse allocates a few hundred thousand small objects (tokens, tree nodes, IR nodes) that
    all stay alive until it ends, and the collector's repeated passes over them took half the
    parse time of a large spec (see bench/frontend.py). Nothing is lost: it runs again after.
    What survived the parse (the IR) lives as long as the program, so it is moved to the
    collector's permanent generation (`gc.freeze`) rather than scanned again on the next pass.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.freeze()
            gc.enable()


def parse_text(text: str, filename: str = "<string>") -> ir.SpecFile:
    remember_source(filename, text)
    with gc_paused():
        try:
            tree = _lark().parse(text, start="start")
        except UnexpectedInput as e:
            raise _unquoted(_syntax_error(e, text, filename)) from None
        _check_nesting(tree, filename)
        spec = _ToIR(filename, _comments(text), text).transform(tree)
    if spec.version not in SUPPORTED_VERSIONS:
        raise ParseError(
            f"unsupported language version {spec.version}",
            span=spec.span,
            code="bad-version",
            expected=" or ".join(f"seqc {v}" for v in SUPPORTED_VERSIONS),
            found=f"seqc {spec.version}",
        )
    return spec


def parse_expr(text: str, filename: str) -> ir.Expr:
    """Parse one expression (the value of a `--set path=value` override)."""
    remember_source(filename, text)
    try:
        tree = _lark().parse(text, start="expr")
    except UnexpectedInput as e:
        err = _syntax_error(e, text, filename)
        # A value ends where the argument ends; "end of file" would puzzle on a command line.
        err.message = err.message.replace("end of file", "end of the value")
        err.found = err.found.replace("end of file", "end of the value") if err.found else None
        err.hint = None
        raise err from None
    _check_nesting(tree, filename)
    return _ToIR(filename, [], text).transform(tree)


# ------------------------------------------------------------------------------------ nesting

MAX_NESTING = 100
"""How deeply brackets, blocks and operators may nest (README, "Trust and limits").

Every pass after the parser walks the IR recursively, a few Python frames per level, so a spec
nested thousands deep would exhaust Python's stack somewhere far from the text that caused it.
Lark's LALR parser builds the tree without recursing, so the depth is checked on that tree,
before anything recurses over it, and reported at the bracket or operator where it got too deep.
100 is far beyond any spec written by hand, and leaves every later pass room under Python's
default limit of 1,000 frames.
"""

_NESTING_RULES = frozenset(
    {"body", "list", "map", "neg", "binop", "call", "attr", "replicate", "type_expr"}
)
"""The tree nodes that add a level: each bracket, block, operator and call. Other nodes (a
`pair` of a map, a `kwarg`, an `assign`) sit at most one between two of these."""


def _check_nesting(tree: Tree, filename: str) -> None:
    """Raise a located `too-deep` error if the tree nests more than `MAX_NESTING` levels."""
    stack: list[tuple[Tree, int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if node.data in _NESTING_RULES:
            depth += 1
            if depth > MAX_NESTING:
                raise ParseError(
                    f"the spec nests more than {MAX_NESTING} levels deep here",
                    span=_nesting_span(node, filename),
                    code="too-deep",
                    expected=f"at most {MAX_NESTING} nested brackets, blocks or operators",
                    hint="name the inner parts with separate assignments or layers",
                )
        # Reversed, so the first child is checked first: the error is the leftmost place.
        stack.extend((c, depth) for c in reversed(node.children) if isinstance(c, Tree))


def _nesting_span(node: Tree, filename: str) -> ir.Span | None:
    """Where a node starts, or its operator or name: left-nested chains (`a + b + c`,
    `f()()`, `a.b.c`) start every level at the same column, but each has its own operator."""
    marks = [c for c in node.children if isinstance(c, Token) and c.line is not None]
    if node.data in ("binop", "attr") and marks:
        tok = marks[-1]
        return _span_at(filename, tok.line, tok.column, len(tok))
    meta = node.meta
    if getattr(meta, "empty", True):
        return None
    if node.data == "call" and isinstance(node.children[0], Tree):
        func = node.children[0].meta  # the `(` right after the callee
        if not getattr(func, "empty", True):
            return _span_at(filename, func.end_line, func.end_column)
    return _span_at(filename, meta.line, meta.column)


def _comments(text: str) -> list[Token]:
    """Comment tokens, found by a string-aware scan (the grammar's lexer drops them)."""
    out: list[Token] = []
    line, col, i, n = 1, 1, 0, len(text)
    in_string = False
    while i < n:
        ch = text[i]
        if in_string:
            if ch == "\\" and i + 1 < n and text[i + 1] != "\n":
                i += 2
                col += 2
                continue
            if ch == '"' or ch == "\n":
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "#":
            end = text.find("\n", i)
            end = n if end < 0 else end
            tok = Token("COMMENT", text[i:end].rstrip())
            tok.line, tok.column = line, col
            tok.end_line, tok.end_column = line, col + (end - i)
            out.append(tok)
            col += end - i
            i = end
            continue
        if ch == "\n":
            line, col = line + 1, 1
        else:
            col += 1
        i += 1
    return out


# ------------------------------------------------------------------------------------ errors

_TOKEN_WORDS = {
    "NAME": "a name",
    "NUMBER": "a number",
    "STRING": "a string",
    "$END": "end of file",
    "_TIMES": "`x`",
    "ADD_OP": "`+` or `-`",
    "MUL_OP": "`*`, `/`, `//` or `%`",
    "POW_OP": "`**`",
    "COMPARE": "a range (`> 0`, `in [0, 1)`)",
    "_SEMI": "`;`",
}


def _describe_terminal(name: str) -> str:
    if name in _TOKEN_WORDS:
        return _TOKEN_WORDS[name]
    try:
        term = _lark().get_terminal(name)
    except KeyError:
        return name.lower()
    if term.pattern.type == "str":
        return f"`{term.pattern.value}`"
    return name.lower()


def _describe_token(tok: Token) -> str:
    if tok.type == "$END":
        return "end of file"
    word = _TOKEN_WORDS.get(tok.type)
    if tok.type in ("NAME", "NUMBER", "STRING") and word:
        return f"{word} `{tok.value}`"
    return f"`{tok.value}`"


def _expected_keywords(expected: set[str]) -> list[str]:
    words = []
    for name in expected:
        try:
            term = _lark().get_terminal(name)
        except KeyError:
            continue
        if term.pattern.type == "str" and term.pattern.value.isalpha():
            words.append(term.pattern.value)
    return words


def _span_at(filename: str, line: int, col: int, width: int = 1) -> ir.Span:
    return ir.Span(file=filename, line=line, col=col, end_line=line, end_col=col + max(width, 1))


def _unquoted(err: ParseError) -> ParseError:
    """A syntax error in a file that is not a `.seq` spec (`seqc check /etc/shadow`), located
    but quoting nothing of the file: neither its line nor the token found there."""
    if err.span is None or shows_source(err.span.file):
        return err
    return ParseError(
        "this file does not parse as a spec",
        span=err.span,
        code=err.code,
        expected=err.expected,
        hint="seqc reads .seq files; it quotes nothing from a file with another name",
    )


def _syntax_error(e: UnexpectedInput, text: str, filename: str) -> ParseError:
    if isinstance(e, UnexpectedCharacters):
        line, col = e.line, e.column
        ch = text[e.pos_in_stream] if e.pos_in_stream < len(text) else ""
        span = _span_at(filename, line, col)
        if ch == '"':
            return ParseError(
                "unterminated string",
                span=span,
                code="unterminated-string",
                expected='a closing `"` on the same line',
                found="end of line",
            )
        expected = sorted(_describe_terminal(t) for t in e.allowed or ())
        return ParseError(
            f"unexpected character {ch!r}",
            span=span,
            code="unexpected-character",
            expected=", ".join(expected) if expected else None,
            found=repr(ch),
        )
    if isinstance(e, UnexpectedEOF):
        lines = text.splitlines() or [""]
        span = _span_at(filename, len(lines), len(lines[-1]) + 1)
        return ParseError(
            "unexpected end of file",
            span=span,
            code="unexpected-eof",
            expected=", ".join(sorted(_describe_terminal(t) for t in e.expected)),
            found="end of file",
            hint="is a `}` or `)` missing?",
        )
    assert isinstance(e, UnexpectedToken)
    tok = e.token
    expected_names = set(e.expected) - {"_SEMI"}
    if tok.type == "$END":
        lines = text.splitlines() or [""]
        span = _span_at(filename, len(lines), len(lines[-1]) + 1)
    else:
        span = ir.Span(
            file=filename,
            line=tok.line,
            col=tok.column,
            end_line=tok.end_line or tok.line,
            end_col=tok.end_column or tok.column + 1,
        )
    words = sorted({_describe_terminal(t) for t in expected_names})
    expected = (
        ", ".join(words[:-1]) + (" or " if len(words) > 1 else "") + words[-1] if words else ""
    )
    suggestion = None
    keywords = _expected_keywords(expected_names)
    if tok.type == "NAME" and keywords:
        suggestion = did_you_mean(str(tok.value), keywords)
    if "SEQC" in e.expected:  # only the header expects `seqc`, even after comments or blanks
        return ParseError(
            "a .seq file starts with its language version",
            span=span,
            code="missing-header",
            expected="`seqc 1`",
            found=_describe_token(tok),
            hint="add `seqc 1` as the first line",
        )
    code = "unexpected-eof" if tok.type == "$END" else "unexpected-token"
    hint = "is a `}` or `)` missing?" if tok.type == "$END" else None
    if tok.type == "IMPORT" or (tok.type == "NAME" and tok.value == "import"):  # lexed as a name
        hint = "imports come right after the `seqc` header, before any declaration"
    if tok.type == "COMPARE":
        hint = "a range comes right after a param's type: `d: int > 0 = 256`"
    elif tok.type != "$END" and expected_names == {"NUMBER", "MINUS"}:
        hint = "a range's bounds are numbers: `d: int > 0`, `p: float in [0, 1)`"
    return ParseError(
        f"unexpected {_describe_token(tok).removeprefix('a ')}",  # "unexpected name `x`"
        span=span,
        code=code,
        expected=expected or None,
        found=_describe_token(tok),
        suggestion=suggestion,
        hint=hint,
    )


# ------------------------------------------------------------------------------------ tree -> IR


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


class _ToIR:
    """Builds IR nodes bottom-up; each rule's method receives (meta, transformed children).

    A plain recursive walk rather than lark's `Transformer`: lark wraps every callback per
    call, which cost about a quarter of the front end's time on a 1,000-layer spec.
    """

    def transform(self, tree: Tree) -> Any:
        methods: dict[str, Any] = {}

        def walk(node: Any) -> Any:
            if not isinstance(node, Tree):
                return node
            children = [walk(c) for c in node.children]
            fn = methods.get(node.data)
            if fn is None:
                fn = methods[node.data] = getattr(self, str(node.data))
            return fn(node.meta, children)

        return walk(tree)

    def __init__(self, filename: str, comments: list[Token], text: str) -> None:
        self.file = filename
        self.comments = [_Comment(c.line, c.column, str(c)) for c in comments]
        self.comment_pos = [(c.line, c.col) for c in self.comments]  # sorted: found in order
        self.blank = [not line.strip() for line in text.split("\n")]

    # -- helpers
    def _span(self, meta: Any) -> ir.Span | None:
        if getattr(meta, "empty", True):
            return None
        return ir.Span(
            file=self.file,
            line=meta.line,
            col=meta.column,
            end_line=meta.end_line,
            end_col=meta.end_column,
        )

    def _tok_span(self, tok: Token) -> ir.Span:
        return ir.Span(
            file=self.file,
            line=tok.line,
            col=tok.column,
            end_line=tok.end_line,
            end_col=tok.end_column,
        )

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
            out.append(child.model_copy(update=update))
            prev = (span.end_line + 1, 0) if trailing_list and span else _end(span)
            prev_line = span.end_line
        if not claim_rest:
            return out, []
        rest = self._take(prev, hi)
        return out, self._with_blanks(rest, rest[-1].line if rest else 0)

    # -- top level
    def start(self, meta: Any, children: list[Any]) -> ir.SpecFile:
        header, *rest = children
        version, header_span = header
        imports = [c for c in rest if isinstance(c, ir.Import)]
        decls = [c for c in rest if not isinstance(c, ir.Import)]
        header_comments = [c.text for c in self._take((0, 0), _pos(header_span))]
        header_end = _end(header_span)  # a comment after `seqc 1` on its line is kept too
        stmts, end = self._attach([*imports, *decls], header_end, (10**9, 0))
        return ir.SpecFile(
            span=header_span,
            path=self.file,
            version=version,
            header_comments=tuple(header_comments),
            imports=tuple(s for s in stmts if isinstance(s, ir.Import)),
            # Declarations are always one blank line apart; only imports keep their own blanks.
            decls=tuple(
                s.model_copy(update={"blank_before": False})
                for s in stmts
                if not isinstance(s, ir.Import)
            ),
            end_comments=tuple(end),
        )

    def header(self, meta: Any, children: list[Any]) -> tuple[int, ir.Span | None]:
        (num,) = children
        value = _number(num)
        if not float(value).is_integer():  # `seqc 1.5`: say what was written, not a placeholder
            raise ParseError(
                f"unsupported language version {num}",
                span=self._span(meta),
                code="bad-version",
                expected=" or ".join(f"seqc {v}" for v in SUPPORTED_VERSIONS),
                found=f"seqc {num}",
            )
        return int(value), self._span(meta)

    def import_stmt(self, meta: Any, children: list[Any]) -> ir.Import:
        return ir.Import(span=self._span(meta), path=_unescape(str(children[0])))

    def input_decl(self, meta: Any, children: list[Any]) -> ir.InputDecl:
        name, body = children
        return ir.InputDecl(span=self._span(meta), name=str(name), body=body)

    def task_decl(self, meta: Any, children: list[Any]) -> ir.TaskDecl:
        name, body = children
        return ir.TaskDecl(span=self._span(meta), name=str(name), body=body)

    def experiment_decl(self, meta: Any, children: list[Any]) -> ir.ExperimentDecl:
        (name, _), extends, body = children
        ext_name, ext_span = extends if extends is not None else (None, None)
        return ir.ExperimentDecl(
            span=self._span(meta),
            name=name,
            extends=ext_name,
            extends_span=ext_span,
            body=body,
        )

    def extends(self, meta: Any, children: list[Any]) -> tuple[str, ir.Span | None]:
        return children[0]

    def dotted(self, meta: Any, children: list[Any]) -> tuple[str, ir.Span | None]:
        return ".".join(str(c) for c in children), self._span(meta)

    # -- bodies
    def body(self, meta: Any, children: list[Any]) -> ir.Body:
        doc = children[0] if children and isinstance(children[0], str) else None
        items = [c for c in children if not isinstance(c, str)]
        span = self._span(meta)
        items, end = self._attach(items, _pos(span), _end(span))
        return ir.Body(span=span, doc=doc, items=tuple(items), end_comments=tuple(end))

    def doc(self, meta: Any, children: list[Any]) -> str:
        return _unescape(str(children[0]))

    def assign(self, meta: Any, children: list[Any]) -> ir.Assign:
        (path, _), value = children
        return ir.Assign(span=self._span(meta), path=tuple(path.split(".")), value=value)

    def block(self, meta: Any, children: list[Any]) -> ir.Block:
        name, body = children
        return ir.Block(span=self._span(meta), name=str(name), body=body)

    def call_stmt(self, meta: Any, children: list[Any]) -> ir.CallStmt:
        (path, path_span), *args = children
        func: ir.Expr | None = None
        for part in path.split("."):
            func = (
                ir.Name(span=path_span, id=part)
                if func is None
                else ir.Attr(span=path_span, obj=func, name=part)
            )
        call = self._make_call(self._span(meta), func, [a for a in args if a is not None])
        return ir.CallStmt(span=self._span(meta), call=call)

    # -- layers
    def layer_kind(self, meta: Any, children: list[Any]) -> str:
        return str(children[0])

    def layer_decl(self, meta: Any, children: list[Any]) -> ir.LayerDecl:
        kind, name, *rest = children
        # `params?` leaves no placeholder: a layer written without parentheses has no tuple here.
        params = rest.pop(0) if rest and isinstance(rest[0], tuple) else None
        doc = rest[0] if rest and isinstance(rest[0], str) else None
        items = [r for r in rest if not isinstance(r, str) and r is not None]
        span = self._span(meta)
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
        return ir.LayerDecl(
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

    def params(self, meta: Any, children: list[Any]) -> tuple[list[ir.Param], ir.Span | None]:
        span = self._span(meta)
        # Comments after the last param stay unclaimed here; `layer_decl` gives them to its body.
        params = [c for c in children if c is not None]
        items, _ = self._attach(params, _pos(span), _end(span), claim_rest=False)
        return [p.model_copy(update={"blank_before": False}) for p in items], span

    def param(self, meta: Any, children: list[Any]) -> ir.Param:
        name, type_, range_, default, doc = children
        return ir.Param(
            span=self._span(meta),
            name=str(name),
            type=type_,
            range=range_,
            default=default,
            doc=_unescape(str(doc)) if doc is not None else None,
        )

    def range(self, meta: Any, children: list[Any]) -> ir.RangeExpr:
        span = self._span(meta)
        if len(children) == 2:  # `> 0`
            op, bound = str(children[0]), children[1]
            if op.startswith(">"):
                return ir.RangeExpr(span=span, low=bound, low_open=op == ">")
            return ir.RangeExpr(span=span, high=bound, high_open=op == "<")
        _, open_, low, _, high, close = children  # `in [0, 1)`
        return ir.RangeExpr(
            span=span,
            low=low,
            high=high,
            low_open=str(open_) == "(",
            high_open=str(close) == ")",
            interval=True,
        )

    def bound(self, meta: Any, children: list[Any]) -> ir.Number:
        *sign, tok = children
        text = "-" * len(sign) + str(tok)
        value = _number(tok, self._tok_span(tok))
        return ir.Number(span=self._span(meta), value=-value if sign else value, text=text)

    def sublayer(self, meta: Any, children: list[Any]) -> ir.SubLayer:
        name, repeat, call = children
        return ir.SubLayer(span=self._span(meta), name=str(name), call=call, repeat=repeat)

    def repeat(self, meta: Any, children: list[Any]) -> ir.Expr:
        return children[0]

    def forward(self, meta: Any, children: list[Any]) -> ir.Forward:
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
        span = self._span(meta)
        stmts, end = self._attach(stmts, _pos(span), _end(span))
        return ir.Forward(
            span=span,
            params=tuple(fparams),
            returns=tuple(returns[0]),
            returns_parenthesized=returns[1],
            body=tuple(stmts),
            end_comments=tuple(end),
        )

    def fparam(self, meta: Any, children: list[Any]) -> ir.FParam:
        name, type_ = children
        return ir.FParam(span=self._span(meta), name=str(name), type=type_)

    def returns(self, meta: Any, children: list[Any]) -> tuple[list[ir.TypeExpr], bool]:
        parenthesized = len(children) > 1 or self._source_starts_with_paren(meta)
        return [c for c in children if c is not None], parenthesized

    def _source_starts_with_paren(self, meta: Any) -> bool:
        from seqc.spec.errors import source_line

        line = source_line(self.file, meta.line) or ""
        return line[meta.column - 1 : meta.column] == "("

    def let_stmt(self, meta: Any, children: list[Any]) -> ir.Let:
        name, value = children
        return ir.Let(span=self._span(meta), name=str(name), value=value)

    def return_stmt(self, meta: Any, children: list[Any]) -> ir.Return:
        return ir.Return(span=self._span(meta), values=tuple(children))

    # -- types
    def type_expr(self, meta: Any, children: list[Any]) -> ir.TypeExpr:
        name, *args = children
        has_args = not (len(args) == 1 and args[0] is None)
        return ir.TypeExpr(
            span=self._span(meta),
            name=str(name),
            args=tuple(args) if has_args else None,
        )

    # -- expressions
    def number(self, meta: Any, children: list[Any]) -> ir.Number:
        (tok,) = children
        return ir.Number(
            span=self._tok_span(tok), value=_number(tok, self._tok_span(tok)), text=str(tok)
        )

    def string(self, meta: Any, children: list[Any]) -> ir.String:
        (tok,) = children
        return ir.String(span=self._tok_span(tok), value=_unescape(str(tok)))

    def true(self, meta: Any, children: list[Any]) -> ir.Bool:
        return ir.Bool(span=self._span(meta), value=True)

    def false(self, meta: Any, children: list[Any]) -> ir.Bool:
        return ir.Bool(span=self._span(meta), value=False)

    def none(self, meta: Any, children: list[Any]) -> ir.NoneLit:
        return ir.NoneLit(span=self._span(meta))

    def name(self, meta: Any, children: list[Any]) -> ir.Name:
        (tok,) = children
        return ir.Name(span=self._tok_span(tok), id=str(tok))

    def attr(self, meta: Any, children: list[Any]) -> ir.Attr:
        obj, name = children
        return ir.Attr(span=self._span(meta), obj=obj, name=str(name))

    def binop(self, meta: Any, children: list[Any]) -> ir.BinOp:
        left, op, right = children
        return ir.BinOp(span=self._span(meta), op=str(op), left=left, right=right)

    def neg(self, meta: Any, children: list[Any]) -> ir.Neg:
        return ir.Neg(span=self._span(meta), operand=children[0])

    def call(self, meta: Any, children: list[Any]) -> ir.Call:
        func, *args = children
        return self._make_call(self._span(meta), func, [a for a in args if a is not None])

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
        return ir.Call(span=span, func=func, args=tuple(positional), kwargs=tuple(kwargs))

    def kwarg(self, meta: Any, children: list[Any]) -> ir.KwArg:
        name, value = children
        return ir.KwArg(span=self._span(meta), name=str(name), value=value)

    def replicate(self, meta: Any, children: list[Any]) -> ir.Replicate:
        tok, value = children
        count = _number(tok, self._tok_span(tok))
        if not isinstance(count, int) or count < 1:
            raise ParseError(
                "a device count must be a positive whole number",
                span=self._tok_span(tok),
                code="bad-count",
                found=str(tok),
            )
        return ir.Replicate(span=self._span(meta), count=count, value=value)

    def list(self, meta: Any, children: list[Any]) -> ir.ListExpr:
        return ir.ListExpr(span=self._span(meta), items=tuple(c for c in children if c is not None))

    def map(self, meta: Any, children: list[Any]) -> ir.MapExpr:
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
        return ir.MapExpr(span=self._span(meta), entries=tuple(entries))

    def pair(self, meta: Any, children: list[Any]) -> ir.MapEntry:
        key, value = children
        if isinstance(key, ir.Name):
            k: str | int | float = key.id
            quoted = False
        elif isinstance(key, ir.String):
            k, quoted = key.value, True
        else:
            k, quoted = key.value, False
        return ir.MapEntry(span=self._span(meta), key=k, key_quoted=quoted, value=value)
