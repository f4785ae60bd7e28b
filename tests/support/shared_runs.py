"""Runs of the tiny LM (`tiny_specs.LM_SPEC`) trained once per test session and copied by the
tests that read them (`lm_runs` in `tests/conftest.py`).

Why: a test that only exports, evaluates, decodes or breaks a trained run does not need its own
training, and several files each trained the same one. A run is trained by the first test that
asks for it, under a file lock in a folder every xdist worker sees, so the workers share it too;
each test gets a copy of its own (`shutil.copytree`), since most of them write into the run
directory. The copy's spec and corpus are the test's own, written from the same text: a run
records its model and data by content (`seqc.run.rundir.identity`), not by path.

`once` is the lock-and-mark the runs use, for other things a session makes once.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from tiny_specs import COMMON, LM_SPEC, lm_corpus
from typer.testing import CliRunner

from seqc.resolve.program import SEQC_PATH


class LmRuns:
    """JAX runs of `LM_SPEC` under `root`, one per list of `--set` overrides."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def copy(self, dest: Path, *sets: str) -> Path:
        """A copy at `dest` of the run of `LM_SPEC` trained with `sets` (`--set` overrides; none:
        the spec's own 20 steps, checkpoints at 10 and 20)."""
        shutil.copytree(self._run(sets), dest)
        return dest

    def _run(self, sets: tuple[str, ...]) -> Path:
        key = hashlib.sha256("\n".join(sets).encode()).hexdigest()[:12]
        return once(self.root / key, lambda folder: _train(folder, sets)) / "run"


def once(folder: Path, make: Callable[[Path], None]) -> Path:
    """`folder`, filled by `make(folder)` unless a process of the session already did: the first
    to ask makes it while the others wait on a lock. A `make` that fails leaves no mark, and the
    next to ask makes it again."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    done = folder.parent / f"{folder.name}.done"
    with (folder.parent / f"{folder.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(folder)
            done.touch()
    return folder


def _train(folder: Path, sets: tuple[str, ...]) -> None:
    from seqc.cli import app

    lm_corpus(folder)
    spec = folder / "lm.seq"
    spec.write_text(LM_SPEC.format(common=COMMON.as_posix()))
    args = ["train", str(spec), "-e", "tiny", "--cache-dir", str(folder / "cache")]
    args += ["--run-dir", str(folder / "run"), "--no-progress"]
    for s in sets:
        args += ["--set", s]
    with pytest.MonkeyPatch.context() as mp:  # conftest's library root, for a session fixture
        mp.setenv(SEQC_PATH, str(folder.parent))
        result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
