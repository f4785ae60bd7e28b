"""Text to spec IR: Lark parses `grammar.lark`, a small transformer builds pydantic nodes.

The transformer only builds nodes; every semantic check lives in `seqc.compiler`. Lark's syntax
errors are translated here into `ParseError`s that say what was expected in words a user knows.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import operator
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqc.spec import ir, parse_cache
from seqc.spec.errors import ParseError, remember_source
from seqc.spec.files import read_spec
from seqc.spec.syntax_errors import span_at, syntax_error, unquoted
from seqc.spec.to_ir import SUPPORTED_VERSIONS, ToIR

if TYPE_CHECKING:  # lark is imported on the first parse: a parse-cache hit never needs it
    from lark import Lark, Token, Tree

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

    builder = ToIR()
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


def _locate(lark: Lark, builder: ToIR) -> None:
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
    fn: Callable[[list[Any]], Any], builder: ToIR, nests: bool, inlined: bool
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
        builder: ToIR = lark.options.transformer
        builder.begin(filename, _comments(text) if start == "start" else [], text)
        try:
            located = lark.parse(text, start=start)
        except UnexpectedInput as e:
            err = syntax_error(lark, e, text, filename)
            raise (unquoted(err) if start == "start" else _in_value(err)) from None
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
        return span_at(filename, tok.line, tok.column, len(tok))
    meta = node.meta
    if getattr(meta, "empty", True):
        return None
    if node.data == "call" and isinstance(node.children[0], Tree):
        func = node.children[0].meta  # the `(` right after the callee
        if not getattr(func, "empty", True):
            return span_at(filename, func.end_line, func.end_column)
    return span_at(filename, meta.line, meta.column)


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
