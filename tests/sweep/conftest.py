"""What the sweep tests share: a tiny LM spec with sweeps over it, its corpus, `seqc sweep` run
as a process, and a check that no trial outlives its test."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import optuna
import pytest
from tiny_specs import COMMON, LM_SPEC, lm_corpus

ROOT = Path(__file__).resolve().parents[2]

SWEEPS = """
experiment tiny.evals extends tiny {{
  train.steps = {steps}
  train.eval_every = {every}
  train.checkpoint_every = {checkpoint_every}
}}

sweep tiny.lr {{
  experiment = tiny.evals
  metric = dev.loss
  goal = minimize
  trials = 2
  space {{
    train.optimizer.lr.peak = loguniform(3e-3, 3e-2)
  }}
  sampler = random(seed = 0)
}}

sweep tiny.bad {{
  "Two of its learning rates cannot train: the pruner should stop those it can judge."
  experiment = tiny.evals
  metric = dev.loss
  goal = minimize
  trials = 3
  space {{
    train.optimizer.lr.peak = choice([1e-8, 2e-2, 1e-7])
  }}
  sampler = grid(seed = 0)
  pruner = median(startup_trials = 1, warmup_steps = 0)
}}
"""


def sweep_spec(
    folder: Path, steps: int = 20, every: int = 5, checkpoint_every: int | None = None
) -> Path:
    """The tiny LM, an experiment of it that evaluates every `every` steps and checkpoints every
    `checkpoint_every` (default: `every`; a stopped run checkpoints where it stops anyway, and a
    checkpoint of the tiny LM costs about 0.2 CPU-s), and two sweeps over it."""
    folder.mkdir(parents=True, exist_ok=True)
    lm_corpus(folder)
    sweeps = SWEEPS.format(steps=steps, every=every, checkpoint_every=checkpoint_every or every)
    text = LM_SPEC.format(common=COMMON.as_posix()) + sweeps
    spec = folder / "lm.seq"
    spec.write_text(text)
    return spec


def sweep_argv(spec: Path, name: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "seqc.cli", "sweep", str(spec), "-s", name, *args]


def run_sweep(
    spec: Path, name: str, *args: str, timeout: float = 300
) -> subprocess.CompletedProcess:
    return subprocess.run(
        sweep_argv(spec, name, *args),
        cwd=spec.parent,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def journal_study(folder: Path, name: str) -> optuna.Study:
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    storage = JournalStorage(JournalFileBackend(str(folder / "study.journal")))
    return optuna.load_study(study_name=name, storage=storage)


def wait_for(check: Callable[[], bool], limit: float, what: str) -> None:
    deadline = time.monotonic() + limit
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _ours(folder: Path) -> list[int]:
    found = subprocess.run(["pgrep", "-f", str(folder)], capture_output=True, text=True).stdout
    return [int(p) for p in found.split() if int(p) != os.getpid()]


@pytest.fixture
def sweep_folder(tmp_path: Path) -> Iterator[Path]:
    """A folder for one test's sweep; every process still running with it in its command line
    when the test ends (a worker, a trial) is a failure, and is killed."""
    yield tmp_path
    left = _ours(tmp_path)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left running: {left}"
