"""`seqc sweep` end to end: real trials (`seqc train` processes of a tiny LM), real workers, a
journal file and a real PostgreSQL server; pruning, a stop and its resume, a killed worker."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import optuna
import pytest
from conftest import journal_study, run_sweep, sweep_argv, sweep_spec, wait_for
from optuna.trial import TrialState
from postgres import postgres_server
from typer.testing import CliRunner

from seqc.cli import app

LR = "train.optimizer.lr.peak"


def _resolved(run_dir: Path, path: str) -> object:
    node = json.loads((run_dir / "resolved.json").read_text())["config"]
    for part in path.split("."):
        node = node[part] if part in node else node["args"][part]
    return node


def test_two_workers_run_a_sweep_to_its_budget(
    sweep_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = sweep_spec(sweep_folder)
    done = run_sweep(spec, "tiny.lr", "--workers", "2", "--dir", "sweep")
    assert done.returncode == 0, done.stdout + done.stderr
    study = journal_study(sweep_folder / "sweep", "tiny.lr")
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 3  # the spec's budget, no more
    assert len({t.user_attrs["worker_pid"] for t in trials}) == 2  # both workers took trials
    for t in trials:
        run_dir = Path(t.user_attrs["run_dir"])
        if not run_dir.is_absolute():
            run_dir = sweep_folder / run_dir
        assert (run_dir / "spec").is_dir()  # the frozen spec: the run can be trained again
        assert abs(float(_resolved(run_dir, LR)) - t.params[LR]) < 1e-12 * t.params[LR]
        assert sorted(t.intermediate_values) == [5, 10, 15, 20]  # every dev evaluation
        assert t.value == t.intermediate_values[20]
    assert "best: trial" in done.stdout

    # `seqc sweep show` in this process: it only reads the study (a process would only add
    # seconds of imports to the suite)
    monkeypatch.chdir(sweep_folder)  # where the sweep ran: its trials' paths are relative to it
    shown = CliRunner().invoke(app, ["sweep", "show", "sweep"])
    assert shown.exit_code == 0, shown.output
    assert "train it again: seqc train" in shown.stdout
    assert shown.stdout.count("complete") == 3
    assert (sweep_folder / "sweep" / "plots" / "history.png").stat().st_size > 1000


def test_the_pruner_stops_the_trials_that_cannot_train(sweep_folder: Path) -> None:
    """The grid's order (seed 0) is 1e-7, 2e-2, 1e-8: the first is the pruner's startup trial,
    which it never stops; 2e-2 trains, and must not be stopped for being compared with an
    untrained run; 1e-8 is far above the median of those two, and must be."""
    spec = sweep_spec(sweep_folder, steps=60, every=10)  # long enough to be stopped early
    done = run_sweep(spec, "tiny.bad", "--dir", "sweep")
    assert done.returncode == 0, done.stdout + done.stderr
    trials = journal_study(sweep_folder / "sweep", "tiny.bad").get_trials()
    assert len(trials) == 3
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    assert [t.params[LR] for t in pruned] == [1e-8], done.stdout
    for t in pruned:
        assert t.params[LR] <= 1e-7  # only the learning rates that cannot train
        assert t.user_attrs["stopped_at"] < 60
        assert (Path(sweep_folder / t.user_attrs["run_dir"]) / "checkpoints").is_dir()
        assert f"trial {t.number}: pruned at step" in done.stdout
    good = [t for t in trials if t.params[LR] >= 1e-2]
    assert all(t.state == TrialState.COMPLETE for t in good)


def test_a_stopped_sweep_resumes_with_nothing_counted_twice(sweep_folder: Path) -> None:
    spec = sweep_spec(sweep_folder, steps=400, every=50)  # a checkpoint to stop after
    argv = sweep_argv(spec, "tiny.lr", "--trials", "1", "--dir", "sweep")
    proc = subprocess.Popen(
        argv, cwd=sweep_folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    metrics = sweep_folder / "sweep" / "trial-000" / "metrics.jsonl"
    try:
        wait_for(
            lambda: metrics.is_file() and '"checkpoint"' in metrics.read_text(), 120, "a checkpoint"
        )
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, out + err
    assert "stopped at step" in out
    first = journal_study(sweep_folder / "sweep", "tiny.lr").get_trials()
    assert [(t.state, t.user_attrs.get("reason")) for t in first] == [
        (TrialState.FAIL, "interrupted")
    ]
    stopped_at = first[0].user_attrs["stopped_at"]
    assert stopped_at and stopped_at < 400

    again = run_sweep(spec, "tiny.lr", "--trials", "1", "--dir", "sweep")
    assert again.returncode == 0, again.stdout + again.stderr
    trials = journal_study(sweep_folder / "sweep", "tiny.lr").get_trials()
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(complete) == 1  # the stopped trial, resumed, once
    retry = next(t for t in complete if t.user_attrs.get("retry_of") == 0)
    assert retry.params == first[0].params
    assert retry.user_attrs["run_dir"] == first[0].user_attrs["run_dir"]
    records = [json.loads(x) for x in metrics.read_text().splitlines()]
    train_steps = [r["step"] for r in records if r["split"] == "train"]
    assert train_steps.count(1) == 1  # resumed from its checkpoint, not trained from step 1 again
    assert max(train_steps) == 400


def test_a_killed_worker_s_trial_fails_and_the_sweep_goes_on(sweep_folder: Path) -> None:
    """The worker is killed outright (its trial gets SIGTERM from the kernel and checkpoints);
    the next worker of the sweep finds the trial's worker gone, fails the trial and trains it
    again from its checkpoint. That a worker leaves alone the trials of workers that are alive
    is `test_two_workers_run_a_sweep_to_its_budget`'s: both workers look at every trial."""
    spec = sweep_spec(sweep_folder, steps=400, every=50)  # a checkpoint to stop after
    argv = sweep_argv(spec, "tiny.lr", "--trials", "1", "--dir", "sweep")
    victim = subprocess.Popen(
        argv, cwd=sweep_folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        metrics = sweep_folder / "sweep" / "trial-000" / "metrics.jsonl"
        wait_for(
            lambda: metrics.is_file() and '"checkpoint"' in metrics.read_text(), 120, "a checkpoint"
        )
    finally:
        victim.kill()
        victim.wait()
    other = run_sweep(spec, "tiny.lr", "--trials", "1", "--dir", "sweep")
    out = other.stdout + other.stderr
    assert other.returncode == 0, out
    trials = journal_study(sweep_folder / "sweep", "tiny.lr").get_trials()
    lost = trials[0]
    assert lost.state == TrialState.FAIL and "reason" not in lost.user_attrs
    assert lost.user_attrs["worker_pid"] == victim.pid
    assert "its worker is gone" in out
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(complete) == 1  # the lost trial, trained again: the budget of one is spent
    assert complete[0].user_attrs.get("retry_of") == 0
    assert complete[0].user_attrs["run_dir"] == lost.user_attrs["run_dir"]
    records = [json.loads(x) for x in metrics.read_text().splitlines()]
    train_steps = [r["step"] for r in records if r["split"] == "train"]
    assert train_steps.count(1) == 1  # from the lost trial's checkpoint, not from step 1
    assert max(train_steps) == 400
    # the killed worker's trial went with it: `sweep_folder` finds no process left


def test_workers_share_a_postgresql_study(sweep_folder: Path) -> None:
    spec = sweep_spec(sweep_folder)
    with postgres_server(sweep_folder / "pg") as url:
        done = run_sweep(
            spec, "tiny.lr", "--workers", "2", "--trials", "2", "--storage", url, "--dir", "sweep"
        )
        assert done.returncode == 0, done.stdout + done.stderr
        study = optuna.load_study(study_name="tiny.lr", storage=url)
        trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
    assert not (sweep_folder / "sweep" / "study.journal").exists()
