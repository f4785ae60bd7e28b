"""Runs never lose work: the run directory is owned by one run at a time, a signal stops a run
with a checkpoint, a resume with other settings is refused before anything is written, a
damaged checkpoint is passed over, a torn metrics line is tolerated, a loss that is not finite
stops the run, and what cannot be written to is a clear error.

Trainings that must be interrupted run in child processes (`python -m seqc.cli`), as a user's
would; everything else runs through the CLI in this process. A test that only reads, damages or
resumes a trained run takes a copy of the session's run of the same spec (`lm_runs`: 20 steps,
checkpoints at 10 and 20) rather than training its own: the spec and corpus are the test's own,
written from the same text, and a run records its model and data by content, not by path.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from shared_runs import LmRuns
from tiny_specs import LM_SPEC, lm_corpus
from typer.testing import CliRunner

from seqc.cli import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    lm_corpus(tmp_path)
    common = (ROOT / "examples" / "common" / "transformer.seq").as_posix()
    path = tmp_path / "lm.seq"
    path.write_text(LM_SPEC.format(common=common))
    return path


def _args(spec: Path, run: Path, *sets: str) -> list[str]:
    """Options every command takes (train adds --no-progress)."""
    out = [str(spec), "-e", "tiny", "--run-dir", str(run)]
    out += ["--cache-dir", str(spec.parent / "cache")]
    for s in sets:
        out += ["--set", s]
    return out


def _train(spec: Path, run: Path, *sets: str, resume: bool = False, dev: bool = False) -> object:
    """`seqc train` in this process; without the dev evaluations around it unless `dev`."""
    args = ["train", *_args(spec, run, *sets), "--no-progress"]
    args += (["--resume"] if resume else []) + ([] if dev else ["--no-dev-eval"])
    return runner.invoke(app, args)


def _train_steps(run: Path) -> list[int]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [json.loads(x)["step"] for x in lines if json.loads(x)["split"] == "train"]


# ---------------------------------------------------------------------------- ownership


HOLD = r"""
import sys, time
from pathlib import Path
from seqc.run.rundir.lock import RunLock
with RunLock(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(120)
"""


def test_a_second_run_is_refused_while_the_first_owns_the_directory(
    spec: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        result = _train(spec, run, "train.steps=2")
        assert result.exit_code == 2, result.output
        assert "run-locked" in result.output and f"pid {holder.pid}" in result.output
        assert not (run / "checkpoints").exists()
    finally:
        holder.kill()  # a killed owner leaves no stale lock
        holder.wait(timeout=30)
    result = _train(spec, run, "train.steps=2")
    assert result.exit_code == 0, result.output


# ---------------------------------------------------------------------------- signals


def _start(spec: Path, run: Path, *sets: str) -> subprocess.Popen:
    sets = ("train.steps=5000", "train.checkpoint_every=0", *sets)
    args = [sys.executable, "-m", "seqc.cli", "train", *_args(spec, run, *sets), "--no-progress"]
    args.append("--no-dev-eval")  # what these tests stop is training
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_steps(run: Path, proc: subprocess.Popen, n: int, limit: float = 240) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        metrics = run / "metrics.jsonl"
        if metrics.exists() and len(_train_steps_safe(metrics)) >= n:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("training did not get going")


def _train_steps_safe(metrics: Path) -> list[int]:
    steps = []
    for line in metrics.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record["split"] == "train":
            steps.append(record["step"])
    return steps


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_with_a_checkpoint_and_resume_continues(
    spec: Path, tmp_path: Path, signum: int
) -> None:
    run = tmp_path / "run"
    proc = _start(spec, run)
    try:
        _wait_for_steps(run, proc, 3)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signum, err[-2000:]
    assert "resume with: seqc train" in err and "--resume" in err
    steps = _train_steps(run)
    stopped = steps[-1]
    assert steps == list(range(1, stopped + 1))  # every step logged once, flushed
    assert (run / "checkpoints" / str(stopped)).is_dir()  # the step it stopped at, saved
    result = _train(spec, run, f"train.steps={stopped + 3}", resume=True)
    assert result.exit_code == 0, result.output
    assert f"resumed from step {stopped}" in result.output
    assert _train_steps(run) == list(range(1, stopped + 4))  # no step twice


def test_a_second_signal_aborts_at_once(spec: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = _start(spec, run, "train.eval_every=1")  # slow steps: each evaluates on dev
    try:
        _wait_for_steps(run, proc, 2)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "SIGINT again: aborted" in err
    assert "resume with" not in err and "Traceback" not in err


# ---------------------------------------------------------------------------- resume


def test_resume_without_a_checkpoint_says_so(spec: Path, tmp_path: Path) -> None:
    result = _train(spec, tmp_path / "run", "train.steps=2", resume=True)
    assert result.exit_code == 2, result.output
    assert "nothing to resume" in result.output and "drop --resume" in result.output
    assert not (tmp_path / "run").exists()


def test_a_resume_with_other_settings_is_refused_before_any_write(
    spec: Path, tmp_path: Path, lm_runs: LmRuns
) -> None:
    run = lm_runs.copy(tmp_path / "run")  # 20 steps
    before = {name: (run / name).read_bytes() for name in ("run.json", "resolved.json")}
    result = _train(spec, run, "train.steps=24", "lm.model.d=48", resume=True)
    assert result.exit_code == 2, result.output
    assert "resume-mismatch" in result.output
    assert "lm.model.d: 32 when the run started, 48 now" in result.output
    assert "another --run-dir" in result.output and "delete" not in result.output
    assert "Event loop is closed" not in result.output
    assert {name: (run / name).read_bytes() for name in before} == before
    # a run started by a seqc whose adam had no `lazy_rows` yet resumes (the default is the
    # old behaviour), but not with the new param set otherwise
    record = json.loads((run / "resolved.json").read_text())
    del record["config"]["train"]["optimizer"]["args"]["lazy_rows"]
    # ... and one from before multi-task models: no mix fields, no shares
    for name in ("mix", "mix_by", "lr_scale", "init_from"):
        del record["config"]["train"][name]
    del record["config"]["share"]
    (run / "resolved.json").write_text(json.dumps(record))
    newer = _train(spec, run, "train.steps=22", "train.optimizer.lazy_rows=true", resume=True)
    assert newer.exit_code == 2 and "lazy_rows: (unset) when the run started, true" in newer.output
    mixed = _train(spec, run, "train.steps=22", 'train.mix_by="sum"', resume=True)
    assert mixed.exit_code == 2 and "train.mix_by: (unset) when the run started" in mixed.output
    again = _train(spec, run, "train.steps=22", resume=True)  # steps may change: extend a run
    assert again.exit_code == 0, again.output
    info = json.loads((run / "run.json").read_text())
    assert info["resumed"][0]["from_step"] == 20


def test_a_run_s_weights_are_used_only_with_its_own_model_and_data(
    tmp_path: Path, lm_runs: LmRuns
) -> None:
    """An imported layer's default edited (ff 4 * d -> 2 * d): the resume got as far as the
    restore, declared the good checkpoint damaged and set it aside. `--set lm.model.heads=..`
    on eval, or a corpus edited since (a new tokenizer fitted on it), scored the old weights
    with another model or tokenizer, silently. Each is refused before anything is read."""
    lm_corpus(tmp_path)
    layers = tmp_path / "transformer.seq"  # a copy of the imported layers, to edit
    layers.write_text((ROOT / "examples" / "common" / "transformer.seq").read_text())
    spec = tmp_path / "lm.seq"
    spec.write_text(LM_SPEC.format(common=layers.as_posix()))
    run = lm_runs.copy(tmp_path / "run")  # 20 steps, its layers imported from examples/
    held = sorted(p.name for p in (run / "checkpoints").iterdir())
    text = layers.read_text()
    assert "ff: int = 4 * d" in text
    layers.write_text(text.replace("ff: int = 4 * d", "ff: int = 2 * d"))
    resumed = _train(spec, run, "train.steps=24", resume=True)
    assert resumed.exit_code == 2 and "resume-mismatch" in resumed.output, resumed.output
    assert "lm.model.blocks.ff: 128 when trained, 64 now" in resumed.output
    assert "Event loop is closed" not in resumed.output
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == held  # none set aside
    scored = runner.invoke(app, ["eval", *_args(spec, run)])
    assert scored.exit_code == 2 and "run-mismatch" in scored.output, scored.output
    # a run from before the record: the restore fails, and the checkpoint stays where it is
    info = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({k: v for k, v in info.items() if k != "identity"}))
    legacy = _train(spec, run, "train.steps=24", resume=True)
    assert legacy.exit_code == 2 and "checkpoint-mismatch" in legacy.output, legacy.output
    assert "nothing was moved" in " ".join(legacy.output.split())
    assert "Event loop is closed" not in legacy.output and "Traceback" not in legacy.output
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == held
    (run / "run.json").write_text(json.dumps(info))
    layers.write_text(text)
    heads = runner.invoke(app, ["eval", *_args(spec, run, "lm.model.heads=4")])
    assert heads.exit_code == 2 and "lm.model.heads: 2 when trained, 4 now" in heads.output
    train = tmp_path / "train.txt"
    lines = train.read_text().splitlines()
    train.write_text("\n".join(lines[:200]) + "\n")  # other counts: chars' ids are by count
    other = runner.invoke(app, ["eval", *_args(spec, run)])
    assert other.exit_code == 2 and "tokenizer: chars with 12 ids" in other.output, other.output
    assert "train split: 300 examples" in other.output and "200 examples" in other.output
    fewer = _train(spec, run, "train.steps=24", resume=True)
    assert fewer.exit_code == 2 and "train split: 300 examples" in fewer.output, fewer.output
    train.write_text("\n".join(lines) + "\n")
    assert _train(spec, run, "train.steps=24", resume=True).exit_code == 0


def test_the_dev_evaluations_around_a_run_are_said_and_can_be_skipped(
    spec: Path, tmp_path: Path
) -> None:
    """With `eval_every = 0` a 5-step run at V = 96k still spent minutes in the full-vocabulary
    dev evaluations before and after training, saying nothing while they ran."""
    said = _train(spec, tmp_path / "a", "train.steps=2", dev=True)
    assert said.exit_code == 0, said.output
    assert "evaluating on dev before training" in said.output
    assert "evaluating on dev after 2 steps" in said.output
    args = ["train", *_args(spec, tmp_path / "b", "train.steps=2"), "--no-progress"]
    skipped = runner.invoke(app, [*args, "--no-dev-eval"])
    assert skipped.exit_code == 0, skipped.output
    assert "evaluating" not in skipped.output and "dev perplexity" not in skipped.output
    records = (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()
    assert not any(json.loads(r)["split"] == "dev" for r in records)


# ---------------------------------------------------------------------------- checkpoints


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _largest(folder: Path) -> Path:
    return max((p for p in folder.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty"])
def test_a_damaged_newest_checkpoint_is_passed_over(
    spec: Path, tmp_path: Path, lm_runs: LmRuns, damage: str
) -> None:
    run = lm_runs.copy(tmp_path / "run")  # 20 steps, checkpoints at 10 and 20
    victim = _largest(run / "checkpoints" / "20")
    if damage == "flip":
        _flip(victim)
    elif damage == "truncate":
        victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    else:
        victim.write_bytes(b"")
    scored = runner.invoke(app, ["eval", *_args(spec, run)])
    assert scored.exit_code == 0, scored.output
    assert "checkpoint 20" in scored.output and "step 10" in scored.output
    assert "tensorstore" not in scored.output.lower()
    result = _train(spec, run, "train.steps=24", resume=True)
    assert result.exit_code == 0, result.output
    assert "warning: checkpoint 20" in result.output and "set aside" in result.output
    assert "resumed from step 10" in result.output
    assert (run / "checkpoints" / "20.corrupt").is_dir()
    assert _train_steps(run) == list(range(1, 25))


def test_a_checkpoint_is_named_by_its_folder(spec: Path, tmp_path: Path, lm_runs: LmRuns) -> None:
    run = lm_runs.copy(tmp_path / "run")  # 20 steps, checkpoints at 10 and 20
    args = ["eval", *_args(spec, run), "--checkpoint", str(run / "checkpoints" / "10")]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    missing = runner.invoke(app, [*args[:-1], str(run / "checkpoints" / "7")])
    assert missing.exit_code == 2 and "no-checkpoint" in missing.output


def test_a_torn_metrics_line_is_tolerated(spec: Path, tmp_path: Path, lm_runs: LmRuns) -> None:
    run = lm_runs.copy(tmp_path / "run")  # 20 steps
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"step": 21, "split": "tra')  # a crash mid-write
    result = _train(spec, run, "train.steps=22", resume=True)
    assert result.exit_code == 0, result.output
    assert _train_steps(run) == list(range(1, 23))


# ---------------------------------------------------------------------------- values, places


def test_a_loss_that_is_not_finite_stops_the_run(spec: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    text = spec.read_text().replace("peak = 1e-2", "peak = 1e30")
    spec.write_text(text)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "optimizer = adam" in t)
    result = _train(spec, run, "train.steps=20", "train.checkpoint_every=5")
    assert result.exit_code == 2, result.output
    assert "loss-not-finite" in result.output and f"lm.seq:{line}:" in result.output
    steps = _train_steps(run)
    assert len(steps) < 20  # stopped, not trained on to the end
    saved = [int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit()]
    assert all(s < steps[-1] for s in saved)  # no checkpoint of the broken weights


def test_a_failed_dev_evaluation_keeps_the_steps_before_it(
    spec: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dev evaluation that fails (here: raises) ended the run with the steps since the last
    checkpoint lost; they are saved first, and --resume goes on from them."""
    from seqc.run.train.loop import Loop

    def broken(self: Loop, state: object, done: int) -> dict:
        raise RuntimeError("the evaluation broke")

    monkeypatch.setattr(Loop, "evaluate", broken)
    run = tmp_path / "run"
    result = _train(spec, run, "train.steps=20", "train.eval_every=3", "train.checkpoint_every=10")
    assert result.exit_code != 0 and "the evaluation broke" in result.output
    saved = [int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit()]
    assert saved == [3]
    monkeypatch.undo()
    again = _train(spec, run, "train.steps=20", "train.eval_every=0", resume=True)
    assert again.exit_code == 0, again.output
    assert _train_steps(run)[:4] == [1, 2, 3, 4] and "resumed from step 3" in again.output


def test_a_vocabulary_below_the_tokenizers_is_an_error_at_the_layer(
    spec: Path, tmp_path: Path
) -> None:
    text = spec.read_text().replace("model = LM(vocab = input.vocab_size)", "model = LM(vocab = 5)")
    spec.write_text(text)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "model = LM(vocab = 5)" in t)
    result = _train(spec, tmp_path / "run", "train.steps=1")
    assert result.exit_code == 2, result.output
    assert "vocab-too-small" in result.output and "`embed` has a vocabulary of 5" in result.output
    assert f"lm.seq:{line}:" in result.output  # the note at the argument that set it


def test_a_run_dir_that_cannot_be_written_is_a_clear_error(spec: Path, tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("not a directory")
    result = _train(spec, a_file, "train.steps=1")
    assert result.exit_code == 2, result.output
    assert "run-dir-unwritable" in result.output and "is a file" in result.output
    if sys.platform.startswith("linux") and os.path.isdir("/sys"):
        result = _train(spec, Path("/sys/seqc-run"), "train.steps=1")
        assert result.exit_code == 2, result.output
        assert "run-dir-unwritable" in result.output


def test_decoding_an_input_that_is_not_utf8_names_the_line(spec: Path, tmp_path: Path) -> None:
    bad = tmp_path / "inputs.txt"
    bad.write_bytes(b"abc\nde \xff f\n")
    args = ["decode", *_args(spec, tmp_path / "run"), "--input", str(bad)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "not-utf8" in result.output and f"{bad}:2" in result.output
