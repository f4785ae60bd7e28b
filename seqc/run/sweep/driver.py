"""`seqc sweep`: open the study, run its workers, stop them cleanly, and say what was found.

With one worker the worker runs in this process. With K, this process starts K workers, each
the command a user would run on another machine (`seqc sweep ... --workers 1`), and forwards a
Ctrl-C or SIGTERM to them: each stops its trial (the run checkpoints) and marks it interrupted,
and running the same command again resumes the study. Every worker writes the study; this
process only watches them.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import optuna

from seqc.resolve.program import Program
from seqc.resolve.sweep import ResolvedSweep
from seqc.run.sweep import compile_cache, engine, ledger, lost
from seqc.run.sweep import study as studies
from seqc.run.sweep.worker import Say, Worker

STOPPED_EXIT = 128 + signal.SIGTERM


@dataclass
class SweepRun:
    """A sweep as one `seqc sweep` command runs it."""

    program: Program
    sweep: ResolvedSweep
    folder: Path
    storage: str | None = None
    workers: int = 1
    trials: int | None = None
    backend: str | None = None
    index: int = 0
    base_first: bool = False

    def open(self) -> optuna.Study:
        storage = studies.open_storage(self.storage, self.folder)
        return studies.open_study(
            self.sweep, storage, engine.sampler(self.sweep), engine.pruner(self.sweep)
        )

    def worker_argv(self, index: int) -> list[str]:
        args = [sys.executable, "-m", "seqc.cli", "sweep", self.sweep.file, "-s", self.sweep.name]
        args += ["--workers", "1", "--worker-index", str(index), "--dir", str(self.folder)]
        if self.storage:
            args += ["--storage", self.storage]
        if self.trials is not None:
            args += ["--trials", str(self.trials)]
        if self.backend:
            args += ["--backend", self.backend]
        return [*args, "--quiet-summary"]

    def run(self, say: Say) -> int:
        """Run the sweep's workers to the end of its budget; the exit status (143: stopped)."""
        study = self.open()
        torn = compile_cache.drop_torn(self.folder)
        if torn:
            say(f"{torn} torn compiled program(s) of a killed trial removed; they compile again")
        if self.base_first and not study.get_trials(deepcopy=False):
            base = base_values(self.program, self.sweep)
            study.enqueue_trial(base, user_attrs={"base": True})
            say(f"trial 0 is the base experiment's own values: {base}")
        for t in lost.fail_lost(study):  # once, before K workers race to it
            say(f"trial {t.number}: its worker is gone (pid {t.user_attrs.get('worker_pid')})")
        queued = ledger.enqueue_retries(study)
        if queued:
            say(f"{queued} stopped trial(s) queued again; they resume from their checkpoints")
        if self.workers == 1:
            worker = Worker(
                self.program,
                self.sweep,
                study,
                self.folder,
                say,
                index=self.index,
                backend=self.backend,
                budget=self.trials,
            )
            worker.run()
            return STOPPED_EXIT if worker.stop else 0
        return self._several(say)

    def _several(self, say: Say) -> int:
        procs = [subprocess.Popen(self.worker_argv(i)) for i in range(self.workers)]
        say(f"{self.workers} workers: pids {', '.join(str(p.pid) for p in procs)}")
        stopped = False

        def forward(signum: int, frame: FrameType | None) -> None:
            nonlocal stopped
            stopped = True
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)

        old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            codes = [p.wait() for p in procs]
        finally:
            for s, h in old.items():
                signal.signal(s, h)
        if stopped:
            return STOPPED_EXIT
        bad = [c for c in codes if c not in (0, STOPPED_EXIT)]
        return bad[0] if bad else 0


def base_values(program: Program, sweep: ResolvedSweep) -> dict[str, object]:
    """The base experiment's values of the space's paths, refused where one lies outside its
    distribution (a trial of them would not be a point of this search)."""
    from seqc.resolve.experiment import resolve
    from seqc.spec.errors import UsageError

    resolved = resolve(program, sweep.experiment, [])
    values: dict[str, object] = {}
    for dist in sweep.space:
        value = resolved.get(dist.path)
        inside = (
            value in dist.choices
            if dist.kind == "choice"
            else isinstance(value, int | float)
            and dist.low is not None
            and dist.high is not None
            and dist.low <= value <= dist.high
        )
        if not inside:
            raise UsageError(
                f"--base-first: the base experiment's {dist.path} ({value!r}) is not in the "
                f"sweep's {dist.kind} distribution",
                span=dist.span,
                code="base-outside-space",
                hint="widen the distribution to hold it, or leave out --base-first",
            )
        values[dist.path] = value
    return values
