"""The command line on the bundled examples: what a user sees when things go right."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from seqc.cli import app
from seqc.spec.kinds import REGISTRY

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*/*.seq"))
LM = str(ROOT / "examples" / "lm" / "shakespeare.seq")
runner = CliRunner()


@pytest.mark.parametrize("spec", EXAMPLES, ids=lambda p: p.name)
def test_every_example_checks_and_is_formatted(spec: Path) -> None:
    result = runner.invoke(app, ["check", str(spec)])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("ok ")
    result = runner.invoke(app, ["fmt", "--check", str(spec)])
    assert result.exit_code == 0, result.output


def test_list_shows_the_registry_with_inherited_fields() -> None:
    result = runner.invoke(app, ["list", LM])
    assert result.exit_code == 0
    assert "lm.shakespeare.tiny" in result.output
    row = next(line for line in result.output.splitlines() if "lm.shakespeare.small" in line)
    assert "[lm]" in row  # tasks inherited from the parent experiment


def test_show_provenance_and_overrides() -> None:
    args = ["show", LM, "-e", "lm.shakespeare.small", "--provenance", "--set", "lm.model.d=128"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    d = next(line for line in lines if line.strip().startswith("lm.model.d "))
    assert "= 128" in d and "# --set lm.model.d=128" in d
    layers = next(line for line in lines if line.strip().startswith("lm.model.layers "))
    assert "= 8" in layers and "shakespeare.seq:" in layers
    assert "blocks: CausalBlock x 8" in result.output  # the model's layer tree


def test_show_json_is_machine_readable() -> None:
    result = runner.invoke(app, ["show", LM, "-e", "lm.shakespeare.tiny", "--json", "--provenance"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["chain"] == ["lm.shakespeare.tiny"]
    assert data["config"]["train"]["optimizer"]["kind"] == "adam"
    assert data["config"]["lm"]["model"]["args"]["d"] == 256
    assert data["provenance"]["train.seed"].endswith("shakespeare.seq:52:5")  # `seed = 1`
    assert data["models"]["lm"]["children"][3]["repeat"] == 4


def test_layers_catalogue_documents_every_layer() -> None:
    result = runner.invoke(app, ["layers"])
    assert result.exit_code == 0
    for name, spec in REGISTRY.namespaces["layer"].items():
        assert name in result.output
        for p in spec.params:
            assert p.name in result.output
    one = runner.invoke(app, ["layers", "SelfAttention"])
    assert "causal" in one.output and "heads" in one.output
    brief = runner.invoke(app, ["layers", "--brief"])
    assert brief.output.count("\n") < 40


def test_layers_unknown_name_suggests() -> None:
    result = runner.invoke(app, ["layers", "LayerNrom"])
    assert result.exit_code == 2
    assert "did you mean `LayerNorm`?" in result.output


def test_schema_is_json_schema_of_the_ir() -> None:
    result = runner.invoke(app, ["schema"])
    assert result.exit_code == 0
    schema = json.loads(result.output)
    assert schema["title"] == "SpecFile"
    assert "LayerDecl" in schema["$defs"] and "Span" in schema["$defs"]


def test_every_command_has_help() -> None:
    for cmd in ("check", "fmt", "list", "show", "layers", "schema"):
        result = runner.invoke(app, [cmd, "--help"])
        assert result.exit_code == 0 and "Usage" in result.output, cmd


def test_a_closed_pipe_ends_the_command_quietly() -> None:
    """`seqc decode ... | head -1`: the reader closed the pipe; no "internal error", and the
    exit code a shell gives a writer killed by SIGPIPE."""
    import typer

    from seqc.cli.guard import run_guarded as _run

    def write_to_a_closed_pipe() -> None:
        raise BrokenPipeError(32, "Broken pipe")

    try:
        _run(write_to_a_closed_pipe)
    except typer.Exit as e:
        assert e.exit_code == 141
    else:
        raise AssertionError("no exit")


def test_seqc_data_runs_under_the_error_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    """`seqc data` was mounted without the guard every other command has: a bug in it now
    says so and exits 3, as anywhere else."""
    from seqc.cli import data

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(data, "prepare", broken)
    result = runner.invoke(app, ["data", "prepare", "zipf"])
    assert result.exit_code == 3, result.output
    assert "internal error: RuntimeError: a bug" in result.output
    assert "Traceback" not in result.output


BAD_SPEC = "seqc 1\nlayer X( {\n"


@pytest.mark.parametrize(
    ("args", "streams"),
    [
        (["check", "examples/lm/shakespeare.seq"], "stdout"),  # ok, on stdout
        (["check", "bad.seq"], "both"),  # the error, on stderr
        (["layers", "--brief"], "stdout"),  # a rich table
        (["--help"], "stdout"),  # typer's help
        (["data", "list"], "stdout"),  # typer's echo
    ],
    ids=["ok", "error", "table", "help", "echo"],
)
def test_every_command_exits_141_when_its_output_pipe_is_closed(
    tmp_path: Path, args: list[str], streams: str
) -> None:
    """`seqc check bad.seq | head -1` exited 120 (Python's failed flush at exit) or 1 (rich's
    and typer's own handlers: the code `fmt --check` gives for "would reformat")."""
    import os
    import subprocess
    import sys

    (tmp_path / "bad.seq").write_text(BAD_SPEC)
    args = [a if a != "bad.seq" else str(tmp_path / "bad.seq") for a in args]
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first write
    try:
        result = subprocess.run(
            [sys.executable, "-c", "from seqc.cli import main; main()", *args],
            stdout=write,
            stderr=write if streams == "both" else subprocess.DEVNULL,
            cwd=ROOT,
            timeout=120,
        )
    finally:
        os.close(write)
    assert result.returncode == 141
