"""A sweep through the tools that read specs: `seqc check`, `list`, `show -s`, and the editor's
hover, go-to-definition, outline, diagnostics, quick fixes and completion.

Why: a sweep is declared to be read before it runs: `show -s` is where a user sees the space
beside the values it replaces, and the editor is where a misspelt path gets fixed.
"""

from __future__ import annotations

import json
from pathlib import Path

from lsprotocol import types
from pygls.workspace import Workspace
from typer.testing import CliRunner

from seqc.cli import app
from seqc.lsp.completion import complete
from seqc.lsp.diagnostics import check, quick_fixes
from seqc.lsp.documents import Analysis
from seqc.lsp.hover import hover
from seqc.lsp.navigation import definition, symbols
from seqc.resolve.program import load_program
from seqc.resolve.sweep import DISTRIBUTIONS, FIELDS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "lm" / "shakespeare.seq"

SPEC = f"""seqc 1
import "{EXAMPLE}"

sweep lm.depth {{
  "Depth and dropout."
  experiment = lm.shakespeare.quick
  metric = dev.loss
  space {{
    lm.model.layers = intrange(1, 3)
    lm.model.dropout = uniform(0.0, 0.2)
  }}
  pruner = median(startup_trials = 2)
}}
"""

runner = CliRunner()


def write(tmp_path: Path, text: str = SPEC) -> Path:
    path = tmp_path / "s.seq"
    path.write_text(text)
    return path


# ------------------------------------------------------------------------------------ commands


def test_check_counts_the_sweeps(tmp_path: Path) -> None:
    result = runner.invoke(app, ["check", str(write(tmp_path))])
    assert result.exit_code == 0, result.output
    assert "7 experiment(s), 2 sweep(s) checked" in result.output  # the example's sweep too


def test_list_shows_sweeps_beside_experiments(tmp_path: Path) -> None:
    result = runner.invoke(app, ["list", str(write(tmp_path))], terminal_width=200)
    assert result.exit_code == 0, result.output
    experiments, sweeps = result.output.split("sweeps in ")
    assert "lm.shakespeare.quick" in experiments and "lm.depth" not in experiments
    assert "lm.depth" in sweeps and "lm.shakespeare.lr" in sweeps
    row = next(line for line in sweeps.splitlines() if "lm.depth" in line)
    assert "lm.shakespeare.quick" in row and "dev.loss" in row and "Depth and dropout." in row


def test_show_prints_a_sweep_and_its_space_beside_the_base_values(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["show", str(write(tmp_path)), "-s", "lm.depth"], terminal_width=200
    )
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.startswith("sweep lm.depth")
    settings = (
        "experiment = lm.shakespeare.quick",
        "metric     = dev.loss",
        "goal       = minimize",
        "trials     = 20",
        "sampler    = tpe(seed = 0)",
        "pruner     = median(startup_trials = 2)",
    )
    for line in settings:
        assert line in out, out
    layers = next(line for line in out.splitlines() if line.strip().startswith("lm.model.layers"))
    assert layers.split()[1:4] == ["intrange(1,", "3)", "2"]  # the quick model has 2 layers
    assert "shakespeare.seq:78:3" in layers  # where the quick model set them
    dropout = next(line for line in out.splitlines() if "lm.model.dropout" in line)
    assert "uniform(0.0, 0.2)" in dropout and "0.1" in dropout and "default" in dropout


def test_show_sweep_as_json(tmp_path: Path) -> None:
    result = runner.invoke(app, ["show", str(write(tmp_path)), "-s", "lm.depth", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["experiment"] == "lm.shakespeare.quick" and data["metric"]["name"] == "loss"
    layers = data["space"][0]
    assert (layers["path"], layers["kind"], layers["low"], layers["high"]) == (
        "lm.model.layers",
        "intrange",
        1,
        3,
    )
    assert layers["base"] == 2 and layers["span"].endswith("s.seq:9:23")


def test_show_takes_one_of_an_experiment_and_a_sweep(tmp_path: Path) -> None:
    path = str(write(tmp_path))
    neither = runner.invoke(app, ["show", path])
    assert neither.exit_code == 2 and "[missing-option]" in neither.output
    both = runner.invoke(app, ["show", path, "-s", "lm.depth", "-e", "lm.shakespeare.quick"])
    assert both.exit_code == 2 and "[bad-flags]" in both.output
    graph = runner.invoke(app, ["show", path, "-s", "lm.depth", "--graph"])
    assert graph.exit_code == 2 and "[bad-flags]" in graph.output
    unknown = runner.invoke(app, ["show", path, "-s", "lm.dpeth"])
    assert unknown.exit_code == 2 and "did you mean `lm.depth`?" in unknown.output


# ------------------------------------------------------------------------------------ editor


def _at(text: str, needle: str, after: int = 1) -> int:
    return text.index(needle) + after


def test_hover_on_a_sweep_its_fields_and_its_space(tmp_path: Path) -> None:
    program = load_program(write(tmp_path))
    analysis = Analysis(program=program)

    def shown(needle: str) -> str:
        found = hover(SPEC, _at(SPEC, needle), analysis, None)
        assert found is not None, needle
        return found.contents.value  # type: ignore[union-attr]

    name = shown("lm.depth")
    assert "sweep lm.depth" in name and "minimize `dev.loss`" in name
    assert "lm.model.layers = intrange(1, 3)  # now 2" in name
    assert "the dev figure" in shown("metric").lower()
    path = shown("model.dropout")
    assert "lm.model.dropout = uniform(0.0, 0.2)" in path
    assert "lm.model.dropout = 0.1  # default" in path  # the base's value, where it was set
    assert "experiment lm.shakespeare.quick" in shown("shakespeare.quick")


def test_definition_of_the_base_experiment_and_the_outline(tmp_path: Path) -> None:
    path = write(tmp_path)
    program = load_program(path)
    workspace = Workspace(tmp_path.as_uri())
    found = definition(
        SPEC, _at(SPEC, "shakespeare.quick"), tmp_path, Analysis(program=program), workspace
    )
    assert found is not None and found.uri == EXAMPLE.as_uri()
    assert found.range.start.line == program.experiments["lm.shakespeare.quick"].span.line - 1
    [outline] = symbols(SPEC, str(path), None)
    assert outline.name == "lm.depth" and outline.detail == "sweep"
    assert [c.name for c in outline.children or []] == [
        "experiment",
        "metric",
        "space",
        "pruner",
    ]


def _fix(tmp_path: Path, text: str) -> tuple[types.Diagnostic, str]:
    """The one diagnostic of `text` as the editor gets it, and its quick fix applied."""
    path = write(tmp_path, text)
    workspace = Workspace(tmp_path.as_uri())
    uri = path.as_uri()
    workspace.put_text_document(
        types.TextDocumentItem(uri=uri, language_id="seq", version=1, text=text)
    )
    [diag] = check(uri, workspace).diagnostics[uri]
    params = types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri),
        range=diag.range,
        context=types.CodeActionContext(diagnostics=[diag]),
    )
    [action] = quick_fixes(uri, text, params, None)
    [edit] = action.edit.changes[uri]  # type: ignore[union-attr,index]
    lines = text.splitlines(keepends=True)
    start, end = edit.range.start, edit.range.end
    assert start.line == end.line
    line = lines[start.line]
    lines[start.line] = line[: start.character] + edit.new_text + line[end.character :]
    return diag, "".join(lines)


def test_a_misspelt_path_is_a_diagnostic_whose_fix_writes_the_whole_path(tmp_path: Path) -> None:
    diag, fixed = _fix(tmp_path, SPEC.replace("lm.model.layers =", "lm.model.layer ="))
    assert diag.code == "unknown-path" and diag.range.start.line == 8
    assert fixed == SPEC


def test_a_float_distribution_over_an_int_is_fixed_by_its_int_twin(tmp_path: Path) -> None:
    diag, fixed = _fix(
        tmp_path,
        SPEC.replace("lm.model.layers = intrange(1, 3)", "lm.model.layers = uniform(1, 3)"),
    )
    assert diag.code == "space-wrong-type"
    assert "lm.model.layers = intrange(1, 3)" in fixed


def test_a_misspelt_base_experiment_is_fixed_whole(tmp_path: Path) -> None:
    diag, fixed = _fix(tmp_path, SPEC.replace("= lm.shakespeare.quick", "= lm.shakespeare.quik"))
    assert diag.code == "unknown-experiment"
    assert fixed == SPEC


def test_completion_offers_fields_distributions_components_and_paths(tmp_path: Path) -> None:
    path = write(tmp_path)
    analysis = Analysis(program=load_program(path))

    def offered(text: str, needle: str, after: int) -> list[str]:
        found = complete(text, _at(text, needle, after), path, analysis, None)
        return [item.label for item in found.items]

    assert offered(SPEC, "  metric", 2) == list(FIELDS)
    assert offered(SPEC, "intrange(1", 1) == list(DISTRIBUTIONS)
    assert offered(SPEC, "median(", len("median(")) == ["startup_trials", "warmup_steps"]
    assert "lm.shakespeare.quick" in offered(SPEC, "shakespeare.quick", 1)
    typing = SPEC.replace("    lm.model.dropout = uniform(0.0, 0.2)\n", "    lm.model.\n")
    assert offered(typing, "lm.model.\n", len("lm.model.")) == [
        "d",
        "dropout",
        "heads",
        "layers",
        "vocab",
    ]
    assert "train" in offered(SPEC, "    lm.model.layers", 6)  # a path's first part
