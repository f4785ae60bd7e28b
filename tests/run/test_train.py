"""Training on JAX end to end, on small generated corpora: loss falls, resume is exact, the run
commands work, and broken inputs give clear errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jax
import numpy as np
import pytest
from shared_runs import LmRuns
from tiny_specs import LM_SPEC, lm_corpus
from typer.testing import CliRunner

from seqc.cli import app
from seqc.run.session import open_session
from seqc.run.train.loop import train

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def lm(tmp_path: Path) -> Path:
    lm_corpus(tmp_path)
    common = ROOT / "examples" / "common" / "transformer.seq"
    spec = tmp_path / "lm.seq"
    spec.write_text(LM_SPEC.format(common=common.as_posix()))
    return spec


def _params(state: dict) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(state["params"])]


def test_loss_falls_and_resume_is_exact(lm: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    straight = train(open_session(lm, "tiny", cache_dir=cache), tmp_path / "a", progress=False)
    losses = [h["loss"] for h in straight.history]
    assert len(losses) == 20
    # it learns: 20 steps of these words fall from about ln(vocab) to a plateau near 2.0 at any
    # seed (some seeds go on below 1.8; a margin tuned to one seed would test the seed)
    assert np.mean(losses[-5:]) < 0.8 * np.mean(losses[:3])

    half = open_session(lm, "tiny", ["train.steps=10"], cache_dir=cache)
    train(half, tmp_path / "b", progress=False)
    resumed = train(
        open_session(lm, "tiny", cache_dir=cache), tmp_path / "b", resume=True, progress=False
    )
    for x, y in zip(_params(straight.state), _params(resumed.state), strict=True):
        np.testing.assert_allclose(x, y, atol=1e-6)
    curve = [
        json.loads(line)["loss"]
        for line in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()
        if json.loads(line)["split"] == "train"
    ]
    np.testing.assert_allclose(curve, losses, rtol=1e-6)


def test_run_directory_holds_what_ran(lm: Path, tmp_path: Path) -> None:
    session = open_session(lm, "tiny", ["train.steps=2"], cache_dir=tmp_path / "cache")
    train(session, tmp_path / "run", progress=False)
    run = tmp_path / "run"
    info = json.loads((run / "run.json").read_text())
    assert (run / info["spec"]).read_text() == lm.read_text()
    frozen = {p.name for p in (run / "spec").rglob("*.seq")}
    assert frozen == {"lm.seq", "transformer.seq"}  # imports are frozen too
    resolved = json.loads((run / "resolved.json").read_text())
    assert resolved["config"]["train"]["steps"] == 2
    assert resolved["provenance"]["train.steps"] == "--set train.steps=2"
    assert info["seed"] == 1 and "jax" in info["versions"]
    assert any((run / "events").iterdir())  # TensorBoard events
    assert (run / "checkpoints" / "2").is_dir()


def test_a_run_directory_reruns_from_its_frozen_spec(tmp_path: Path) -> None:
    """A spec that imports `../common/...` and reads data next to itself: the run directory
    keeps the import tree, so `seqc check` and `seqc train --resume` run from `RUN/spec/`, from
    another working directory, and find the data next to the original spec."""
    project = tmp_path / "project"
    (project / "common").mkdir(parents=True)
    (project / "lm").mkdir()
    common = ROOT / "examples" / "common" / "transformer.seq"
    (project / "common" / "transformer.seq").write_text(common.read_text())
    lm_corpus(project / "lm")
    spec = project / "lm" / "lm.seq"
    spec.write_text(LM_SPEC.format(common="../common/transformer.seq"))
    run, cache = tmp_path / "run", tmp_path / "cache"
    runner = CliRunner()
    args = ["-e", "tiny", "--run-dir", str(run), "--cache-dir", str(cache), "--no-progress"]
    first = runner.invoke(app, ["train", str(spec), *args, "--set", "train.steps=4"])
    assert first.exit_code == 0, first.output
    info = json.loads((run / "run.json").read_text())
    assert info["spec"] == "spec/lm/lm.seq"
    assert (run / "spec" / "common" / "transformer.seq").read_text() == common.read_text()
    frozen = run / info["spec"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cwd = Path.cwd()
    try:
        os.chdir(elsewhere)
        check = runner.invoke(app, ["check", str(frozen)])
        assert check.exit_code == 0, check.output
        again = runner.invoke(
            app, ["train", str(frozen), *args, "--resume", "--set", "train.steps=6"]
        )
    finally:
        os.chdir(cwd)
    assert again.exit_code == 0, again.output
    assert "resumed from step 4" in again.output
    steps = [
        json.loads(line)["step"]
        for line in (run / "metrics.jsonl").read_text().splitlines()
        if json.loads(line)["split"] == "train"
    ]
    assert steps == [1, 2, 3, 4, 5, 6]


def test_commands_train_eval_decode(lm: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    run = str(tmp_path / "run")
    base = [str(lm), "-e", "tiny", "--cache-dir", str(tmp_path / "cache")]
    result = runner.invoke(
        app,
        [
            "train",
            *base,
            "--run-dir",
            run,
            "--no-progress",
            "--set",
            "train.steps=3",
            "--prompt",
            "ab",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "dev perplexity before training" in result.output
    assert "sample: ab" in result.output
    again = runner.invoke(app, ["train", *base, "--run-dir", run, "--set", "train.steps=3"])
    assert again.exit_code == 2 and "run-exists" in again.output  # never overwrites a run
    result = runner.invoke(app, ["eval", *base, "--run-dir", run])
    assert result.exit_code == 0, result.output
    assert "dev_perplexity:" in result.output
    result = runner.invoke(
        app, ["decode", *base, "--run-dir", run, "--input", "-"], input="abc\nde\n"
    )
    assert result.exit_code == 0, result.output
    assert result.output.count("\n") >= 2


def test_missing_and_corrupt_checkpoints_are_clear_errors(
    lm: Path, tmp_path: Path, lm_runs: LmRuns
) -> None:
    runner = CliRunner()
    base = [str(lm), "-e", "tiny", "--cache-dir", str(tmp_path / "cache")]
    result = runner.invoke(app, ["eval", *base, "--run-dir", str(tmp_path / "nothing")])
    assert result.exit_code == 2 and "no-checkpoint" in result.output
    run = lm_runs.copy(tmp_path / "run", "train.steps=2")
    for f in (run / "checkpoints" / "2").rglob("*"):
        if f.is_file() and f.stat().st_size > 0:
            f.write_bytes(b"garbage")
    result = runner.invoke(app, ["eval", *base, "--run-dir", str(run)])
    assert result.exit_code == 2, result.output
    assert "bad-checkpoint" in result.output and "Traceback" not in result.output


def test_missing_data_names_the_file(lm: Path, tmp_path: Path) -> None:
    (lm.parent / "dev.txt").unlink()
    result = CliRunner().invoke(
        app,
        [
            "train",
            str(lm),
            "-e",
            "tiny",
            "--run-dir",
            str(tmp_path / "r"),
            "--cache-dir",
            str(tmp_path / "c"),
        ],
    )
    assert result.exit_code == 2
    assert "dev.txt" in result.output and "Traceback" not in result.output


def test_position_table_shorter_than_the_batches_is_an_error(lm: Path, tmp_path: Path) -> None:
    from seqc.spec.errors import SeqcError

    lm.write_text(lm.read_text().replace("SinusoidalPosition(d)", "LearnedPosition(16, d)"))
    with pytest.raises(SeqcError) as e:
        open_session(lm, "tiny", cache_dir=tmp_path / "cache")
    assert e.value.code == "positions-too-short"
    assert (e.value.span.line, e.value.span.col) == (11, 3)  # the `pos = ...` line
    assert "up to 32 tokens" in e.value.message
