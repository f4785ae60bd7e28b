"""The parse cache: a file whose text, grammar and front end are unchanged loads without a parse,
and what loads equals a fresh parse, spans and comments included."""

from __future__ import annotations

from pathlib import Path

import pytest

from seqc.spec import parse_cache, parser
from seqc.spec.errors import ParseError, source_line
from seqc.spec.parser import parse_file, parse_text

SPEC = """seqc 1

# a layer with comments everywhere
layer Block(d: int > 0 = 64 "width", p: float in [0, 1) = 0.1) {
  "A residual block."
  norm = LayerNorm(d)  # pre-norm
  mlp = repeat(2) FeedForward(d, 4 * d, dropout = p)
  forward (x: float32[B, T, d]) -> float32[B, T, d] {
    return x + mlp(norm(x))
  }
}

experiment e {
  train { steps = 1_000 }
  distribution { devices = 4 x gpu(memory = "16GiB") }
  tags = ["a", "b"]
  m = {a: 1, "b": 2.5}
}
"""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv(parse_cache.ENV, str(folder))
    return folder


def _spec(tmp_path: Path, text: str = SPEC) -> Path:
    path = tmp_path / "m.seq"
    path.write_text(text, encoding="utf-8")
    return path


def _entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.ir")) if folder.exists() else []


def _no_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object) -> None:
        raise AssertionError("parsed although the cache holds the file")

    monkeypatch.setattr(parser, "_parse", fail)


def test_a_cached_file_equals_a_fresh_parse(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _spec(tmp_path)
    first = parse_file(path)
    assert len(_entries(cache)) == 1
    fresh = parse_text(SPEC, str(path))
    _no_parse(monkeypatch)
    again = parse_file(path)
    assert again == fresh
    assert again == first
    assert repr(again) == repr(first)  # every field, spans and comments, in the same order
    assert again.decls[0].sublayers[0].trailing == "# pre-norm"
    assert again.decls[0].span == first.decls[0].span


def test_a_hit_remembers_the_source_for_carets(cache: Path, tmp_path: Path) -> None:
    path = _spec(tmp_path)
    parse_file(path)
    from seqc.spec import errors

    errors._SOURCES.pop(str(path), None)
    parse_file(path)
    assert source_line(str(path), 6) == "  norm = LayerNorm(d)  # pre-norm"


def test_a_changed_file_is_parsed_again(cache: Path, tmp_path: Path) -> None:
    path = _spec(tmp_path)
    parse_file(path)
    path.write_text(SPEC.replace("steps = 1_000", "steps = 7"), encoding="utf-8")
    spec = parse_file(path)
    assert "steps = 7" in path.read_text()
    assert spec.decls[1].body.items[0].body.items[0].value.value == 7
    assert len(_entries(cache)) == 1  # one entry per path, replaced


@pytest.mark.parametrize("damage", [b"", b"garbage", None])
def test_a_damaged_entry_is_ignored_and_rebuilt(
    cache: Path, tmp_path: Path, damage: bytes | None
) -> None:
    path = _spec(tmp_path)
    first = parse_file(path)
    (entry,) = _entries(cache)
    data = entry.read_bytes()
    entry.write_bytes(data[: len(data) // 2] if damage is None else damage)
    assert parse_file(path) == first
    assert entry.read_bytes() == data  # rebuilt


def test_an_unwritable_cache_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(parse_cache.ENV, str(blocker / "cache"))
    path = _spec(tmp_path)
    assert parse_file(path) == parse_file(path)


def test_a_syntax_error_is_never_cached(cache: Path, tmp_path: Path) -> None:
    path = _spec(tmp_path, "seqc 1\nlayer L( {\n")
    for _ in range(2):
        with pytest.raises(ParseError) as e:
            parse_file(path)
        assert e.value.code == "unexpected-token"
    assert _entries(cache) == []


def test_off_disables_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(parse_cache.ENV, "off")
    assert parse_cache.cache_dir() is None
    parse_file(_spec(tmp_path))


def test_the_default_folder_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(parse_cache.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert parse_cache.cache_dir() == tmp_path / "seqc" / "parse"


def test_the_key_holds_the_file_name(cache: Path, tmp_path: Path) -> None:
    """Spans name the file, so the same text at another path is another entry."""
    a = _spec(tmp_path)
    b = tmp_path / "sub" / "m.seq"
    b.parent.mkdir()
    b.write_text(SPEC, encoding="utf-8")
    assert parse_file(a).span.file == str(a)
    assert parse_file(b).span.file == str(b)
    assert parse_file(a).span.file == str(a)


def _fields_sets(node: object) -> list[tuple[str, frozenset[str]]]:
    """Every IR node's class and set fields, depth first: what `model_dump(exclude_unset)` reads."""
    from pydantic import BaseModel

    out: list[tuple[str, frozenset[str]]] = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, BaseModel):
            out.append((type(n).__name__, frozenset(n.__pydantic_fields_set__)))
            stack.extend(reversed(list(n.__dict__.values())))
        elif isinstance(n, tuple):
            stack.extend(reversed(n))
    return out


def test_a_cached_file_keeps_which_fields_were_set(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _spec(tmp_path)
    parse_file(path)
    fresh = parse_text(SPEC, str(path))
    _no_parse(monkeypatch)
    again = parse_file(path)
    assert _fields_sets(again) == _fields_sets(fresh)
    assert again.model_dump(exclude_unset=True) == fresh.model_dump(exclude_unset=True)


def test_every_ir_class_is_pickled_compactly() -> None:
    from pydantic import BaseModel

    from seqc.spec import ir

    classes = [
        c
        for c in vars(ir).values()
        if isinstance(c, type) and issubclass(c, BaseModel) and c.__module__ == ir.__name__
    ]
    assert ir.SpecFile in classes and ir.Span in classes
    for c in classes:
        assert c in parse_cache._Pickler.dispatch_table, c


def test_the_cython_parser_builds_what_the_pure_one_builds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`lark-cython`, when installed, changes nothing but the speed: same IR, same errors."""
    import sys

    pytest.importorskip("lark_cython")
    bad = [
        "seqc 1\nlayer L( {",
        "seqc 1\nlayer L() { x = $ }",
        'seqc 1\ninput i { a = "open }',
        "seqc 1\nexperiment e { train { steps = 1 }",
        "layer L() {}",
        "seqc 1\nlayer L(d: int > x) {}",
    ]

    def run() -> list[object]:
        out: list[object] = [parse_text(SPEC, "m.seq")]
        for text in bad:
            with pytest.raises(ParseError) as e:
                parse_text(text, "bad.seq")
            out.append((str(e.value), e.value.code, e.value.expected, e.value.found))
        return out

    parser._lark.cache_clear()
    accelerated = run()
    assert parser._lark().options._plugins
    monkeypatch.setitem(sys.modules, "lark_cython", None)  # as if it were not installed
    parser._lark.cache_clear()
    try:
        pure = run()
        assert not parser._lark().options._plugins
    finally:
        parser._lark.cache_clear()
    assert accelerated == pure
