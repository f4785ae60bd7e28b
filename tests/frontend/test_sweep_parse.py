"""The `sweep` declaration as text: parsed into the IR with spans, printed back by `seqc fmt`
with its comments, cached by the parse cache, described by `seqc schema`.

Why: a sweep is written and reformatted like any other declaration; `fmt` dropping a comment in
a `space { }` block, or a span pointing at the wrong line, would be found here, not by a user.
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from seqc.cli import app
from seqc.spec import ir
from seqc.spec.parser import parse_file, parse_text
from seqc.spec.printer import format_spec

# `sweep` on line 3, `space {` on line 9 (its first path at column 5), `sampler` on line 14.
SWEEP = """\
seqc 1

sweep lm.shakespeare.lr {
  "Peak learning rate and dropout."
  # the base
  experiment = lm.shakespeare.quick
  metric = dev.perplexity  # lower is better
  trials = 16
  space {
    train.optimizer.lr.peak = loguniform(1e-4, 1e-2)  # a log scale
    # depth
    lm.model.layers = choice([2, 3, 4])
  }
  sampler = tpe(seed = 0)
  pruner = asha(min_steps = 100, reduction = 3)
}
"""


def test_a_sweep_parses_into_its_declaration_with_spans() -> None:
    spec = parse_text(SWEEP, "s.seq")
    [decl] = spec.decls
    assert isinstance(decl, ir.SweepDecl)
    assert decl.decl == "sweep" and decl.name == "lm.shakespeare.lr"
    assert (decl.span.line, decl.span.col, decl.span.end_line) == (3, 1, 16)
    assert decl.body.doc == "Peak learning rate and dropout."
    fields = [".".join(i.path) if isinstance(i, ir.Assign) else i.name for i in decl.body.items]
    assert fields == ["experiment", "metric", "trials", "space", "sampler", "pruner"]
    space = decl.body.items[3]
    assert isinstance(space, ir.Block) and (space.span.line, space.span.col) == (9, 3)
    first, second = space.body.items
    assert first.path == ("train", "optimizer", "lr", "peak")
    assert (first.span.line, first.span.col) == (10, 5)
    assert isinstance(first.value, ir.Call) and (first.value.span.col) == 31
    assert second.comments == ("# depth",) and first.trailing == "# a log scale"


def test_fmt_prints_a_sweep_back_with_its_comments_and_is_idempotent() -> None:
    spec = parse_text(SWEEP, "s.seq")
    assert format_spec(spec) == SWEEP  # already canonical: nothing moves, no comment is lost
    messy = SWEEP.replace("trials = 16", "trials=16").replace("  space {", "  space   {")
    messy = messy.replace("choice([2, 3, 4])", "choice([2,3,4])")
    assert format_spec(parse_text(messy, "s.seq")) == SWEEP


def test_the_cli_formats_a_sweep_in_place(tmp_path: Path) -> None:
    path = tmp_path / "s.seq"
    path.write_text(SWEEP.replace("trials = 16", "trials=16"))
    runner = CliRunner()
    assert runner.invoke(app, ["fmt", str(path), "--check"]).exit_code == 1
    assert runner.invoke(app, ["fmt", str(path), "--write"]).exit_code == 0
    assert path.read_text() == SWEEP


def test_sweep_is_a_keyword_only_where_a_declaration_starts() -> None:
    """Lark's contextual lexer: `sweep` stays a name for an input, a param, a path."""
    text = """seqc 1
input sweep { train = text("t.txt") }
model M(sweep: int = 2) {
  e = Embedding(8, sweep)
  forward (x: int32[B, T]) -> float32[B, T, sweep] { return e(x) }
}
experiment sweep.x { sweep.model.d = 1 }
sweep sweep.y { experiment = sweep.x }
"""
    spec = parse_text(text, "k.seq")
    assert [d.decl for d in spec.decls] == ["input", "layer", "experiment", "sweep"]
    assert spec.decls[0].name == "sweep" and spec.decls[3].name == "sweep.y"


def test_the_parse_cache_gives_back_the_sweep_it_stored(tmp_path: Path) -> None:
    path = tmp_path / "s.seq"
    path.write_text(SWEEP)
    first = parse_file(path)  # parsed, then stored (the tests' cache is on, in a temp folder)
    again = parse_file(path)  # from the cache
    assert again.model_dump() == first.model_dump()
    assert isinstance(again.decls[0], ir.SweepDecl)


def test_the_schema_describes_the_sweep_declaration() -> None:
    result = CliRunner().invoke(app, ["schema"])
    assert result.exit_code == 0, result.output
    schema = json.loads(result.output)
    assert "SweepDecl" in schema["$defs"]
    assert schema["$defs"]["SweepDecl"]["properties"]["decl"]["const"] == "sweep"
