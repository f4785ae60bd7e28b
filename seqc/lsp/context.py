"""What the cursor is on, read from tokens rather than from the parse.

Hover, completion and go-to-definition must work on the text being typed, which mostly does
not parse (`optimizer = adam(` is where completion is wanted). So this module lexes the text
with the grammar's own token shapes and walks the brackets up to the cursor, keeping a stack
of frames: which declaration, block or call the cursor is inside, the assignment path written
so far in each body, and the keyword argument being written in each call. It never recurses,
so a buffer of 5,000 nested brackets costs a list of 5,000 frames and nothing more.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

_TOKEN = re.compile(
    r"""
    (?P<ws>[ \t\r\f\v]+|\n)
    |(?P<comment>\#[^\n]*)
    |(?P<string>"(?:[^"\\\n]|\\.)*"?)
    |(?P<number>(?:\d[\d_]*(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)
    |(?P<name>[A-Za-z_][A-Za-z0-9_]*)
    |(?P<op>\*\*|->|>=|<=|//|.)
    """,
    re.X | re.S,
)
"""The token shapes of `grammar.lark` (NAME, NUMBER, STRING, COMMENT), every other character
an operator; an unterminated string runs to the end of its line, as one being typed does."""

DECLS = ("input", "layer", "model", "task", "experiment", "sweep")
BODIES = ("input", "task", "experiment", "sweep", "block")
"""Frames whose body holds `path = value` assignments and nested blocks."""
STATEMENTS = ("top", *BODIES, "layer", "forward")
"""Frames whose items are statements, one per line."""
PARENS = ("call", "params", "fparams", "paren")
BRACES = (*BODIES, "layer", "forward", "map")
_CONTINUES = {"=", ",", "(", "[", "{", ".", "+", "-", "*", "/", "//", "%", "**", "->", ":"}
"""Tokens after which a new line continues the statement rather than starting one."""


@dataclass(frozen=True)
class Token:
    kind: str
    text: str
    start: int
    end: int
    line: int
    """0-based line of the token's first character."""


def tokens(text: str, stop: int | None = None) -> Iterator[Token]:
    """The significant tokens of `text` (no spaces or comments), up to the first that starts
    after offset `stop`."""
    line = 0
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup or "op"
        if stop is not None and m.start() > stop:
            if kind not in ("ws", "comment"):
                yield Token(kind, m.group(), m.start(), m.end(), line)
            return
        if kind == "ws":
            line += m.group().count("\n")
            continue
        if kind != "comment":
            yield Token(kind, m.group(), m.start(), m.end(), line)


@dataclass
class Frame:
    """One open bracket or declaration: `kind` is one of `top`, the `BODIES`, `layer`,
    `forward`, `call`, `params` (a layer's param list), `fparams`, `paren`, `list` or `map`;
    `name` is the declaration's, block's or callee's name."""

    kind: str
    name: str = ""
    stmt: list[str] = field(default_factory=list)
    """The assignment path (or top-level header words) of the statement being written."""
    after_eq: bool = False
    keyword: str | None = None
    """In a call: the name of the keyword argument being written."""
    given: list[str] = field(default_factory=list)
    positional: int = 0
    """In a call: how many positional arguments come before the one being written."""


def _starts_statement(prev: Token | None, tok: Token, frame: Frame) -> bool:
    if frame.kind not in STATEMENTS:
        return False
    if prev is None or prev.text in ("{", ";", "}"):
        return True
    if frame.kind == "top":
        return tok.text in (*DECLS, "import") or (tok.line > prev.line and prev.text != ".")
    return tok.line > prev.line and prev.text not in _CONTINUES


class Walker:
    """The frame stack after a run of tokens."""

    def __init__(self) -> None:
        self.frames = [Frame("top")]
        self.prev: Token | None = None
        self._chain: list[Token] = []
        """The dotted name just written (`a.b.c`): its name tokens."""

    @property
    def top(self) -> Frame:
        return self.frames[-1]

    def feed(self, tok: Token) -> None:
        top, prev, text = self.top, self.prev, tok.text
        if tok.kind == "name":
            joined = prev is not None and prev.text == "." and bool(self._chain)
            self._chain = [*self._chain, tok] if joined else [tok]
            extends = top.kind == "top" or (joined and top.kind in STATEMENTS and not top.after_eq)
            if _starts_statement(prev, tok, top):
                top.stmt, top.after_eq = [text], False
            elif extends and top.stmt:
                top.stmt.append(text)
        elif text == "{":
            self._open_brace(top)
        elif text == "}":
            self._pop(BRACES)
        elif text == "(":
            self._open_paren(top, prev)
        elif text == ")":
            self._pop(PARENS)
        elif text == "[":
            self.frames.append(Frame("list"))
        elif text == "]":
            self._pop(("list",))
        elif text == "=":
            if top.kind in ("call", "params") and prev is not None and prev.kind == "name":
                top.keyword = prev.text
                top.given.append(prev.text)
            elif top.kind in STATEMENTS:
                top.after_eq = True
        elif text == "," and top.kind == "call":
            if top.keyword is None:
                top.positional += 1
            top.keyword = None
        elif text == ";" and top.kind in STATEMENTS:
            top.stmt, top.after_eq = [], False
        elif top.kind == "top" and top.stmt and text != ".":
            top.stmt.append(text)
        if tok.kind != "name" and text != ".":
            self._chain = []
        self.prev = tok

    def _open_brace(self, top: Frame) -> None:
        if top.kind == "top" and top.stmt and top.stmt[0] in DECLS:
            self.frames.append(_decl_frame(top.stmt))
        elif top.kind == "layer" and top.stmt[:1] == ["forward"]:
            self.frames.append(Frame("forward"))
        elif top.kind in BODIES and top.stmt and not top.after_eq:
            self.frames.append(Frame("block", ".".join(top.stmt)))
        else:
            self.frames.append(Frame("map"))

    def _open_paren(self, top: Frame, prev: Token | None) -> None:
        if prev is not None and prev.kind == "name":
            if top.kind == "top" and top.stmt[:1] in (["layer"], ["model"]) and len(top.stmt) == 2:
                self.frames.append(Frame("params", top.stmt[1]))
                return
            if prev.text == "forward" and top.kind == "layer":
                self.frames.append(Frame("fparams"))
                return
            callee = ".".join(t.text for t in self._chain) if self._chain else prev.text
            self.frames.append(Frame("call", callee))
            return
        self.frames.append(Frame("paren"))

    def _pop(self, kinds: tuple[str, ...]) -> None:
        """Close the innermost frame of one of `kinds` (and any left open inside it)."""
        for i in range(len(self.frames) - 1, 0, -1):
            if self.frames[i].kind in kinds:
                closed = self.frames[i]
                del self.frames[i:]
                if closed.kind in BRACES and closed.kind != "map":  # a body ends its statement
                    self.top.stmt, self.top.after_eq = [], False
                return


def _decl_frame(header: list[str]) -> Frame:
    """The frame a top-level `{` opens, from the words before it (`experiment a . b extends c`
    arrives as `experiment`, `a`, `b`, `extends`, `c`: dots are not kept)."""
    kw = header[0]
    words = header[1:]
    if kw == "experiment":
        name = words[: words.index("extends")] if "extends" in words else words
        return Frame("experiment", ".".join(w for w in name if w.isidentifier()))
    if kw == "sweep":
        return Frame("sweep", ".".join(w for w in words if w.isidentifier()))
    kind = "layer" if kw in ("layer", "model") else kw
    return Frame(kind, words[0] if words else "")


@dataclass
class Cursor:
    """Where a position is: the frames open before it and the tokens around it."""

    frames: list[Frame]
    token: Token | None
    """The name, number or string under the cursor (touching it counts)."""
    prefix: str
    """The part of `token` before the cursor: what completion should extend."""
    prev: Token | None
    next: Token | None
    chain: list[str]
    """The dotted name the token is the last written part of (`lm.model.d` on `d`)."""
    statement_start: bool

    @property
    def frame(self) -> Frame:
        return self.frames[-1]

    @property
    def word(self) -> str:
        return self.token.text if self.token is not None and self.token.kind == "name" else ""

    def enclosing(self, *kinds: str) -> Frame | None:
        """The innermost open frame of one of `kinds`."""
        return next((f for f in reversed(self.frames) if f.kind in kinds), None)

    @property
    def lhs(self) -> list[str] | None:
        """The assignment path up to the token, when the token is on the left of an `=`."""
        f = self.frame
        if self.token is None or self.token.kind != "name" or f.kind not in STATEMENTS[1:]:
            return None
        if self.statement_start:
            return [self.token.text]
        if self.prev is not None and self.prev.text == "." and f.stmt and not f.after_eq:
            return [*f.stmt, self.token.text]
        return None


def cursor_at(text: str, offset: int) -> Cursor:
    """The cursor context at a character offset of `text`."""
    walker = Walker()
    found: Token | None = None
    after: Token | None = None
    for tok in tokens(text, stop=offset):
        touches = tok.start <= offset <= tok.end and tok.kind in ("name", "string", "number")
        if touches and (tok.start < offset or found is None):
            found = tok
            continue
        if tok.start >= offset and (found is None or tok.start >= found.end):
            after = tok
            break
        walker.feed(tok)
    if found is not None and after is None:
        after = next(iter(tokens(text[found.end :], stop=0)), None)
    prev = walker.prev
    probe = found or Token("name", "", offset, offset, text.count("\n", 0, offset))
    start = _starts_statement(prev, probe, walker.top)
    chain = walker._chain if prev is not None and prev.text == "." else []
    names = [t.text for t in chain]
    if found is not None and found.kind == "name":
        names.append(found.text)
    prefix = found.text[: offset - found.start] if found is not None else ""
    return Cursor(walker.frames, found, prefix, prev, after, names, start)


def dotted_at(text: str, token: Token) -> str:
    """The whole dotted name a name token is part of, both sides (`a.b.c` from `b`)."""
    lo, hi = token.start, token.end
    while lo > 1 and text[lo - 1] == "." and (text[lo - 2].isalnum() or text[lo - 2] == "_"):
        j = lo - 1
        while j > 0 and (text[j - 1].isalnum() or text[j - 1] == "_"):
            j -= 1
        lo = j
    while (
        hi + 1 < len(text) and text[hi] == "." and (text[hi + 1].isalpha() or text[hi + 1] == "_")
    ):
        j = hi + 1
        while j < len(text) and (text[j].isalnum() or text[j] == "_"):
            j += 1
        hi = j
    return text[lo:hi]
