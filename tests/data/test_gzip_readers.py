"""Gzip-compressed data files: a `.gz` reads as its plain text would, and a damaged one is a
`bad-gzip` error at its file and line, never a traceback."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from seqc.data.calls import make_call
from seqc.data.errors import DataError
from seqc.data.readers import read_examples, read_lines

TEXT = "\ufefffirst line\r\n\n   \nsecond line\nthird, no newline"


def write(path: Path, data: str | bytes, *, gz: bool = False) -> Path:
    raw = data.encode("utf-8") if isinstance(data, str) else data
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(raw) if gz else raw)
    return path


def rows(path: str, base: Path, kind: str = "text", **kw: object) -> list[tuple]:
    examples = read_examples(make_call("reader", kind, path, **kw), base)
    return [(e.source, e.target, e.line) for e in examples]


def test_a_gzip_text_file_reads_like_the_plain_one(tmp_path: Path) -> None:
    write(tmp_path / "a.txt", TEXT)
    write(tmp_path / "a.txt.gz", TEXT, gz=True)
    plain = rows("a.txt", tmp_path)
    assert plain == [
        ("first line", None, 1),
        ("second line", None, 4),
        ("third, no newline", None, 5),
    ]
    assert rows("a.txt.gz", tmp_path) == plain
    examples = read_examples(make_call("reader", "text", "a.txt.gz"), tmp_path)
    assert examples[0].location.endswith("a.txt.gz:1")


def test_gzip_tsv_and_jsonl(tmp_path: Path) -> None:
    write(tmp_path / "p.tsv.gz", "id\ten\tes\n1\thello\thola\n\n2\tbye\tadiós\n", gz=True)
    got = rows("p.tsv.gz", tmp_path, "tsv", source=1, target=2, header=True)
    assert got == [("hello", "hola", 2), ("bye", "adiós", 4)]
    write(
        tmp_path / "p.jsonl.gz", '{"en": "hi", "es": "hola"}\n\n{"en": "no", "es": "no"}\n', gz=True
    )
    got = rows("p.jsonl.gz", tmp_path, "jsonl", source="en", target="es")
    assert got == [("hi", "hola", 1), ("no", "no", 3)]


def test_a_glob_mixing_plain_and_gzip_files_reads_both_in_path_order(tmp_path: Path) -> None:
    write(tmp_path / "d" / "b.txt.gz", "b1\nb2\n", gz=True)
    write(tmp_path / "d" / "a.txt", "a1\n")
    assert [s for s, _, _ in rows("d/*", tmp_path)] == ["a1", "b1", "b2"]
    write(tmp_path / "d" / "c.txt.gz", "c1\n", gz=True)
    assert [s for s, _, _ in rows("d/*.txt.gz", tmp_path)] == ["b1", "b2", "c1"]


def test_whole_file_codecs_read_through_gzip(tmp_path: Path) -> None:
    write(tmp_path / "u.txt.gz", "one\r\ntwo\n".encode("utf-16"), gz=True)
    assert [s for s, _, _ in rows("u.txt.gz", tmp_path, encoding="utf-16")] == ["one", "two"]


def test_a_truncated_gzip_file_is_a_bad_gzip_error_at_the_line_reached(tmp_path: Path) -> None:
    """Reading streams: the lines before the damage come out, then the error names the next."""
    whole = gzip.compress(b"".join(b"line %d of a long file\n" % i for i in range(200_000)))
    path = write(tmp_path / "cut.txt.gz", whole[: len(whole) // 2])
    seen = 0
    with pytest.raises(DataError) as info:
        for lineno, _ in read_lines(path):
            seen = lineno
    err = info.value
    assert seen > 1000  # decompressed as read, not whole before the first line
    assert err.code == "bad-gzip" and err.phase == "data"
    assert err.location.endswith(f"cut.txt.gz:{seen + 1}")
    text = err.render()
    assert "truncated" in text and "gzip -t" in text and "Traceback" not in text


def test_a_file_named_gz_that_is_not_gzip_is_a_bad_gzip_error(tmp_path: Path) -> None:
    write(tmp_path / "plain.txt.gz", "secret text, not compressed\n")
    with pytest.raises(DataError) as info:
        read_examples(make_call("reader", "text", "plain.txt.gz"), tmp_path)
    err = info.value
    assert err.code == "bad-gzip"
    assert err.location.endswith("plain.txt.gz:1")
    assert "not a gzip header" in err.render()
    assert "b'se'" not in err.render()  # gzip's own message quotes the file's first bytes


def test_a_damaged_utf16_gzip_file_is_a_bad_gzip_error(tmp_path: Path) -> None:
    whole = gzip.compress("a line\n".encode("utf-16") * 50_000)
    write(tmp_path / "cut16.txt.gz", whole[: len(whole) // 2])
    with pytest.raises(DataError) as info:
        read_examples(make_call("reader", "text", "cut16.txt.gz", encoding="utf-16"), tmp_path)
    assert info.value.code == "bad-gzip"
    assert "cut16.txt.gz:" in info.value.location


def test_a_decode_error_inside_a_gzip_file_names_its_line_and_offset(tmp_path: Path) -> None:
    write(tmp_path / "bad.txt.gz", b"fine\nal\xe9 latin-1\n", gz=True)
    with pytest.raises(DataError) as info:
        read_examples(make_call("reader", "text", "bad.txt.gz"), tmp_path)
    err = info.value
    assert err.code == "bad-encoding"
    assert err.location.endswith("bad.txt.gz:2")
    assert "byte 0xe9 at byte offset 7" in err.render()  # offset in the decompressed text
