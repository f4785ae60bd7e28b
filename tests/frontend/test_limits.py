"""The limits seqc keeps, and the errors a spec past them gets (README, "Trust and limits").

Each limit protects a later pass from input that is valid text but absurd in size: nesting
deep enough to exhaust Python's stack, a line of a megabyte, a graph of millions of ops. Past a
limit the user gets a located error with a stable code and exit code 2, never a traceback, a
hang or megabytes of output. The positions were counted from the generated text: in
`  x = [[[...`, the first `[` is column 7, and the experiment's own `{` is the first level.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from seqc.cli import app
from seqc.compiler.check import check_program
from seqc.compiler.graph import MAX_GRAPH_OPS
from seqc.compiler.graph_report import MAX_ROWS
from seqc.resolve.program import MAX_IMPORT_DEPTH, load_program
from seqc.spec.errors import EXCERPT_WIDTH, TEXT_WIDTH, SeqcError, too_deep
from seqc.spec.ir import Span
from seqc.spec.parser import MAX_NESTING, parse_text

runner = CliRunner()
N = 2 * MAX_NESTING
HEAD = "seqc 1\nexperiment e {\n"


def cli(*args: str | Path):
    return runner.invoke(app, [str(a) for a in args])


def assert_clean_failure(result, code: int = 2) -> None:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    assert "internal error" not in result.output


def caret_points_at(rendered: str) -> str:
    """The source character the first caret of a rendered error stands under."""
    lines = rendered.splitlines()
    at = next(i for i, line in enumerate(lines) if line.rstrip().endswith("^"))
    caret, source = lines[at], lines[at - 1]
    return source[caret.index("^")]


# ------------------------------------------------------------------------------------ nesting

# (id, the text nested n deep, line, col and the text at the caret for n = N)
NESTING = [
    ("list", lambda n: HEAD + "  x = " + "[" * n + "]" * n + "\n}\n", 3, 106, "["),
    ("map", lambda n: HEAD + "  x = " + "{a: " * n + "1" + "}" * n + "\n}\n", 3, 403, "{"),
    ("unary-minus", lambda n: HEAD + "  x = " + "-" * n + "1\n}\n", 3, 106, "-"),
    ("blocks", lambda n: HEAD + "a {" * n + "}" * n + "\n}\n", 3, 300, "{"),
    # Left-nested chains start every level at one column: the caret is on the level's operator.
    ("sum", lambda n: HEAD + "  x = 1" + "+1" * n + "\n}\n", 3, 208, "+"),
    ("calls", lambda n: HEAD + "  x = f" + "()" * n + "\n}\n", 3, 208, "("),
    ("attributes", lambda n: HEAD + "  x = a" + ".b" * n + "\n}\n", 3, 209, "b"),
    ("power", lambda n: HEAD + "  x = 2" + "**2" * n + "\n}\n", 3, 305, "*"),
]
IDS = [c[0] for c in NESTING]


@pytest.mark.parametrize(("nested", "line", "col", "at"), [c[1:] for c in NESTING], ids=IDS)
def test_nesting_past_the_limit_is_located(nested, line: int, col: int, at: str) -> None:
    with pytest.raises(SeqcError) as info:
        parse_text(nested(N), "main.seq")
    err = info.value
    assert (err.phase, err.code) == ("parse", "too-deep")
    assert err.span is not None and (err.span.line, err.span.col) == (line, col)
    rendered = err.render()
    assert rendered.startswith(f"main.seq:{line}:{col}: parse error [too-deep]: ")
    assert f"at most {MAX_NESTING} nested" in rendered
    assert caret_points_at(rendered) == at


@pytest.mark.parametrize("nested", [c[1] for c in NESTING], ids=IDS)
def test_cli_nesting_5000_deep_is_exit_2_at_its_line(nested, tmp_path: Path) -> None:
    spec = tmp_path / "deep.seq"
    spec.write_text(nested(5000))
    for command in ("check", "fmt", "list"):
        result = cli(command, spec)
        assert_clean_failure(result)
        assert f"{spec}:3:" in result.output and "parse error [too-deep]" in result.output
        assert len(result.output) < 2000  # a window of the line, not all of it


def test_nesting_just_inside_the_limit_works_in_every_pass(tmp_path: Path) -> None:
    depth = MAX_NESTING - 6  # the experiment's body and the `train.steps` path sit above it
    spec = tmp_path / "main.seq"
    spec.write_text(
        LM + f"experiment e {{ tasks = [lm]; train.steps = {'-' * (depth - depth % 2)}5 }}\n"
    )
    for args in (["check"], ["fmt", "--check"], ["show", "-e", "e"], ["show", "-e", "e", "--json"]):
        result = cli(args[0], spec, *args[1:])
        assert result.exit_code in (0, 1), result.output  # fmt --check: 1 is "would reformat"
    assert check_program(load_program(spec), "e")[0].get("train.steps") == 5


def test_set_value_nested_too_deep_is_located_on_the_command_line(tmp_path: Path) -> None:
    spec = tmp_path / "main.seq"
    spec.write_text(LM + "experiment e { tasks = [lm] }\n")
    result = cli("check", spec, "-e", "e", "--set", "train.steps=" + "-" * 300 + "5")
    assert_clean_failure(result)
    # `--set train.steps=` is 18 columns; the 101st `-` is past the limit
    assert "<command line>:1:119: parse error [too-deep]" in result.output


def test_import_chain_past_the_limit_is_located(tmp_path: Path) -> None:
    for i in range(MAX_IMPORT_DEPTH + 1):
        (tmp_path / f"f{i}.seq").write_text(f'seqc 1\nimport "f{i + 1}.seq"\n')
    (tmp_path / f"f{MAX_IMPORT_DEPTH + 1}.seq").write_text("seqc 1\n")
    with pytest.raises(SeqcError) as info:
        load_program(tmp_path / "f0.seq")
    err = info.value
    assert (err.phase, err.code) == ("resolve", "imports-too-deep")
    assert err.span is not None
    assert (Path(err.span.file).name, err.span.line, err.span.col) == (
        f"f{MAX_IMPORT_DEPTH - 1}.seq",
        2,
        1,
    )
    # one file fewer is fine
    (tmp_path / f"f{MAX_IMPORT_DEPTH - 1}.seq").write_text("seqc 1\n")
    assert len(load_program(tmp_path / "f0.seq").files) == MAX_IMPORT_DEPTH


# User layers nested thousands deep (no syntax nests) get exit code 2 and a `too-deep` error
# naming the spec: checked with the library's error and its line in `test_unbreakable.py`
# (`test_user_layers_thousands_deep_are_located_in_the_library_too`).


def test_recursion_fallback_points_at_the_deepest_span() -> None:
    deepest = Span(file="main.seq", line=7, col=3, end_line=7, end_col=9)

    def recurse(depth: int) -> None:
        span = deepest if depth > 50 else None  # noqa: F841  (read from the frame)
        recurse(depth + 1)

    try:
        recurse(0)
    except RecursionError as e:
        err = too_deep(e, "main.seq")
    assert (err.code, err.span) == ("too-deep", deepest)


# ------------------------------------------------------------------------------------ long lines

MEGABYTE = 1_000_000


@pytest.mark.parametrize("where", ["end", "start"])
def test_error_on_a_megabyte_line_shows_a_window_around_the_caret(
    where: str, tmp_path: Path
) -> None:
    filler = '"' + "a" * MEGABYTE + '"'
    body = f"x = {filler} @" if where == "end" else f"@ x = {filler}"
    spec = tmp_path / "long.seq"
    spec.write_text(f"seqc 1\nexperiment e {{ {body} }}\n")
    with pytest.raises(SeqcError) as info:
        parse_text(spec.read_text(), "long.seq")
    rendered = info.value.render()
    assert info.value.code == "unexpected-character"
    assert len(rendered) < 3 * EXCERPT_WIDTH + 500
    assert caret_points_at(rendered) == "@"
    source = next(line for line in rendered.splitlines() if line.startswith("    2 | "))
    assert len(source) <= len("    2 | ") + EXCERPT_WIDTH + 6  # and `...` at the cut ends
    assert ("..." in source[:12]) == (where == "end")
    result = cli("check", spec)
    assert_clean_failure(result)
    assert len(result.output) < 3 * EXCERPT_WIDTH + 500
    assert caret_points_at(result.output) == "@"


def test_a_megabyte_value_is_clipped_in_found(tmp_path: Path) -> None:
    spec = tmp_path / "main.seq"
    huge = "a" * MEGABYTE
    spec.write_text(
        'seqc 1\ninput data { train = text("t.txt"); tokenizer = chars()\n'
        f'  max_length = "{huge}"\n}}\n'
    )
    result = cli("check", spec)
    assert_clean_failure(result)
    assert "check error" in result.output
    assert len(result.output) < 2 * TEXT_WIDTH + 1000
    assert "characters in all" in result.output


def test_a_tab_before_the_error_keeps_the_caret_in_line(tmp_path: Path) -> None:
    spec = tmp_path / "tabs.seq"
    spec.write_text('seqc 1\ninput data {\ttrain = text("t.txt"); tokenizer = charz() }\n')
    result = cli("check", spec)
    assert_clean_failure(result)
    assert caret_points_at(result.output) == "c"
    assert "tabs.seq:2:49:" in result.output


# ------------------------------------------------------------------------------------ literal text

MARKUP = ":smile: [bold]x[/bold] [red]"


def test_error_excerpt_prints_markup_and_emoji_codes_literally(tmp_path: Path) -> None:
    folder = tmp_path / "[bold]:smile:"
    folder.mkdir()
    spec = folder / "[red]spec.seq"
    spec.write_text(f'seqc 1\ninput data {{ train = text("{MARKUP}"); tokenizer = charz() }}\n')
    result = cli("check", spec)
    assert_clean_failure(result)
    assert f"{spec}:2:" in result.output  # the file name as it is
    assert f'text("{MARKUP}")' in result.output  # the line as it is
    assert "\N{SMILING FACE WITH OPEN MOUTH AND SMILING EYES}" not in result.output
    assert caret_points_at(result.output) == "c"  # `charz`, after the markup-looking text


def test_list_and_show_print_user_text_literally(tmp_path: Path) -> None:
    folder = tmp_path / "[bold]"
    folder.mkdir()
    spec = folder / ":smile:.seq"
    spec.write_text(LM + f'experiment e {{ tasks = [lm]; description = "{MARKUP}" }}\n')
    listed = cli("list", spec)
    assert listed.exit_code == 0, listed.output
    assert f"experiments in {spec}" in listed.output
    assert MARKUP in listed.output
    shown = cli("show", spec, "-e", "e", "--provenance")
    assert shown.exit_code == 0, shown.output
    assert MARKUP in shown.output
    assert f"{spec}:8:" in shown.output  # provenance names the file as it is
    checked = cli("check", spec)
    assert checked.output.startswith(f"ok {spec}:")


def test_control_characters_in_a_spec_never_reach_the_terminal(tmp_path: Path) -> None:
    spec = tmp_path / "esc.seq"
    spec.write_text('seqc 1\ninput data { train = text("\x1b[2J\x07"); tokenizer = charz() }\n')
    result = cli("check", spec)
    assert_clean_failure(result)
    assert "\x1b" not in result.output and "\x07" not in result.output
    assert caret_points_at(result.output) == "c"


# ------------------------------------------------------------------------------------ graph size

LM = textwrap.dedent(
    """\
    seqc 1
    input data { train = text("t.txt"); tokenizer = chars(); max_length = 16 }
    model M(vocab: int, d: int = 8) {
      embed = Embedding(vocab, d)
      forward (ids: int32[B, T]) -> float32[B, T, d] { return embed(ids) }
    }
    task lm { input = data; model = M(vocab = 5) }
    """
)

REPEATS = """\
seqc 1
input data {{ train = text("t.txt"); tokenizer = chars(); max_length = 16 }}
layer Block(d: int) {{
  norms = repeat({inner}) LayerNorm(d)
  forward (x: float32[B, T, d]) -> float32[B, T, d] {{ return norms(x) }}
}}
model M(vocab: int, d: int = 8) {{
  embed = Embedding(vocab, d)
  blocks = repeat({outer}) Block(d)
  forward (ids: int32[B, T]) -> float32[B, T, d] {{ return blocks(embed(ids)) }}
}}
task lm {{ input = data; model = M(vocab = 5) }}
experiment e {{ tasks = [lm] }}
"""


def test_a_graph_past_the_limit_is_refused_at_the_repeat(tmp_path: Path) -> None:
    """2,000 blocks of 60 layer norms (3 ops each): 360,000 ops, foreseen from the first block."""
    spec = tmp_path / "big.seq"
    spec.write_text(REPEATS.format(inner=60, outer=2000))
    result = cli("show", spec, "-e", "e", "--graph")
    assert_clean_failure(result)
    assert f"{spec}:9:3: check error [graph-too-large]" in result.output
    assert f"at most {MAX_GRAPH_OPS:,} ops" in result.output


def test_show_graph_table_stops_at_max_rows(tmp_path: Path) -> None:
    spec = tmp_path / "wide.seq"
    spec.write_text(REPEATS.format(inner=1, outer=500))
    result = cli("show", spec, "-e", "e", "--graph")
    assert result.exit_code == 0, result.output
    rows = result.output.split("activations KiB")[1].strip().splitlines()
    assert len(rows) == MAX_ROWS  # <model>, embed, blocks.0 .. blocks.36, and the rest summed
    assert rows[-2].split()[0] == "blocks.36"
    assert rows[-1].split()[:5] == ["...", "463", "more", "layers", "1389"]  # 463 x 3 ops


# ------------------------------------------------------------------------------------ files


@pytest.mark.skipif(sys.platform == "win32", reason="symlinks")
def test_root_spec_that_is_a_symlink_loop_is_a_file_error(tmp_path: Path) -> None:
    loop = tmp_path / "loop.seq"
    loop.symlink_to(loop)
    result = cli("check", loop)
    assert_clean_failure(result)
    assert "file error" in result.output and str(loop) in result.output


def test_nested_repeats_are_refused_from_their_first_copy(tmp_path: Path) -> None:
    """`repeat(10000)` of a layer holding `repeat(100)` would build a million layers: refused at
    the outer count, after one copy (fast), with both numbers."""
    spec = tmp_path / "nested.seq"
    spec.write_text(
        textwrap.dedent(
            """\
            seqc 1
            input data { train = text("t.txt"); tokenizer = chars() }
            layer Inner(d: int) {
              lins = repeat(100) Linear(d, d)
              forward (x: float32[B, T, d]) -> float32[B, T, d] { return lins(x) }
            }
            model M(vocab: int, d: int = 8) {
              embed = Embedding(vocab, d)
              blocks = repeat(10000) Inner(d)
              out = Softmax(vocab, d)
              forward (ids: int32[B, T]) -> float32[B, T, vocab] {
                return out(blocks(embed(ids)))
              }
            }
            task t { input = data; model = M(vocab = 11) }
            experiment e { tasks = [t] }
            """
        )
    )
    result = CliRunner().invoke(app, ["check", str(spec)])
    assert result.exit_code == 2, result.output
    assert "graph-too-large" in result.output and "10,000 copies of 102" in result.output
    assert "nested.seq:9:19" in result.output
