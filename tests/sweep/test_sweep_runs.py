"""`seqc sweep` end to end: real trials (`seqc train` processes of a tiny LM), real workers, a
journal file and a real PostgreSQL server; pruning, a stop and its resume, a killed worker."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import optuna
import pytest
from conftest import journal_study, run_sweep, sweep_argv, sweep_spec, wait_for
from optuna.trial import FrozenTrial, TrialState
from postgres import postgres_server
from typer.testing import CliRunner

from seqc.cli import app
from seqc.run.rundir.lock import RunLock
from seqc.spec.errors import SeqcError

LR = "train.optimizer.lr.peak"


def _resolved(run_dir: Path, path: str) -> object:
    node = json.loads((run_dir / "resolved.json").read_text())["config"]
    for part in path.split("."):
        node = node[part] if part in node else node["args"][part]
    return node


STEPS, EVERY, CHECKPOINT_EVERY = 200, 100, 50
"""The runs of the study that `test_a_killed_worker_then_a_stop_then_two_workers_spend_the_
budget_once` shares: each stop there lands well before step 200 (its signal follows a record
within a poll or two, a few dozen steps at most); the first dev evaluation comes after the first
checkpoint, so the worker killed after that checkpoint is not writing a dev figure to the study;
few checkpoints, each about 0.2 CPU-s."""


def _records(metrics: Path, split: str) -> list[dict[str, Any]]:
    """A run's records of `split` so far (a line still being written is left out)."""
    found = []
    for line in metrics.read_text().splitlines() if metrics.is_file() else []:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("split") == split:
            found.append(record)
    return found


def _logged_steps(metrics: Path) -> int:
    """How many training steps the run directory's runs have logged (each logs every step)."""
    return len(_records(metrics, "train"))


def _unlocked(run_dir: Path) -> bool:
    """Whether no run holds `run_dir` (its last trial process has exited)."""
    try:
        RunLock(run_dir).check()
    except SeqcError:
        return False
    return True


def _check_complete(folder: Path, t: FrozenTrial) -> None:
    """A complete trial: its frozen spec, its values in the resolved run, every dev figure."""
    run_dir = Path(t.user_attrs["run_dir"])
    if not run_dir.is_absolute():
        run_dir = folder / run_dir
    assert (run_dir / "spec").is_dir()  # the frozen spec: the run can be trained again
    assert abs(float(_resolved(run_dir, LR)) - t.params[LR]) < 1e-12 * t.params[LR]
    assert sorted(t.intermediate_values) == list(range(EVERY, STEPS + 1, EVERY))
    assert t.value == t.intermediate_values[STEPS]


def test_a_killed_worker_then_a_stop_then_two_workers_spend_the_budget_once(
    sweep_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One journal study, three `seqc sweep` commands, each starting where the last left it:

    1. a worker (`--trials 1`) is killed outright once its trial has checkpointed: the kernel
       sends the trial SIGUSR1 (`PR_SET_PDEATHSIG`), and it stops;
    2. the next worker (`--trials 1`) finds the trial's worker gone, fails the trial and trains
       it again from its last checkpoint; once that trains, the worker gets SIGTERM: it stops
       its trial (which checkpoints), marks it interrupted and exits 143;
    3. two workers spend the spec's budget of two: one resumes the stopped trial, the other
       takes a new one. Each looks at the other's running trial and leaves it alone.

    The study then holds the lost and the stopped trial, uncounted, and two complete ones; the
    first trial's run trained every step, each retry from the last checkpoint before it."""
    spec = sweep_spec(sweep_folder, steps=STEPS, every=EVERY, checkpoint_every=CHECKPOINT_EVERY)
    one = sweep_argv(spec, "tiny.lr", "--trials", "1", "--dir", "sweep")
    run_dir = sweep_folder / "sweep" / "trial-000"
    metrics = run_dir / "metrics.jsonl"

    victim = subprocess.Popen(
        one, cwd=sweep_folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_for(lambda: _records(metrics, "checkpoint"), 120, "a checkpoint")
    finally:
        victim.kill()
        victim.wait()
    # its last checkpoint: the stop's, or the periodic one had the trial aborted (it did in 5
    # of 12 tries when the signal was SIGTERM: the kernel signals it again as each thread of
    # the killed worker exits; `seqc.run.train.interrupt` now takes SIGUSR1's repeats as one)
    wait_for(lambda: _unlocked(run_dir), 120, "the orphaned trial to exit")
    killed_at = _records(metrics, "checkpoint")[-1]["step"]
    logged = _logged_steps(metrics)  # an aborted trial's steps past `killed_at` among them

    stopped = subprocess.Popen(
        one, cwd=sweep_folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        # a step logged while a trial of this sweep holds the run: a late line of the orphan
        # alone once let the SIGTERM reach the sweep while it was still starting (exit -15).
        # The lock is tried only once a step is logged, while that trial holds it: tried as the
        # trial starts, it could take the lock from under it (`RunLock.check` locks and lets go)
        wait_for(
            lambda: _logged_steps(metrics) > logged and not _unlocked(run_dir),
            120,
            "the lost trial to train again",
        )
        stopped.send_signal(signal.SIGTERM)
        out, err = stopped.communicate(timeout=120)
    finally:
        if stopped.poll() is None:
            stopped.kill()
            stopped.wait()
    assert stopped.returncode == 143, out + err
    assert "its worker is gone" in out and "stopped at step" in out
    lost, interrupted = journal_study(sweep_folder / "sweep", "tiny.lr").get_trials()
    assert lost.state == TrialState.FAIL and "reason" not in lost.user_attrs
    assert lost.user_attrs["worker_pid"] == victim.pid
    assert (interrupted.state, interrupted.user_attrs.get("reason")) == (
        TrialState.FAIL,
        "interrupted",
    )
    assert interrupted.user_attrs["retry_of"] == 0 and interrupted.params == lost.params
    stopped_at = interrupted.user_attrs["stopped_at"]
    assert killed_at < stopped_at < STEPS

    done = run_sweep(spec, "tiny.lr", "--workers", "2", "--dir", "sweep")
    assert done.returncode == 0, done.stdout + done.stderr
    trials = journal_study(sweep_folder / "sweep", "tiny.lr").get_trials()
    assert [t.state for t in trials[2:]] == [TrialState.COMPLETE] * 2  # the budget, no more
    assert len({t.user_attrs["worker_pid"] for t in trials[2:]}) == 2  # both workers took one
    for t in trials[2:]:
        _check_complete(sweep_folder, t)
    (resumed,) = [t for t in trials[2:] if t.user_attrs.get("retry_of") == 0]
    assert resumed.params == lost.params
    for t in (interrupted, resumed):
        assert t.user_attrs["run_dir"] == lost.user_attrs["run_dir"]
    trained = Counter(r["step"] for r in _records(metrics, "train"))
    assert sorted(trained) == list(range(1, STEPS + 1))
    # each retry resumed from the last checkpoint: no step up to it is trained again, and
    # none after the clean stop (an aborted trial's steps past its checkpoint may be)
    assert all(n == 1 for s, n in trained.items() if s <= killed_at or s > stopped_at)
    assert "best: trial" in done.stdout

    # `seqc sweep show` in this process: it only reads the study (a process would only add
    # seconds of imports to the suite)
    monkeypatch.chdir(sweep_folder)  # where the sweep ran: its trials' paths are relative to it
    shown = CliRunner().invoke(app, ["sweep", "show", "sweep"])
    assert shown.exit_code == 0, shown.output
    assert "train it again: seqc train" in shown.stdout
    assert shown.stdout.count("complete") == 2
    assert "lost (retried)" in shown.stdout and "stopped (resumes)" in shown.stdout
    assert (sweep_folder / "sweep" / "plots" / "history.png").stat().st_size > 1000
    # the killed worker's trial went with it: `sweep_folder` finds no process left


def test_the_pruner_stops_the_trials_that_cannot_train(sweep_folder: Path) -> None:
    """The grid's order (seed 0) is 1e-7, 2e-2, 1e-8: the first is the pruner's startup trial,
    which it never stops; 2e-2 trains, and must not be stopped for being compared with an
    untrained run; 1e-8 is far above the median of those two, and must be. The runs
    checkpoint only at their end, so a pruned run's checkpoint is the one its stop wrote."""
    # long enough to be stopped early: judged at step 10, stopped within a few steps of it
    spec = sweep_spec(sweep_folder, steps=60, every=10, checkpoint_every=60)
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


def test_workers_share_a_postgresql_study(sweep_folder: Path) -> None:
    """Two workers, told the URL by the sweep, with a budget of one trial: one of them runs it,
    and the other finds it in the study (or, asking at the same moment, ends its own trial
    unrun as surplus); either way nothing runs twice, which only one shared study allows."""
    # the trial evaluates and checkpoints once, at its end: no figure on the way is checked
    spec = sweep_spec(sweep_folder, every=20)
    with postgres_server(sweep_folder / "pg") as url:
        done = run_sweep(
            spec, "tiny.lr", "--workers", "2", "--trials", "1", "--storage", url, "--dir", "sweep"
        )
        assert done.returncode == 0, done.stdout + done.stderr
        study = optuna.load_study(study_name="tiny.lr", storage=url)
        trials = study.get_trials()
    (complete,) = [t for t in trials if t.state == TrialState.COMPLETE]
    assert all(t.user_attrs.get("reason") == "surplus" for t in trials if t is not complete)
    workers = re.search(r"2 workers: pids (\d+), (\d+)", done.stdout)
    assert workers and complete.user_attrs["worker_pid"] in map(int, workers.groups())
    assert not (sweep_folder / "sweep" / "study.journal").exists()
