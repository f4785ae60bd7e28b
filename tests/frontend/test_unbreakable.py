"""Hostile specs get a located error and exit code 2: never a traceback, never a hang.

The front end runs on every keystroke in an editor and on specs from anyone (issue 17,
"Unbreakable"). Each case here is one kind of input a fuzzer or a careless paste produces:
nesting thousands deep, numbers past any machine type, bytes that are not UTF-8, a folder or a
binary as the spec, an import that leaves the spec's tree, chains (`extends`, user layers)
thousands long. Each goes through the real CLI (`seqc check`) and, where the library is what an
editor calls, through `load_program` + `check_program`, which must raise a `SeqcError`.

Rules these pin, stated in the README ("Trust and limits") or next to their constant:
- brackets, blocks and operators nest at most `MAX_NESTING` deep; parentheses around a value add
  no nesting (the parser keeps no node for them), so `((((1))))` any deep is just `1`;
- user layers contain each other at most `MAX_LAYER_DEPTH` deep, and an `extends` chain holds at
  most `MAX_EXTENDS_DEPTH` experiments (`check error [too-deep]`, `resolve error
  [extends-too-deep]` at the line past the limit);
- an import resolves inside the root spec's project, `SEQC_PATH` or the bundled examples;
  anything else is `resolve error [import-outside]` at the import line, with a hint saying how
  to allow a library folder.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from seqc.cli import app
from seqc.compiler.check import check_program
from seqc.resolve.layers.nesting import MAX_LAYER_DEPTH
from seqc.resolve.program import SEQC_PATH, load_program
from seqc.resolve.statements import MAX_EXTENDS_DEPTH
from seqc.spec.errors import SeqcError

runner = CliRunner()
DEEP = 5000
"""Fifty times `MAX_NESTING` and five times Python's default recursion limit: a recursive pass
anywhere would overflow. Chains of `+` and `.` were 50,000 long, ten times the rest, for no
more proof: each run parses the text four times (the CLI and the library each parse it, and
again with positions to place the error), and those two cases were half the file's time."""


def check_cli(spec: Path):
    """`seqc check SPEC`: exit 2 with a message, no traceback, no internal error."""
    result = runner.invoke(app, ["check", str(spec)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "internal error" not in result.output
    assert len(result.output) < 5000  # a window of a huge line, not all of it
    return result


def check_library(spec: Path) -> SeqcError:
    """What an editor calls: the error is a `SeqcError`, rendered with its place."""
    with pytest.raises(SeqcError) as info:
        check_program(load_program(spec))
    return info.value


def write(tmp_path: Path, text: str | bytes, name: str = "spec.seq") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


LAYER = """\
layer {name}(d: int = 8) {{
  s = {inner}(d)
  forward (x: float32[B, T, d]) -> float32[B, T, d] {{ return s(x) }}
}}
"""
LM = """\
input i { train = text("train.txt")  tokenizer = bytes }
model M(vocab: int) {
  e = Embedding(vocab, 8)
  o = Softmax(vocab, 8)
  forward (x: int32[B, T]) -> float32[B, T, vocab] { return o(e(x)) }
}
task t { input = i  model = M(vocab = input.vocab_size) }
experiment e0 { tasks = [t] }
"""


# ------------------------------------------------------------------------------------- nesting

NESTED = {
    "blocks": "experiment e { tasks = [t] " + "train { " * DEEP + "}" * DEEP + " }\n",
    "list": "experiment e { x = " + "[" * DEEP + "]" * DEEP + " }\n",
    "map": "experiment e { x = " + "{a: " * DEEP + "1" + "}" * DEEP + " }\n",
    "sum": "experiment e { x = 1" + " + 1" * DEEP + " }\n",
    "power": "experiment e { x = 2" + " ** 2" * DEEP + " }\n",
    "minus": "experiment e { x = " + "-" * DEEP + "1 }\n",
    "calls": "experiment e { x = " + "f(" * DEEP + ")" * DEEP + " }\n",
    "attributes": "experiment e { x = a" + ".a" * DEEP + " }\n",
    "type": "layer L(a: " + "list[" * DEEP + "int" + "]" * DEEP + ") { }\n",
    "dims": "layer L() { forward (x: float32[" + "(" * DEEP + "B" + ")" * DEEP + "]) { } }\n",
    "forward": "layer L() { n = LayerNorm(8)  forward (x: float32[B, 8]) { return "
    + "n(" * DEEP
    + "x"
    + ")" * DEEP
    + " } }\n",
}


@pytest.mark.parametrize("text", NESTED.values(), ids=NESTED.keys())
def test_nesting_thousands_deep_is_a_located_error(text: str, tmp_path: Path) -> None:
    spec = write(tmp_path, "seqc 1\n" + text)
    result = check_cli(spec)
    assert result.output.startswith(f"{spec}:2:"), result.output
    assert check_library(spec).span is not None


def test_parentheses_any_deep_are_just_the_value(tmp_path: Path) -> None:
    spec = write(tmp_path, "seqc 1\n" + LM.replace("8)", "(" * DEEP + "8" + ")" * DEEP + ")"))
    result = runner.invoke(app, ["check", str(spec)])
    assert result.exit_code == 0, result.output


def test_user_layers_thousands_deep_are_located_in_the_library_too(tmp_path: Path) -> None:
    """Declared outermost first, so a recursive walk would go thousands deep from the start:
    2,000 layers, twice Python's recursion limit in levels alone (each level is a few frames).
    No syntax nests here: whichever pass recursed past Python's stack, the CLI's answer is a
    `too-deep` error naming the spec, with exit code 2 (this was also
    `test_limits.py::test_cli_layers_nested_thousands_deep_is_exit_2_not_a_crash`, 2,000 layers
    through the CLI alone; this test, 3,000 layers before, now holds both)."""
    n = 2000
    layers = [LAYER.format(name=f"L{i}", inner=f"L{i + 1}") for i in range(n)]
    spec = write(
        tmp_path, "seqc 1\n" + "".join(layers) + LAYER.format(name=f"L{n}", inner="RMSNorm")
    )
    err = check_library(spec)
    assert (err.code, err.span is not None) == ("too-deep", True)
    assert err.span.line == 2 + 4 * (MAX_LAYER_DEPTH - 1) + 1  # `s = L100(d)` in L99
    assert f"more than {MAX_LAYER_DEPTH} deep" in err.message
    output = check_cli(spec).output
    assert output.startswith(str(spec)) and "error [too-deep]" in output


def test_user_layers_exactly_at_the_limit_check(tmp_path: Path) -> None:
    n = MAX_LAYER_DEPTH - 1  # and the model above them
    layers = [LAYER.format(name=f"L{i}", inner=f"L{i + 1}") for i in range(n - 1)]
    layers.append(LAYER.format(name=f"L{n - 1}", inner="RMSNorm"))
    text = LM.replace("o = Softmax", "s = L0(8)\n  o = Softmax").replace("o(e(x))", "o(s(e(x)))")
    spec = write(tmp_path, "seqc 1\n" + "".join(layers) + text)
    result = runner.invoke(app, ["check", str(spec)])
    assert result.exit_code == 0, result.output


def test_an_extends_chain_thousands_long_is_refused_quickly(tmp_path: Path) -> None:
    """It used to take minutes: every experiment walked its chain comparing whole nodes."""
    n = 3000
    chain = "".join(
        f"experiment e{i + 1} extends e{i} {{ train.steps = {i + 1} }}\n" for i in range(n)
    )
    spec = write(tmp_path, "seqc 1\n" + LM + chain)
    err = check_library(spec)
    assert err.code == "extends-too-deep"
    assert err.span is not None and (err.span.line, err.span.col) == (9 + MAX_EXTENDS_DEPTH, 25)
    assert "error [extends-too-deep]" in check_cli(spec).output


def test_an_extends_chain_at_the_limit_checks(tmp_path: Path) -> None:
    n = MAX_EXTENDS_DEPTH - 1
    chain = "".join(
        f"experiment e{i + 1} extends e{i} {{ train.steps = {i + 1} }}\n" for i in range(n)
    )
    spec = write(tmp_path, "seqc 1\n" + LM + chain)
    assert len(check_program(load_program(spec))) == MAX_EXTENDS_DEPTH


# ------------------------------------------------------------------------------------- numbers

HUGE = {
    "float-1e400": ("train.clip_norm = 1e400", "not-finite"),
    "digits-5000": ("train.steps = " + "9" * 5000, "number-too-long"),
    "digits-4000": ("train.steps = " + "9" * 4000, "out-of-range"),
    "power": ("train.steps = 9 ** 9 ** 9", "overflow"),
    "float-power": ("train.clip_norm = 10.0 ** 400", "overflow"),
    "exponent": ("train.clip_norm = 1e99999999999999999999", "not-finite"),
    "replicate": ("distribution.devices = " + "9" * 4000 + " x cpu()", "bad-count"),
    "size": ('distribution.devices = [cpu(memory = "1e400GiB")]', "bad-size"),
}


@pytest.mark.parametrize(("line", "code"), HUGE.values(), ids=HUGE.keys())
def test_huge_numbers_are_located_errors(line: str, code: str, tmp_path: Path) -> None:
    spec = write(tmp_path, "seqc 1\n" + LM.replace("tasks = [t]", f"tasks = [t]\n  {line}"))
    err = check_library(spec)
    assert err.code == code and err.span is not None and err.span.line == 10
    assert f"[{code}]" in check_cli(spec).output


@pytest.mark.parametrize("dim", ["9" * 5000, "1e400", "0"])
def test_a_huge_dimension_is_a_located_error(dim: str, tmp_path: Path) -> None:
    spec = write(
        tmp_path,
        "seqc 1\nlayer L() { n = RMSNorm(8)\n"
        f" forward (x: float32[B, {dim}]) {{ return n(x) }} }}\n",
    )
    err = check_library(spec)
    assert err.span is not None and (err.span.line, err.span.col) == (3, 25)
    assert check_cli(spec).output.startswith(f"{spec}:3:25:")


def test_a_5000_digit_version_is_located(tmp_path: Path) -> None:
    spec = write(tmp_path, "seqc " + "9" * 5000 + "\n")
    err = check_library(spec)
    assert err.span is not None and (err.span.line, err.span.col) == (1, 6)


# ------------------------------------------------------------------------- bytes, files, imports


@pytest.mark.parametrize(
    "data",
    [
        b"seqc 1\n# caf\xe9\n",
        b"\xff\xfe" + "seqc 1\n".encode("utf-16-le"),
        b"seqc 1\n\xed\xa0\x80\n",
    ],
    ids=["latin-1", "utf-16", "surrogate"],
)
def test_bytes_that_are_not_utf8_are_a_file_error(data: bytes, tmp_path: Path) -> None:
    spec = write(tmp_path, data)
    assert check_library(spec).code == "not-utf8"
    assert "file error [not-utf8]" in check_cli(spec).output


def test_bytes_that_are_not_utf8_are_located_at_line_and_column(tmp_path: Path) -> None:
    """An editor underlines a range: `byte 12` is a place, but not one it can show."""
    spec = write(tmp_path, b"seqc 1\n# caf\xe9\n")
    err = check_library(spec)
    assert err.span is not None and (err.span.line, err.span.col) == (2, 6)


def test_a_byte_order_mark_is_skipped(tmp_path: Path) -> None:
    """Some Windows editors start a UTF-8 file with a BOM: it is not part of the spec."""
    spec = write(tmp_path, b"\xef\xbb\xbfseqc 1\nlayer L() { n = Nrom(8) }\n")
    err = check_library(spec)
    assert err.code == "unknown-kind" and err.span is not None and err.span.line == 2


def test_a_directory_as_the_spec_is_a_file_error(tmp_path: Path) -> None:
    folder = tmp_path / "specs.seq"
    folder.mkdir()
    assert check_library(folder).code == "is-dir"
    assert "file error [is-dir]" in check_cli(folder).output


@pytest.mark.parametrize(
    "data",
    [bytes(range(256)) * 16, b"\x7fELF\x02\x01\x01" + b"\x00" * 64, b"\x00" * 1000],
    ids=["all-bytes", "elf-header", "zeros"],
)
def test_a_binary_file_as_the_spec_is_an_error_that_quotes_nothing(
    data: bytes, tmp_path: Path
) -> None:
    spec = write(tmp_path, data)
    err = check_library(spec)
    assert err.code in ("not-utf8", "unexpected-character")
    output = check_cli(spec).output  # a .seq file is quoted, its control characters as `?`
    assert all(c.isprintable() or c == "\n" for c in output)


def test_an_import_outside_the_tree_is_refused_at_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SEQC_PATH, raising=False)  # conftest admits pytest's folders
    (tmp_path / "library.seq").write_text("seqc 1\n")
    project = tmp_path / "project"
    (project / "specs").mkdir(parents=True)
    (project / "seqc.toml").write_text("")
    spec = write(project / "specs", 'seqc 1\n\nimport "../../library.seq"\n')
    err = check_library(spec)
    assert err.code == "import-outside"
    assert err.span is not None and (err.span.line, err.span.col) == (3, 1)
    output = check_cli(spec).output
    assert output.startswith(f"{spec}:3:1: resolve error [import-outside]")
    assert "SEQC_PATH" in output  # says how to allow a library folder


def test_an_excerpt_after_a_unicode_line_separator_shows_the_right_line(tmp_path: Path) -> None:
    """Lark counts lines by "\\n" only; `str.splitlines` also splits at U+2028, U+0085, form
    feeds, ..., so the excerpt showed another line than the one the error names."""
    spec = write(tmp_path, "seqc 1\n# a\u2028b\u0085c\x0cd\nlayer L() { n = Nrom(8) }\n")
    err = check_library(spec)
    assert err.span is not None and err.span.line == 3
    assert "n = Nrom(8)" in err.render()
