"""Text to spec IR: Lark parses `grammar.lark`, a small transformer builds pydantic nodes.

The transformer only builds nodes; every semantic check lives in `seqc.compiler`. Lark's syntax
errors are translated here into `ParseError`s that say what was expected in words a user knows.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import gc
import operator
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqc.spec import ir, parse_cache
from seqc.spec.errors import ParseError, did_you_mean, remember_source, shows_source
from seqc.spec.files import read_spec
from seqc.spec.ir import trusted, trusted_copy, trusted_span

if TYPE_CHECKING:  # lark is imported on the first parse: a parse-cache hit never needs it
    from lark import Lark, Token, Tree
    from lark.exceptions import UnexpectedInput

SUPPORTED_VERSIONS = (1,)
GRAMMAR = Path(__file__).with_name("grammar.lark")


_LOCK = threading.Lock()
"""One parse at a time per process: the transformer is bound to the parser and holds the state
(file name, comments) of the parse in progress."""


@functools.cache
def _lark() -> Lark:
    """The LALR parser, which builds the IR as it reduces (no parse tree in between).

    Lark's analysis of the grammar is cached on disk beside the parse cache (`cache=`; Lark keys
    the file by the grammar text, its options and Lark's version, and rebuilds it when stale or
    unreadable)."""
    from lark import Lark

    builder = _ToIR()
    lark = Lark(
        GRAMMAR.read_text(),
        parser="lalr",
        start=["start", "expr"],
        maybe_placeholders=True,
        transformer=builder,
        cache=parse_cache.grammar_cache_file() or False,
        **_accelerated(),
    )
    _locate(lark, builder)
    return lark


def _accelerated() -> dict[str, Any]:
    """Lark's options for its Cython lexer and LALR loop (`lark-cython`), when installed: a
    third less parse time, the same tokens and tree. Without it Lark runs in pure Python."""
    try:
        import lark_cython
    except ImportError:
        return {}
    return {"_plugins": lark_cython.plugins}


@functools.cache
def _tree_lark() -> Lark:
    """A parser that builds a tree with positions: only to locate a `too-deep` error."""
    from lark import Lark

    return Lark(
        GRAMMAR.read_text(),
        parser="lalr",
        start=["start", "expr"],
        propagate_positions=True,
        maybe_placeholders=True,
    )


class _Located:
    """A value on Lark's stack with where it was written and how deeply it nests."""

    __slots__ = ("depth", "end", "start", "value")

    def __init__(self, value: Any, start: Any, end: Any, depth: int) -> None:
        self.value, self.start, self.end, self.depth = value, start, end, depth


def _locate(lark: Lark, builder: _ToIR) -> None:
    """Wrap each rule's callback so the builder knows the span of what it reduces.

    Lark gives an inline transformer no `meta`, so each callback's raw children (tokens, and the
    values reduced before, anonymous tokens such as `{` included) say where the rule starts and
    ends, as `propagate_positions` would. The wrapper also counts nesting (`MAX_NESTING`) and
    keeps the first semantic error for after the parse, so that a syntax error later in the file
    is still the one reported, as when the tree was built first.

    Two shortcuts for speed, invisible in the result: a `?rule` alternative that is one sub-rule
    (`sum: product`, most reductions of an expression) passes its child's value on with no
    Python frame (`itemgetter`); and the parse table's rules are replaced by copies that hash
    by identity, so Lark's `callbacks[rule]` on each reduction calls no Python `__hash__` or
    `__eq__` (a table loaded from Lark's cache holds rules equal to, not the same as, the keys).
    """
    from lark.grammar import NonTerminal, Rule

    callbacks = lark._callbacks  # shared with the LALR parser: replaced in place
    identity = _identity_rule_class()
    fast: dict[Rule, Rule] = {}
    for rule, fn in list(callbacks.items()):
        if isinstance(rule, Rule):
            name = rule.alias or rule.origin.name
            inlined = bool(rule.options.expand1 and not rule.alias)
            if inlined and len(rule.expansion) == 1 and isinstance(rule.expansion[0], NonTerminal):
                wrapped: Callable[..., Any] = _first  # always one child, a value reduced before
            else:
                wrapped = _located(fn, builder, name in _NESTING_RULES, inlined)
            callbacks[rule] = wrapped
            fast[rule] = identity.copy_of(rule)
            callbacks[fast[rule]] = wrapped
    for actions in lark.parser.parser._parse_table.states.values():
        for token, (action, arg) in list(actions.items()):
            if isinstance(arg, Rule) and arg in fast:
                actions[token] = (action, fast[arg])


_first = operator.itemgetter(0)


@functools.cache
def _identity_rule_class() -> Any:
    from lark.grammar import NonTerminal, Rule

    class IdentityRule(Rule):
        """A rule that is equal only to itself: a dict finds it without calling Python."""

        __slots__ = ()
        __hash__ = object.__hash__
        __eq__ = object.__eq__

        @classmethod
        def copy_of(cls, rule: Rule) -> Rule:
            new = object.__new__(cls)
            for slot in Rule.__slots__:
                object.__setattr__(new, slot, getattr(rule, slot))
            # A grammar built from text (not from Lark's cache) names rules with `Token`s, whose
            # `__eq__` is Python: the parser looks the name up in its table on every reduction.
            new.origin = NonTerminal(str(rule.origin.name))
            return new

    return IdentityRule


def _located(
    fn: Callable[[list[Any]], Any], builder: _ToIR, nests: bool, inlined: bool
) -> Callable[..., Any]:
    def callback(children: list[Any]) -> _Located:
        if inlined and len(children) == 1 and type(children[0]) is _Located:
            return children[0]  # a `?rule` with one child is that child (`expr` -> `sum` -> ...)
        start = end = None
        depth = 0
        values = []
        for c in children:
            if type(c) is _Located:
                if c.start is not None:
                    if start is None:
                        start = c.start
                    end = c.end
                if c.depth > depth:
                    depth = c.depth
                values.append(c.value)
            else:  # a token
                if start is None:
                    start = (c.line, c.column)
                end = (c.end_line, c.end_column)
                values.append(c)
        value = None
        if builder.error is None:  # after an error, only the syntax and the nesting are checked
            builder.here = (start, end)
            try:
                value = fn(values)
            except ParseError as e:
                builder.error = e
        return _Located(value, start, end, depth + 1 if nests else depth)

    return callback


def _parse(text: str, filename: str, start: str) -> Any:
    """Parse `text` from the grammar's rule `start` into IR; raise the first error in the text."""
    from lark.exceptions import UnexpectedInput

    lark = _lark()
    with _LOCK:
        builder: _ToIR = lark.options.transformer
        builder.begin(filename, _comments(text) if start == "start" else [], text)
        try:
            located = lark.parse(text, start=start)
        except UnexpectedInput as e:
            err = _syntax_error(e, text, filename)
            raise (_unquoted(err) if start == "start" else _in_value(err)) from None
        finally:
            error, builder.error = builder.error, None
            builder.begin("", [], "")
    if located.depth > MAX_NESTING:
        _check_nesting(_tree_lark().parse(text, start=start), filename)
    if error is not None:
        raise error
    return located.value


def parse_file(path: str | Path) -> ir.SpecFile:
    """Read (`files.read_spec`: a regular file of bounded size, else a `FileError`) and parse
    one file."""
    p = Path(path)
    text = read_spec(p)
    filename = str(p)
    cached = parse_cache.load(text, filename)
    if cached is not None:
        remember_source(filename, text)  # as a parse would: later passes quote the file
        return cached
    spec = parse_text(text, filename)  # a file that does not parse raises here: never cached
    parse_cache.store(text, filename, spec)
    return spec


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
        spec: ir.SpecFile = _parse(text, filename, "start")
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
    return _parse(text, filename, "expr")


def _in_value(err: ParseError) -> ParseError:
    """A syntax error in a `--set` value: the value ends where the argument ends, and "end of
    file" would puzzle on a command line."""
    err.message = err.message.replace("end of file", "end of the value")
    err.found = err.found.replace("end of file", "end of the value") if err.found else None
    err.hint = None
    return err


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
    from lark import Tree

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
    from lark import Token, Tree

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


_STRING_OR_COMMENT = re.compile(r'"(?:\\[^\n]|[^"\\\n])*"?|#[^\n]*')
"""A string (to its closing quote or the end of its line, escapes skipped) or a comment: one
regex scan finds the comments, never a `#` inside a string."""


def _comments(text: str) -> list[Token]:
    """Comment tokens, found by a string-aware scan (the grammar's lexer drops them)."""
    from lark import Token

    out: list[Token] = []
    line, line_start, counted = 1, 0, 0  # the line of `counted`, and where that line starts
    for m in _STRING_OR_COMMENT.finditer(text):
        i = m.start()
        if text[i] != "#":
            continue
        newlines = text.count("\n", counted, i)
        if newlines:
            line += newlines
            line_start = text.rfind("\n", counted, i) + 1
        counted = i
        end = m.end()
        col = i - line_start + 1
        tok = Token("COMMENT", text[i:end].rstrip())
        tok.line, tok.column = line, col
        tok.end_line, tok.end_column = line, col + (end - i)
        out.append(tok)
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
    from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedToken

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
