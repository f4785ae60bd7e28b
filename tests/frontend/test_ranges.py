"""Values are checked before anything runs: ranges, relations and bounded arithmetic.

Why: `d = 0`, `dropout = 1.5`, `heads = 3` with `d = 256` or `lr = 1e999` used to pass
`seqc check` and fail minutes into a run (a ZeroDivisionError, NaN probabilities, a loss that
drifts to NaN), and `--set train.steps=9**9**9` hung it. The tables in test_errors.py pin each
of those errors' code and line:col; the tests here cover the pieces behind them: `Range` and
ranged types, the limits every value meets (int32, finite floats), bounded integer arithmetic,
the range syntax through `seqc fmt`, where an error points when a value travels through model
params into a layer, and that nothing the examples use is rejected.
"""

from __future__ import annotations

import math
import textwrap
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from seqc.cli import app
from seqc.compiler.check import check_program
from seqc.resolve.conform import Context, conform
from seqc.resolve.experiment import resolve
from seqc.resolve.program import load_program
from seqc.resolve.raw import Raw, evaluate
from seqc.spec.errors import CheckError, SeqcError
from seqc.spec.ir import without_spans
from seqc.spec.kinds import param
from seqc.spec.parser import parse_expr, parse_text
from seqc.spec.printer import format_spec
from seqc.spec.types import (
    FLOAT,
    FRACTION,
    INT,
    NON_NEGATIVE,
    POSITIVE,
    SIZE,
    STR,
    Range,
    between,
    kind,
    optional,
    union,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*/*.seq"))
SHAKESPEARE = ROOT / "examples" / "lm" / "shakespeare.seq"

# ------------------------------------------------------------------------------------ Range


@pytest.mark.parametrize(
    ("range_", "inside", "outside", "text"),
    [
        (POSITIVE, [1, 0.5, 2**40], [0, -1, -0.0], "> 0"),
        (NON_NEGATIVE, [0, 3.5], [-1, -1e-9], ">= 0"),
        (FRACTION, [0, 0.999], [1, 1.5, -0.1], "in [0, 1)"),
        (between(0, 1, low_open=True), [1, 1e-9], [0, 1.01], "in (0, 1]"),
        (Range(high=10, high_open=True), [-5, 9], [10, 11], "< 10"),
        (Range(0, 2**31, high_open=True), [0, 2**31 - 1], [2**31], "in [0, 2**31)"),
    ],
)
def test_range_contains_and_prints(
    range_: Range, inside: list[float], outside: list[float], text: str
) -> None:
    assert all(v in range_ for v in inside)
    assert not any(v in range_ for v in outside)
    assert str(range_) == text
    assert not range_.empty


def test_an_empty_range_is_known() -> None:
    assert Range(1, 0).empty
    assert Range(1, 1, low_open=True).empty
    assert not Range(1, 1).empty


def test_a_range_refines_numbers_through_unions() -> None:
    assert str(INT.within(POSITIVE)) == "int > 0"
    assert str(optional(INT).within(NON_NEGATIVE)) == "int >= 0 | none"
    assert str(union(FLOAT, kind("schedule")).within(NON_NEGATIVE)) == "float >= 0 | schedule"
    assert str(SIZE.within(POSITIVE)) == "size > 0"
    with pytest.raises(ValueError, match="a range applies to int, float and size"):
        STR.within(POSITIVE)
    assert str(param("rate", FLOAT, 0.0, "A rate.", range=FRACTION).type) == "float in [0, 1)"


def test_a_range_is_not_a_different_type() -> None:
    """Static checks compare types without ranges: `d: int` may be passed to `int > 0`."""
    assert INT.within(POSITIVE) == INT
    assert hash(INT.within(POSITIVE)) == hash(INT)


# ------------------------------------------------------------------------------------ limits


@pytest.mark.parametrize(
    ("value", "type_", "code"),
    [
        (2**31 - 1, INT, None),
        (-(2**31), INT, None),
        (2**31, INT, "out-of-range"),
        (-(2**31) - 1, INT, "out-of-range"),
        (10**400, INT, "out-of-range"),
        (1e308, FLOAT, None),
        (math.inf, FLOAT, "not-finite"),
        (-math.inf, FLOAT, "not-finite"),
        (math.nan, FLOAT, "not-finite"),
        (10**400, FLOAT, "not-finite"),
        ("16GiB", SIZE, None),
        (2**63 - 1, SIZE, None),
        (2**63, SIZE, "out-of-range"),
        ("1e400GiB", SIZE, "bad-size"),
        ("nan GB", SIZE, "bad-size"),
        (0, INT.within(POSITIVE), "out-of-range"),
        (0.0, FLOAT.within(FRACTION), None),
        (1.0, FLOAT.within(FRACTION), "out-of-range"),
        (None, optional(INT.within(POSITIVE)), None),
        (0, optional(INT.within(POSITIVE)), "out-of-range"),
    ],
)
def test_every_value_meets_its_limits(value: object, type_, code: str | None) -> None:
    """Beyond any range: ints fit int32, floats are finite, sizes fit int64 bytes."""
    raw = Raw(value)
    if code is None:
        conform(raw, type_, Context())
        return
    with pytest.raises(CheckError) as info:
        conform(raw, type_, Context())
    assert info.value.code == code


def test_a_huge_int_is_shown_by_its_digit_count() -> None:
    with pytest.raises(CheckError) as info:
        conform(Raw(10**400), INT, Context(), "`train.steps`")
    err = info.value
    assert err.message == "`train.steps` does not fit in 32 bits"
    assert (err.expected, err.found) == (
        "an int in [-2**31, 2**31) (int32)",
        "an int of 401 digits",
    )


# ------------------------------------------------------------------------------------ arithmetic


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("10 ** 4299", 10**4299),  # 4,300 digits: the most there may be
        ("2 ** -100000", 0.0),  # a negative power is a float, computed at once
        ("(10 ** 2000) * (10 ** 2000)", 10**4000),
        ("1e308 * 10", math.inf),  # floats may overflow here; conform rejects inf
    ],
)
def test_arithmetic_within_bounds(text: str, value: object) -> None:
    assert evaluate(parse_expr(text, "<test>")).value == value


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("9 ** 9 ** 9", "9 ** 9 ** 9"),
        ("(-9) ** 9 ** 9", "(-9) ** 9 ** 9"),
        ("10 ** 4300", "10 ** 4300"),
        ("(10 ** 4000) * (10 ** 4000)", "10 ** 4000 * 10 ** 4000"),
        ("7 ** 10 ** 8", "7 ** 10 ** 8"),
    ],
)
def test_integer_arithmetic_is_bounded(text: str, shown: str) -> None:
    """Each fails at once, naming the expression, instead of computing for minutes."""
    start = time.perf_counter()
    with pytest.raises(CheckError) as info:
        evaluate(parse_expr(text, "<test>"))
    assert time.perf_counter() - start < 1.0
    err = info.value
    assert err.code == "overflow"
    assert err.message == f"`{shown}` is too large to compute"
    assert err.expected == "integer arithmetic of at most 4,300 digits"


# ------------------------------------------------------------------------------------ syntax


def _layer(params: str) -> str:
    return (
        f"seqc 1\n\nlayer L({params}) {{\n"
        "  forward (x: float32[B, d]) -> float32[B, d] {\n    return x\n  }\n}\n"
    )


@pytest.mark.parametrize(
    ("written", "canonical"),
    [
        ('d: int>0=256 "width"', 'd: int > 0 = 256 "width"'),
        ("p: float in [0,1) = 0.1", "p: float in [0, 1) = 0.1"),
        ("q: float <= -1e-3", "q: float <= -1e-3"),
        ("r: int in (-2, 3]", "r: int in (-2, 3]"),
        ("s: float >= 1_000", "s: float >= 1_000"),
        ("t: int < 10 = 4", "t: int < 10 = 4"),
        ("in: int in (0, 1]", "in: int in (0, 1]"),  # `in` stays usable as a name
    ],
)
def test_range_syntax_formats_back(written: str, canonical: str) -> None:
    """`seqc fmt` prints a range as written (one comparison or an interval), same IR."""
    spec = parse_text(_layer(written), "case.seq")
    out = format_spec(spec)
    assert out == _layer(canonical)
    again = parse_text(out, "case.seq")
    assert without_spans(again) == without_spans(spec)
    assert format_spec(again) == out


def test_range_syntax_keeps_comments() -> None:
    text = textwrap.dedent(
        """\
        seqc 1

        model M(
          # the width
          d: int > 0 = 256 "model width",  # at least one
          dropout: float in [0, 1) = 0.1,
        ) {
          forward (x: float32[B, d]) -> float32[B, d] {
            return x
          }
        }
        """
    )
    assert format_spec(parse_text(text, "case.seq")) == text


# ------------------------------------------------------------------------------------ spans

# A layer whose heads are written in its body and whose width comes from its model.
NESTED = """\
seqc 1
input data { train = text("t.txt"); tokenizer = chars() }
layer Block(d: int) {
  attn = SelfAttention(d, 3)
  forward (x: float32[B, T, d]) -> float32[B, T, d] { return attn(x) }
}
model M(vocab: int, d: int = 96) {
  embed = Embedding(vocab, d, padding_id = 0)
  block = Block(d)
  forward (ids: int32[B, T]) -> float32[B, T, d] { return block(embed(ids)) }
}
task lm { input = data; model = M(vocab = input.vocab_size) }
experiment ok { tasks = [lm] }
experiment wide { tasks = [lm]; lm.model.d = 256 }
"""


def _spec(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "main.seq"
    path.write_text(text)
    return path


def _where(err: SeqcError) -> tuple[str, int, int]:
    assert err.span is not None
    return Path(err.span.file).name, err.span.line, err.span.col


def test_a_relation_waits_for_the_values_of_params(tmp_path: Path) -> None:
    """`SelfAttention(d, 3)` is fine for d = 96 and an error for d = 256: at the `3` that
    breaks it, with a note at the line that set d."""
    program = load_program(_spec(tmp_path, NESTED))
    check_program(program, "ok")
    with pytest.raises(SeqcError) as info:
        check_program(program, "wide")
    err = info.value
    assert (err.code, _where(err)) == ("bad-relation", ("main.seq", 4, 27))
    assert err.found == "d = 256, heads = 3 (256 % 3 = 1)"
    note = err.notes[0]
    assert (note.span.line, note.span.col, note.message) == (14, 46, "`d` = 256 is set here")


def test_a_list_param_reaches_a_layer_and_its_items_are_checked(tmp_path: Path) -> None:
    """A model's `list[float]` param given to a layer's list param: bound item by item (it was
    an internal error: the items were not values the checker could read), and an item out of
    the layer's range is an error at the line that set it."""
    text = NESTED.replace(
        "model M(vocab: int, d: int = 96) {",
        "model M(vocab: int, d: int = 96, warp: list[float] = [0.9, 1.1]) {\n"
        "  mel = LogMelFilterbank(16000, 40, vtlp = warp)",
    ).replace(
        "experiment wide {",
        "experiment odd { tasks = [lm]; lm.model.warp = [0.9, 2.0] }\nexperiment wide {",
    )
    program = load_program(_spec(tmp_path, text))
    check_program(program, "ok")
    model = resolve(program, "ok").models["lm"]
    (mel,) = [child for child in model.children if child.path.endswith("mel")]
    assert list(mel.args["vtlp"]) == [0.9, 1.1]
    with pytest.raises(SeqcError) as info:
        check_program(program, "odd")
    assert info.value.code == "out-of-range" and _where(info.value)[1] == 15  # `odd`


def test_head_dim_lifts_the_relation(tmp_path: Path) -> None:
    text = NESTED.replace("SelfAttention(d, 3)", "SelfAttention(d, 3, head_dim = 64)")
    check_program(load_program(_spec(tmp_path, text)), "wide")


def test_data_sizes_are_checked_once_known(tmp_path: Path) -> None:
    """A character vocabulary's size is a symbol until the data is read: skipped by `check`
    (`padding_id < vocab` too), checked when a run resolves with the real figure."""
    program = load_program(_spec(tmp_path, NESTED))
    check_program(program, "ok")
    with pytest.raises(SeqcError) as info:
        resolve(program, "ok", symbols={"data.vocab_size": 0})
    err = info.value
    assert (err.code, _where(err)) == ("out-of-range", ("main.seq", 12, 43))  # input.vocab_size
    assert err.message == "`Embedding.vocab` must be > 0"


def test_heads_through_the_example_blocks() -> None:
    """The issue's case: `heads = 3` with `d = 256`, set on the command line, found by `check`
    in the imported CausalBlock, reported at the `3`, with d's line and the attention call."""
    program = load_program(SHAKESPEARE)
    with pytest.raises(SeqcError) as info:
        check_program(program, "lm.shakespeare.tiny", ["lm.model.heads=3"])
    err = info.value
    assert (err.phase, err.code, _where(err)) == (
        "check",
        "bad-relation",
        ("<command line>", 1, 22),
    )
    assert [(Path(n.span.file).name, n.span.line) for n in err.notes] == [
        ("shakespeare.seq", 19),  # d: int = 256
        ("transformer.seq", 50),  # attn = SelfAttention(d, heads, causal = true, ...)
    ]
    check_program(program, "lm.shakespeare.tiny", ["lm.model.heads=8"])


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_the_examples_are_within_every_range(path: Path) -> None:
    check_program(load_program(path))


# ------------------------------------------------------------------------------------ CLI

runner = CliRunner()


@pytest.mark.parametrize(
    ("override", "where", "code"),
    [
        ("lm.model.heads=3", "<command line>:1:22", "bad-relation"),
        ("lm.model.dropout=1.5", "<command line>:1:24", "out-of-range"),
        ("train.optimizer.lr=1e999", "<command line>:1:26", "not-finite"),
        ("train.steps=9**9**9", "<command line>:1:19", "overflow"),
    ],
)
def test_cli_check_refuses_values_out_of_range(override: str, where: str, code: str) -> None:
    start = time.perf_counter()
    result = runner.invoke(
        app, ["check", str(SHAKESPEARE), "-e", "lm.shakespeare.tiny", "--set", override]
    )
    assert result.exit_code == 2, result.output
    assert f"{where}: check error [{code}]" in result.output
    assert "Traceback" not in result.output
    assert time.perf_counter() - start < 30
