"""Property tests of the front end on randomly damaged copies of the example specs.

Why: users type half-finished specs all day, and `seqc check` runs on every save in an editor.
Whatever the text, the front end must answer with a `SeqcError` (a message with a caret), never a
Python traceback. And whenever damaged text still parses, `seqc fmt` must keep its meaning and be
a fixed point, or a format-on-save would silently change a program or never settle.

Edits are insertions from a token pool that hits the grammar's sensitive spots (brackets, `=`,
`x` replication, numbers, keywords, comments, newlines), deletions of a few characters or of a
whole bracketed group (which keeps the text balanced, so more cases get past the parser to the
checker), a word replaced by another of the file's words (unknown and misused names), line
duplications and swaps, and truncation. Runs are derandomized and use no example database, so CI
sees the same cases every time.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from spec_fuzz import POOL

from seqc.compiler.check import check_program
from seqc.resolve.program import load_program
from seqc.spec.errors import SeqcError
from seqc.spec.ir import without_spans
from seqc.spec.parser import _comments, parse_text
from seqc.spec.printer import format_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXAMPLE_FILES = sorted(p.relative_to(EXAMPLES).as_posix() for p in EXAMPLES.glob("**/*.seq"))
TEXTS = {rel: (EXAMPLES / rel).read_text(encoding="utf-8") for rel in EXAMPLE_FILES}

TOKENS = POOL
"""What an edit inserts: the fuzzer's pool of tokens (punctuation, keywords, extreme numbers)."""

# About 10 s for the file on a laptop core; the crash property loads and checks a program a case.
SETTINGS = settings(
    max_examples=500,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@dataclass(frozen=True)
class Edit:
    """One damage to a text; positions are taken modulo the text's length when applied."""

    kind: str
    a: int
    b: int
    token: str = ""

    def apply(self, text: str) -> str:
        n = len(text)
        i = self.a % (n + 1)
        if self.kind == "delete":
            return text[:i] + text[i + 1 + self.b % 40 :]
        if self.kind == "insert":
            return text[:i] + self.token + text[i:]
        if self.kind == "truncate":
            return text[:i]
        if self.kind == "delete_group":
            return _delete_group(text, self.a)
        if self.kind == "swap_word":
            words = list(re.finditer(r"[A-Za-z_][A-Za-z0-9_]*", text))
            if not words:
                return text
            at, other = words[self.a % len(words)], words[self.b % len(words)]
            return text[: at.start()] + other.group() + text[at.end() :]
        lines = text.split("\n")
        j, k = self.a % len(lines), self.b % len(lines)
        if self.kind == "dup_line":
            lines.insert(j, lines[j])
        else:  # swap_lines
            lines[j], lines[k] = lines[k], lines[j]
        return "\n".join(lines)


_pos = st.integers(min_value=0, max_value=1 << 16)
edits = st.one_of(
    st.builds(Edit, st.just("delete"), _pos, _pos),
    st.builds(Edit, st.just("insert"), _pos, _pos, st.sampled_from(TOKENS)),
    st.builds(Edit, st.just("dup_line"), _pos, _pos),
    st.builds(Edit, st.just("swap_lines"), _pos, _pos),
    st.builds(Edit, st.just("truncate"), _pos, _pos),
    st.builds(Edit, st.just("delete_group"), _pos, _pos),
    st.builds(Edit, st.just("swap_word"), _pos, _pos),
)
# A case is an example file and the edits to make; failures print both, shrunk.
damages = st.tuples(st.sampled_from(EXAMPLE_FILES), st.lists(edits, min_size=1, max_size=4))


_CLOSE = {"(": ")", "[": "]", "{": "}"}


def _delete_group(text: str, which: int) -> str:
    """Delete the n-th bracketed group, brackets included: `f(a, b)` -> `f`, `L(d: int) {` -> `L {`.

    Whole groups keep the text balanced, so it often still parses and reaches the checker."""
    opens = [i for i, ch in enumerate(text) if ch in _CLOSE]
    if not opens:
        return text
    start = opens[which % len(opens)]
    depth = 0
    for j in range(start, len(text)):
        if text[j] in _CLOSE:
            depth += 1
        elif text[j] in _CLOSE.values():
            depth -= 1
            if depth == 0:
                return text[:start] + text[j + 1 :]
    return text[:start]


def _damage(case: tuple[str, list[Edit]]) -> tuple[str, str]:
    """The example's relative path and its text after the edits (noted for a failure report)."""
    rel, changes = case
    text = TEXTS[rel]
    for e in changes:
        text = e.apply(text)
    note(f"damaged text of {rel}:\n{text}")
    return rel, text


@pytest.fixture(scope="module")
def examples_copy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private copy of examples/, so a damaged file's relative imports still resolve."""
    root = tmp_path_factory.mktemp("examples")
    shutil.copytree(EXAMPLES, root, dirs_exist_ok=True)
    yield root


def test_there_are_examples() -> None:
    """Guard: without example files the properties below would test nothing."""
    assert len(EXAMPLE_FILES) >= 2
    assert any("import" in t for t in TEXTS.values())


@SETTINGS
@given(case=damages)
def test_damaged_specs_fail_only_with_seqc_errors(
    case: tuple[str, list[Edit]], examples_copy: Path
) -> None:
    """Parse, load and check a damaged example: success or a SeqcError, nothing else.

    The damaged text is the file's unsaved buffer, as in an editor (`load_program`'s overlay):
    it is parsed once, by the load (a syntax error is the load's `SeqcError`), and never written
    to disk. Parsing it first as well, and writing and restoring the file, took two fifths of
    the test's time (9.3 s of CPU for 500 cases, now 5.5 s)."""
    rel, text = _damage(case)
    path = (examples_copy / rel).resolve()
    try:
        check_program(load_program(path, overlay={path: text}))
    except SeqcError as e:
        assert e.render()  # rendering the caret excerpt must not crash either


@SETTINGS
@given(case=damages)
def test_fmt_keeps_meaning_of_damaged_specs(case: tuple[str, list[Edit]]) -> None:
    """Whatever parses formats to the same IR and the same comments, and is then a fixed point."""
    rel, text = _damage(case)
    try:
        spec = parse_text(text, rel)
    except SeqcError:
        return
    formatted = format_spec(spec)
    again = parse_text(formatted, rel)
    assert without_spans(again) == without_spans(spec)
    assert format_spec(again) == formatted
    assert _comment_texts(formatted) == _comment_texts(text), "fmt dropped or invented a comment"


def _comment_texts(text: str) -> list[str]:
    """Every comment of a text, sorted: `fmt` may move a comment but never drop one."""
    return sorted(str(c) for c in _comments(text))


def test_edits_do_change_text() -> None:
    """Guard: each edit kind really alters a text, so the properties see damaged input."""
    text = TEXTS[EXAMPLE_FILES[0]]
    for e in [
        Edit("delete", 10, 3),
        Edit("insert", 10, 0, "{"),
        Edit("dup_line", 3, 0),
        Edit("swap_lines", 0, 1),
        Edit("truncate", 10, 0),
        Edit("delete_group", 0, 0),
        Edit("swap_word", 0, 3),
    ]:
        assert e.apply(text) != text, e
