"""Readers: what a user gets from good files, and what a bad line tells them."""

from __future__ import annotations

from pathlib import Path

import pytest

from seqc.data.calls import make_call
from seqc.data.errors import DataError
from seqc.data.readers import Example, has_target, read_examples, resolve_paths
from seqc.data.report import DropReport
from seqc.spec.errors import FileError


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_text_reader_one_example_per_line_skipping_blanks(tmp_path: Path) -> None:
    write(tmp_path / "a.txt", "\ufefffirst line\r\n\n   \nsecond line\n")
    examples = read_examples(make_call("reader", "text", "a.txt"), tmp_path)
    assert [e.source for e in examples] == ["first line", "second line"]
    assert [e.line for e in examples] == [1, 4]
    assert all(e.target is None for e in examples)
    kept = read_examples(make_call("reader", "text", "a.txt", skip_empty=False), tmp_path)
    assert len(kept) == 4


def test_glob_paths_read_files_in_sorted_order(tmp_path: Path) -> None:
    write(tmp_path / "d" / "b.txt", "b\n")
    write(tmp_path / "d" / "a.txt", "a\n")
    examples = read_examples(make_call("reader", "text", "d/*.txt"), tmp_path)
    assert [e.source for e in examples] == ["a", "b"]


def test_several_base_dirs_are_tried_in_order(tmp_path: Path) -> None:
    write(tmp_path / "second" / "x.txt", "found\n")
    paths = resolve_paths("x.txt", [tmp_path / "first", tmp_path / "second"])
    assert paths == [tmp_path / "second" / "x.txt"]


def test_tsv_reader_takes_columns_by_index(tmp_path: Path) -> None:
    write(tmp_path / "p.tsv", "id\ten\tes\n1\thello\thola\n\n2\tbye\tadiós\n")
    call = make_call("reader", "tsv", "p.tsv", source=1, target=2, header=True)
    drops = DropReport()
    examples = read_examples(call, tmp_path, drops)
    assert examples == [
        Example("hello", "hola", examples[0].file, 2),
        Example("bye", "adiós", examples[0].file, 4),
    ]
    assert drops.counts == {"blank-line": 1}
    assert drops.examples["blank-line"][0].endswith("p.tsv:3")
    assert has_target(call) and not has_target(make_call("reader", "tsv", "p.tsv", target=None))


def test_jsonl_reader_takes_fields_by_name(tmp_path: Path) -> None:
    write(tmp_path / "p.jsonl", '{"en": "hi", "es": "hola"}\n\n{"en": "no", "es": "no"}\n')
    call = make_call("reader", "jsonl", "p.jsonl", source="en", target="es")
    examples = read_examples(call, tmp_path)
    assert [(e.source, e.target) for e in examples] == [("hi", "hola"), ("no", "no")]


def test_missing_prepared_corpus_says_how_to_prepare_it(tmp_path: Path) -> None:
    call = make_call("reader", "text", ".cache/data/shakespeare/train.txt")
    with pytest.raises(FileError) as info:
        read_examples(call, tmp_path)
    err = info.value
    assert err.code == "missing-data"
    assert "seqc data prepare shakespeare" in err.render()


def test_missing_file_names_every_place_looked_at(tmp_path: Path) -> None:
    with pytest.raises(FileError) as info:
        read_examples(make_call("reader", "text", "nope.txt"), [tmp_path / "a", tmp_path / "b"])
    text = info.value.render()
    assert "a/nope.txt" in text and "b/nope.txt" in text


def test_undecodable_bytes_point_at_line_and_byte_offset(tmp_path: Path) -> None:
    write(tmp_path / "bad.txt", b"fine\nal\xe9 latin-1\n")
    with pytest.raises(DataError) as info:
        read_examples(make_call("reader", "text", "bad.txt"), tmp_path)
    err = info.value
    assert err.phase == "data" and err.code == "bad-encoding"
    assert err.location.endswith("bad.txt:2")
    assert "byte 0xe9 at byte offset 7" in err.render()
    # the same file read with the right encoding is fine
    call = make_call("reader", "text", "bad.txt", encoding="latin-1")
    assert read_examples(call, tmp_path)[1].source == "alé latin-1"


def test_empty_corpus_is_an_error(tmp_path: Path) -> None:
    write(tmp_path / "empty.txt", "\n\n  \n")
    with pytest.raises(DataError) as info:
        read_examples(make_call("reader", "text", "empty.txt"), tmp_path)
    assert info.value.code == "empty-corpus"
    assert "empty.txt" in info.value.render()


def test_tsv_line_with_too_few_columns(tmp_path: Path) -> None:
    write(tmp_path / "p.tsv", "a\tb\nonly one column\n")
    with pytest.raises(DataError) as info:
        read_examples(make_call("reader", "tsv", "p.tsv"), tmp_path)
    err = info.value
    assert err.code == "too-few-columns"
    assert err.location.endswith("p.tsv:2")
    assert "found:    1 column of 15 characters" in err.render()
    assert "only one column" not in err.render()  # errors describe a data line, never quote it


def test_invalid_json_line(tmp_path: Path) -> None:
    write(tmp_path / "p.jsonl", '{"source": "a", "target": "b"}\n{"source": "a", \n')
    with pytest.raises(DataError) as info:
        read_examples(make_call("reader", "jsonl", "p.jsonl"), tmp_path)
    assert info.value.code == "invalid-json"
    assert info.value.location.endswith("p.jsonl:2")


def test_missing_json_field_suggests_the_close_name(tmp_path: Path) -> None:
    write(tmp_path / "p.jsonl", '{"source": "a", "targte": "b"}\n')
    with pytest.raises(DataError) as info:
        read_examples(make_call("reader", "jsonl", "p.jsonl"), tmp_path)
    text = info.value.render()
    assert "p.jsonl:1" in text and "did you mean `targte`" in text and "target = none" in text


def test_drop_report_summarises_reasons_and_places() -> None:
    report = DropReport()
    for line in range(1, 6):
        report.add("too-long", f"a.txt:{line}")
    report.add("blank-line", "b.tsv:9")
    assert report.total == 6
    assert str(report) == (
        "dropped 6: 5 too-long (e.g. a.txt:1, a.txt:2, a.txt:3, ...); 1 blank-line (e.g. b.tsv:9)"
    )
    assert report.to_json()["counts"] == {"blank-line": 1, "too-long": 5}


def test_tsv_row_with_an_extra_column_is_an_error_not_a_truncation(tmp_path: Path) -> None:
    """A row of three columns among rows of two: a tab inside a target would cut it, silently.
    Every row has the first row's column count; the error names the row and both counts."""
    write(tmp_path / "p.tsv", "hello\thola\n\nbye\tadiós\tgood bye\n")
    with pytest.raises(DataError) as info:
        read_examples(make_call("reader", "tsv", "p.tsv"), tmp_path)
    err = info.value
    assert (err.phase, err.code) == ("data", "ragged-columns")
    assert err.location.endswith("p.tsv:3")
    rendered = err.render()
    assert "line 3 has 3 columns, line 1 has 2" in rendered
    assert "expected: 2 columns separated by '\\t', as on line 1" in rendered
    assert "found:    3 columns of 3, 5 and 8 characters" in rendered


def test_tsv_header_sets_the_column_count(tmp_path: Path) -> None:
    write(tmp_path / "p.tsv", "id\ten\tes\n1\thello\thola\n2\tbye\n")
    call = make_call("reader", "tsv", "p.tsv", source=0, target=1, header=True)
    with pytest.raises(DataError) as info:
        read_examples(call, tmp_path)
    assert info.value.code == "ragged-columns"
    assert info.value.location.endswith("p.tsv:3")
    # a wide file whose rows agree is read, whichever columns the reader takes
    write(tmp_path / "w.tsv", "1\thello\thola\n2\tbye\tadiós\n")
    wide = read_examples(make_call("reader", "tsv", "w.tsv", source=1, target=2), tmp_path)
    assert [(e.source, e.target) for e in wide] == [("hello", "hola"), ("bye", "adiós")]


def test_cli_ragged_tsv_is_exit_2_at_its_row(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from seqc.cli import app

    write(tmp_path / "train.tsv", "ab\tba\ncd\tdc\tx\n")
    spec = write(
        tmp_path / "mt.seq",
        "seqc 1\n"
        'input pairs { train = tsv("train.tsv"); tokenizer = chars() }\n'
        "model M(vocab: int, d: int = 8) {\n"
        "  embed = Embedding(vocab, d)\n"
        "  forward (src: int32[B, S], src_mask: bool[B, S], tgt: int32[B, T]) "
        "-> float32[B, T, d] { return embed(tgt) }\n"
        "}\n"
        "task translate { input = pairs; model = M(vocab = input.vocab_size) }\n"
        "experiment e { tasks = [translate] }\n",
    )
    result = CliRunner().invoke(
        app, ["train", str(spec), "-e", "e", "--run-dir", str(tmp_path / "r")]
    )
    assert result.exit_code == 2, result.output
    assert "train.tsv:2: data error [ragged-columns]" in result.output
    assert "internal error" not in result.output
