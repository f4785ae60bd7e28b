"""Lark's syntax errors in words a user knows: what was found, what was expected there, and a
hint for the mistakes people make (a missing `}`, an import after a declaration, a range in
the wrong place). `seqc.spec.parser` raises what `syntax_error` returns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from seqc.spec import ir
from seqc.spec.errors import ParseError, did_you_mean, shows_source

if TYPE_CHECKING:  # lark is imported on the first parse: a parse-cache hit never needs it
    from lark import Lark, Token
    from lark.exceptions import UnexpectedInput

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


def _describe_terminal(lark: Lark, name: str) -> str:
    if name in _TOKEN_WORDS:
        return _TOKEN_WORDS[name]
    try:
        term = lark.get_terminal(name)
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


def _expected_keywords(lark: Lark, expected: set[str]) -> list[str]:
    words = []
    for name in expected:
        try:
            term = lark.get_terminal(name)
        except KeyError:
            continue
        if term.pattern.type == "str" and term.pattern.value.isalpha():
            words.append(term.pattern.value)
    return words


def span_at(filename: str, line: int, col: int, width: int = 1) -> ir.Span:
    return ir.Span(file=filename, line=line, col=col, end_line=line, end_col=col + max(width, 1))


def unquoted(err: ParseError) -> ParseError:
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


def syntax_error(lark: Lark, e: UnexpectedInput, text: str, filename: str) -> ParseError:
    """Lark's `e` as a `ParseError` located in `filename` that says what was expected in a
    user's words (`lark`: the parser, whose terminals name what it expected)."""
    from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedToken

    if isinstance(e, UnexpectedCharacters):
        line, col = e.line, e.column
        ch = text[e.pos_in_stream] if e.pos_in_stream < len(text) else ""
        span = span_at(filename, line, col)
        if ch == '"':
            return ParseError(
                "unterminated string",
                span=span,
                code="unterminated-string",
                expected='a closing `"` on the same line',
                found="end of line",
            )
        expected = sorted(_describe_terminal(lark, t) for t in e.allowed or ())
        return ParseError(
            f"unexpected character {ch!r}",
            span=span,
            code="unexpected-character",
            expected=", ".join(expected) if expected else None,
            found=repr(ch),
        )
    if isinstance(e, UnexpectedEOF):
        lines = text.splitlines() or [""]
        span = span_at(filename, len(lines), len(lines[-1]) + 1)
        return ParseError(
            "unexpected end of file",
            span=span,
            code="unexpected-eof",
            expected=", ".join(sorted(_describe_terminal(lark, t) for t in e.expected)),
            found="end of file",
            hint="is a `}` or `)` missing?",
        )
    assert isinstance(e, UnexpectedToken)
    tok = e.token
    expected_names = set(e.expected) - {"_SEMI"}
    if tok.type == "$END":
        lines = text.splitlines() or [""]
        span = span_at(filename, len(lines), len(lines[-1]) + 1)
    else:
        span = ir.Span(
            file=filename,
            line=tok.line,
            col=tok.column,
            end_line=tok.end_line or tok.line,
            end_col=tok.end_column or tok.column + 1,
        )
    words = sorted({_describe_terminal(lark, t) for t in expected_names})
    expected = (
        ", ".join(words[:-1]) + (" or " if len(words) > 1 else "") + words[-1] if words else ""
    )
    suggestion = None
    keywords = _expected_keywords(lark, expected_names)
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
