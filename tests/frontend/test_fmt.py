"""`seqc fmt`: canonical text that means exactly what the user wrote, comments included.

Why: a formatter runs on save, on every file, without anyone reading its diff. If it changed a
parse (a lost pair of parentheses), dropped a comment, or never settled (each run a new diff), it
would corrupt specs silently. So every case here checks three things through `_fmt`: the exact
canonical text, that it parses back to the same IR as the input (spans aside), and that
formatting it again changes nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from seqc.cli import app
from seqc.spec import ir
from seqc.spec.ir import without_spans
from seqc.spec.parser import _comments, parse_text
from seqc.spec.printer import WIDTH, format_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXAMPLE_FILES = sorted(EXAMPLES.glob("**/*.seq"))
FILE = "case.seq"
runner = CliRunner()


def _fmt(text: str) -> str:
    """Format `text`, asserting the result has the same IR and is a fixed point."""
    spec = parse_text(text, FILE)
    out = format_spec(spec)
    again = parse_text(out, FILE)
    assert without_spans(again) == without_spans(spec), out
    assert format_spec(again) == out
    return out


def _value(text: str) -> str:
    """Format one expression, written as the value of `v` in an input body."""
    out = _fmt(f"seqc 1\ninput t {{\n  v = {text}\n}}\n")
    prefix, suffix = "seqc 1\n\ninput t {\n  v = ", "\n}\n"
    assert out.startswith(prefix) and out.endswith(suffix), out
    return out[len(prefix) : -len(suffix)]


def _only_value(text: str) -> ir.Expr:
    spec = parse_text(f"seqc 1\ninput t {{\n  v = {text}\n}}\n", FILE)
    decl = spec.decls[0]
    assert isinstance(decl, ir.InputDecl)
    item = decl.body.items[0]
    assert isinstance(item, ir.Assign)
    return item.value


# ------------------------------------------------------------------------------------ examples


def test_examples_are_found() -> None:
    """Guard: the parametrized tests below would pass vacuously without example files."""
    assert len(EXAMPLE_FILES) >= 2


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.relative_to(EXAMPLES).as_posix())
def test_example_round_trips(path: Path) -> None:
    """Every example formats to the same program, and formatting is idempotent on it."""
    text = path.read_text(encoding="utf-8")
    name = path.relative_to(EXAMPLES).as_posix()
    spec = parse_text(text, name)
    out = format_spec(spec)
    again = parse_text(out, name)
    assert without_spans(again) == without_spans(spec)
    assert format_spec(again) == out
    assert sorted(map(str, _comments(out))) == sorted(map(str, _comments(text)))  # none lost


# ------------------------------------------------------------------------------------ comments


def test_comments_everywhere_are_kept() -> None:
    src = """# header one
# header two
seqc 1  # on the header line

# before the import
import "other.seq"  # after the import

# leading comment
input data {  # on the open brace
  # first in body
  train = text("a.txt")  # trailing
  buckets = {  # on the map's brace
    # inside the map
    32: 128,  # after an entry
    64: 64,
    # before the map's close
  }
  # before the closing brace
}  # after the closing brace

# at the end of the file
"""
    out = _fmt(src)
    assert (
        out
        == """# header one
# header two
seqc 1

# on the header line

# before the import
import "other.seq"  # after the import

# leading comment
input data {
  # on the open brace
  # first in body
  train = text("a.txt")  # trailing
  # on the map's brace
  # inside the map
  # after an entry
  # before the map's close
  buckets = {32: 128, 64: 64}
  # before the closing brace
}  # after the closing brace

# at the end of the file
"""
    )


def test_comments_in_layers_and_forward() -> None:
    src = """seqc 1
# about the layer
layer L(d: int) {
  "Doc."
  # before a sub-layer
  lin = Linear(d, d)  # a sub-layer
  forward (x: float32[B, d]) -> float32[B, d] {  # on forward's brace
    # before a let
    y = lin(x)  # a let
    return y  # the return
    # after the return
  }  # after forward
  # end of the layer
}
"""
    assert (
        _fmt(src)
        == """seqc 1

# about the layer
layer L(d: int) {
  "Doc."
  # before a sub-layer
  lin = Linear(d, d)  # a sub-layer
  forward (x: float32[B, d]) -> float32[B, d] {
    # on forward's brace
    # before a let
    y = lin(x)  # a let
    return y  # the return
    # after the return
  }  # after forward
  # end of the layer
}
"""
    )


def test_a_comment_after_a_one_line_layer_stays_on_the_layer() -> None:
    """It is not taken by the last param, which would force the params onto many lines."""
    src = "seqc 1\n\nlayer G(d: int) {}  # note\n"
    assert _fmt(src) == src


def test_hash_in_a_string_is_not_a_comment() -> None:
    src = 'seqc 1\n\ninput t {\n  v = "not # a comment"  # a comment\n}\n'
    assert _fmt(src) == src


def test_blank_lines_between_statements_collapse_to_one() -> None:
    src = "seqc 1\ninput t {\n  a = 1\n\n\n\n  b = 2\n  c = 3\n}\n\n\n\ninput u {}\n"
    assert _fmt(src) == "seqc 1\n\ninput t {\n  a = 1\n\n  b = 2\n  c = 3\n}\n\ninput u {}\n"


# ------------------------------------------------------------------------------------ wrapping


def test_long_call_wraps_one_argument_per_line_with_trailing_comma() -> None:
    args = ", ".join(f"argument_{i} = {i}" for i in range(8))
    src = f"seqc 1\ninput t {{\n  train = text({args})\n}}\n"
    assert len(src.splitlines()[2]) > WIDTH
    lines = "".join(f"    argument_{i} = {i},\n" for i in range(8))
    assert _fmt(src) == f"seqc 1\n\ninput t {{\n  train = text(\n{lines}  )\n}}\n"


def test_short_call_written_over_lines_is_joined() -> None:
    src = 'seqc 1\ninput t {\n  train = text(\n    "a.txt",\n    lowercase = true,\n  )\n}\n'
    assert _fmt(src) == 'seqc 1\n\ninput t {\n  train = text("a.txt", lowercase = true)\n}\n'


def test_nested_call_wraps_only_where_needed() -> None:
    inner = ", ".join(f"p{i} = {i}" for i in range(30))
    out = _fmt(f"seqc 1\ninput t {{\n  v = outer(short(1), inner({inner}))\n}}\n")
    lines = out.splitlines()
    assert "    short(1)," in lines
    assert "    inner(" in lines
    assert "      p0 = 0," in lines
    assert all(len(line) <= WIDTH for line in lines)


def test_long_list_and_map_wrap() -> None:
    items = ", ".join(f'"item_number_{i}"' for i in range(10))
    out = _value(f"[{items}]")
    assert out.splitlines()[0] == "["
    assert out.splitlines()[1] == '    "item_number_0",'
    assert out.splitlines()[-1] == "  ]"
    pairs = ", ".join(f"key_number_{i}: {i}" for i in range(12))
    out = _value("{" + pairs + "}")
    assert out.splitlines()[1] == "    key_number_0: 0,"


# ------------------------------------------------------------------------------------ expressions


@pytest.mark.parametrize(
    ("src", "expected"),
    [
        ("-(a + b) ** 2", "-(a + b) ** 2"),
        ("a - (b - c)", "a - (b - c)"),
        ("(a - b) - c", "a - b - c"),
        ("(a * b) * c", "a * b * c"),
        ("a * (b * c)", "a * (b * c)"),
        ("a / (b * c)", "a / (b * c)"),
        ("a // (b % c)", "a // (b % c)"),
        ("(a + b) * c", "(a + b) * c"),
        ("a + (b * c)", "a + b * c"),
        ("2 ** -1", "2 ** -1"),
        ("2 ** (3 ** 4)", "2 ** 3 ** 4"),
        ("(2 ** 3) ** 4", "(2 ** 3) ** 4"),
        ("-(2 ** 2)", "-2 ** 2"),
        ("(-2) ** 2", "(-2) ** 2"),
        ("-(-a)", "--a"),
        ("a - -b", "a - -b"),
        ("(a.b)(c).d", "a.b(c).d"),
        ("(a + b).c", "(a + b).c"),
        ("(2).x", "(2).x"),
        ('(4 x gpu(memory = "1GiB")).n', '(4 x gpu(memory = "1GiB")).n'),
    ],
)
def test_precedence_and_parentheses(src: str, expected: str) -> None:
    assert _value(src) == expected


def test_parentheses_that_matter_change_the_tree() -> None:
    """Guard on the guard: the cases above would prove nothing if both spellings parsed alike."""
    left = _only_value("(a * b) * c")
    right = _only_value("a * (b * c)")
    assert isinstance(left, ir.BinOp) and isinstance(left.left, ir.BinOp)
    assert isinstance(right, ir.BinOp) and isinstance(right.right, ir.BinOp)
    assert without_spans(left) != without_spans(right)
    power = _only_value("-(a + b) ** 2")
    assert isinstance(power, ir.Neg) and isinstance(power.operand, ir.BinOp)


@pytest.mark.parametrize(
    ("src", "value"),
    [
        (r'"a\"b\\c\nd\te"', 'a"b\\c\nd\te'),
        (r'"\\n is not a newline"', "\\n is not a newline"),
        ('""', ""),
    ],
)
def test_strings_with_escapes(src: str, value: str) -> None:
    assert _value(src) == src
    v = _only_value(src)
    assert isinstance(v, ir.String) and v.value == value


def test_unknown_escape_keeps_its_value() -> None:
    out = _value(r'"a\qb"')
    assert out == r'"a\\qb"'
    again = _only_value(out)
    assert isinstance(again, ir.String) and again.value == "a\\qb"


@pytest.mark.parametrize("text", ["1e-3", "1_000", ".5", "2.", "1E5", "0.10", "3.0e+2", "007"])
def test_numbers_keep_their_text(text: str) -> None:
    assert _value(text) == text
    assert _value(f"[{text}, -{text}]") == f"[{text}, -{text}]"


def test_replicated_devices() -> None:
    assert _value('4 x gpu(memory = "16GiB")') == '4 x gpu(memory = "16GiB")'
    assert _value('4   x   gpu( memory="16GiB" )') == '4 x gpu(memory = "16GiB")'
    assert _value("[2 x cpu(), x]") == "[2 x cpu(), x]"  # `x` stays a usable name


# ------------------------------------------------------------------------------------ shapes


@pytest.mark.parametrize(
    ("src", "expected"),
    [
        ("input a {}", "input a {}"),
        ("input a {\n}", "input a {}"),
        ("task t { }", "task t {}"),
        ("experiment e.f extends e.g {}", "experiment e.f extends e.g {}"),
        ("experiment e { train { } }", "experiment e {\n  train {}\n}"),
        ("layer L {}", "layer L {}"),
        ("model M() {\n}", "model M() {}"),
        ("layer L {\n  forward () {\n  }\n}", "layer L {\n  forward () {}\n}"),
        ("input a {\n  # only a comment\n}", "input a {\n  # only a comment\n}"),
    ],
)
def test_empty_bodies(src: str, expected: str) -> None:
    assert _fmt(f"seqc 1\n{src}\n") == f"seqc 1\n\n{expected}\n"


FORWARD = (
    "layer L(d: int) {{\n  forward (x: float32[B, T, d]) -> {ret} {{\n    return {val}\n  }}\n}}"
)


@pytest.mark.parametrize(
    ("ret", "val"),
    [
        ("(float32[B], float32[B])", "x, x"),
        ("(float32[B])", "x"),
        ("float32[B, T, 4 * d]", "x"),
        ("float32[B, (T + 1) * 2, d - (d - 1)]", "x"),
    ],
)
def test_forward_returns(ret: str, val: str) -> None:
    src = "seqc 1\n\n" + FORWARD.format(ret=ret, val=val) + "\n"
    assert _fmt(src) == src


def test_parenthesized_single_return_is_remembered() -> None:
    with_parens = parse_text("seqc 1\n" + FORWARD.format(ret="(float32[B])", val="x"), FILE)
    without = parse_text("seqc 1\n" + FORWARD.format(ret="float32[B]", val="x"), FILE)
    a, b = with_parens.decls[0], without.decls[0]
    assert isinstance(a, ir.LayerDecl) and isinstance(b, ir.LayerDecl)
    assert a.forward is not None and a.forward.returns_parenthesized
    assert b.forward is not None and not b.forward.returns_parenthesized


def test_layer_params_over_lines_with_comments_stay_over_lines() -> None:
    src = """seqc 1

layer L(
  # the width
  d: int,  # model width
  heads: int = 4 "attention heads",
  ff: int = 4 * d,  # hidden width
) {
  forward (x: float32[B, T, d]) -> float32[B, T, d] {
    return x
  }
}
"""
    assert _fmt(src) == src


def test_comment_before_the_params_close_moves_into_the_body() -> None:
    src = "seqc 1\nlayer L(\n  d: int,\n  # last word on params\n) {\n  lin = Linear(d, d)\n}\n"
    assert _fmt(src) == (
        "seqc 1\n\nlayer L(d: int) {\n  # last word on params\n  lin = Linear(d, d)\n}\n"
    )


def test_layer_params_without_comments_are_joined_or_split_by_width() -> None:
    src = "seqc 1\nlayer L(\n  d: int,\n  heads: int = 4,\n) {}\n"
    assert _fmt(src) == "seqc 1\n\nlayer L(d: int, heads: int = 4) {}\n"
    params = ", ".join(f"param_number_{i}: int = {i}" for i in range(6))
    out = _fmt(f"seqc 1\nlayer L({params}) {{}}\n")
    assert out.splitlines()[2:4] == ["layer L(", "  param_number_0: int = 0,"]
    assert out.splitlines()[-1] == ") {}"


def test_long_param_default_wraps_at_the_params_indent() -> None:
    args = ", ".join(f"argument_{i}" for i in range(8))
    src = f'seqc 1\nlayer L(d: int = default_of({args}) "the d", e: int = 1) {{}}\n'
    lines = "".join(f"    argument_{i},\n" for i in range(8))
    assert _fmt(src) == (
        f'seqc 1\n\nlayer L(\n  d: int = default_of(\n{lines}  ) "the d",\n  e: int = 1,\n) {{}}\n'
    )


def test_repeat_and_semicolons() -> None:
    src = (
        "seqc 1\nlayer L(n: int) { b = repeat(n * 2) Linear(4, 4); }\n"
        "experiment e { a = 1; b = 2 }\n"
    )
    assert _fmt(src) == (
        "seqc 1\n\nlayer L(n: int) {\n  b = repeat(n * 2) Linear(4, 4)\n}\n\n"
        "experiment e {\n  a = 1\n  b = 2\n}\n"
    )


# ------------------------------------------------------------------------------------ CLI

UGLY = 'seqc 1\ninput data {  train=text( "a.txt" )  # the data\n}\n'
PRETTY = 'seqc 1\n\ninput data {\n  train = text("a.txt")  # the data\n}\n'


def test_cli_prints_the_canonical_text(tmp_path: Path) -> None:
    f = tmp_path / "a.seq"
    f.write_text(UGLY, encoding="utf-8")
    result = runner.invoke(app, ["fmt", str(f)])
    assert result.exit_code == 0, result.output
    assert result.stdout == PRETTY
    assert f.read_text(encoding="utf-8") == UGLY  # printing changes nothing on disk


def test_cli_check_exit_codes(tmp_path: Path) -> None:
    ugly, pretty = tmp_path / "ugly.seq", tmp_path / "pretty.seq"
    ugly.write_text(UGLY, encoding="utf-8")
    pretty.write_text(PRETTY, encoding="utf-8")
    result = runner.invoke(app, ["fmt", "--check", str(pretty)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["fmt", "--check", str(ugly)])
    assert result.exit_code == 1
    assert "would reformat" in result.stderr
    assert ugly.read_text(encoding="utf-8") == UGLY


def test_cli_write_rewrites_then_check_is_clean(tmp_path: Path) -> None:
    f = tmp_path / "a.seq"
    f.write_text(UGLY, encoding="utf-8")
    result = runner.invoke(app, ["fmt", "--write", str(f)])
    assert result.exit_code == 0, result.output
    assert f.read_text(encoding="utf-8") == PRETTY
    assert runner.invoke(app, ["fmt", "--check", str(f)]).exit_code == 0
    assert [p.name for p in tmp_path.iterdir()] == ["a.seq"]  # no temporary file left behind


def test_cli_write_through_a_symbolic_link_formats_its_target(tmp_path: Path) -> None:
    """The link was replaced by a formatted copy, and its target left unformatted."""
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "a.seq"
    target.write_text(UGLY, encoding="utf-8")
    link = tmp_path / "link.seq"
    link.symlink_to(target)
    result = runner.invoke(app, ["fmt", "--write", str(link)])
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and link.resolve() == target
    assert target.read_text(encoding="utf-8") == PRETTY
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["a.seq"]


def test_cli_write_leaves_a_file_with_a_syntax_error_untouched(tmp_path: Path) -> None:
    f = tmp_path / "bad.seq"
    broken = "seqc 1\ninput data {  train = \n}\n"
    f.write_text(broken, encoding="utf-8")
    result = runner.invoke(app, ["fmt", "--write", str(f)])
    assert result.exit_code == 2
    assert "parse error" in result.stderr
    assert "bad.seq:3:1" in result.stderr
    assert f.read_text(encoding="utf-8") == broken
    assert [p.name for p in tmp_path.iterdir()] == ["bad.seq"]


def test_cli_check_and_write_together_is_a_usage_error(tmp_path: Path) -> None:
    f = tmp_path / "a.seq"
    f.write_text(UGLY, encoding="utf-8")
    result = runner.invoke(app, ["fmt", "--check", "--write", str(f)])
    assert result.exit_code == 2
    assert f.read_text(encoding="utf-8") == UGLY
