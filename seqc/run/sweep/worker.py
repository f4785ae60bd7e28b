"""One worker of a sweep: ask Optuna for a trial, run it as its own `seqc train` process,
report its dev metric at every evaluation, and stop it when the pruner says so; again, until the
sweep's budget is spent or the worker is told to stop.

A worker is what `seqc sweep ... --workers 1` runs. `--workers K` starts K of them on this
machine; a worker started on another machine with the same `--storage` URL joins the same
study. Trials are driven by `study.optimize` one at a time, so Optuna's heartbeat (RDB storages)
runs around each, and the sampler is made afresh with a seed of this worker and this moment
(`engine.sampler`).
"""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import optuna
from optuna.trial import TrialState

from seqc.compiler.sweep_trials import check_trial
from seqc.resolve.program import Program
from seqc.resolve.sweep import ResolvedSweep, trial_overrides
from seqc.run.sweep import engine, ledger, lost, process
from seqc.spec.errors import SeqcError

Say = Callable[[str], None]


class TrialEnded(Exception):
    """A trial that ends failed on purpose (its reason is in its user attributes)."""


class Stop(Exception):
    """The worker was told to stop; its trial is checkpointed and marked interrupted."""


@dataclass
class StopFlag:
    """SIGINT and SIGTERM: the first stops the running trial (it checkpoints) and then this
    worker; the handlers are this worker's only while it works."""

    raised: int | None = None
    _old: dict[int, Any] = field(default_factory=dict)

    def __enter__(self) -> StopFlag:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.raised = self.raised or signum

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)

    def __bool__(self) -> bool:
        return self.raised is not None


@dataclass
class Worker:
    program: Program
    sweep: ResolvedSweep
    study: optuna.Study
    folder: Path
    say: Say
    index: int = 0
    backend: str | None = None
    budget: int | None = None
    stop: StopFlag = field(default_factory=StopFlag)
    ran: int = 0

    @property
    def trials(self) -> int:
        return self.budget if self.budget is not None else self.sweep.trials

    def run(self) -> int:
        """Trials until the budget is spent; the number this worker ran."""
        with self.stop:
            while not self.stop:
                self._recover()
                trials = self.study.get_trials(deepcopy=False)
                waiting = any(t.state == TrialState.WAITING for t in trials)
                running = sum(t.state == TrialState.RUNNING for t in trials)
                if ledger.counted(trials) + running >= self.trials and not waiting:
                    break
                self.study.sampler = engine.sampler(self.sweep, 7919 * self.index + len(trials))
                try:
                    self.study.optimize(
                        self.objective, n_trials=1, catch=(TrialEnded,), gc_after_trial=False
                    )
                except Stop:
                    break
        return self.ran

    def _recover(self) -> None:
        """Fail this host's trials whose worker died, and queue every stopped or lost one."""
        for t in lost.fail_lost(self.study):
            self.say(f"trial {t.number}: its worker is gone (pid {t.user_attrs.get('worker_pid')})")
        ledger.enqueue_retries(self.study)

    # -------------------------------------------------------------------------- one trial

    def objective(self, trial: optuna.Trial) -> float:
        values = {d.path: engine.suggest(trial, d) for d in self.sweep.space}
        trials = self.study.get_trials(deepcopy=False)
        for key, value in lost.me().items():
            trial.set_user_attr(key, value)
        if ledger.duplicate(trials, trial):
            return self._end(trial, ledger.DUPLICATE, "")
        if "retry_of" not in trial.user_attrs and ledger.surplus(trials, trial.number, self.trials):
            return self._end(trial, ledger.SURPLUS, "")
        label = trial.user_attrs.get("retry_of", trial.number)
        run_dir = Path(trial.user_attrs.get("run_dir") or self.folder / f"trial-{label:03d}")
        overrides = trial_overrides(self.sweep, values)
        trial.set_user_attr("run_dir", str(run_dir))
        trial.set_user_attr("overrides", overrides)
        shown = " ".join(overrides) or "(the base experiment)"
        again = f", again from {run_dir}" if "retry_of" in trial.user_attrs else ""
        self.say(f"trial {trial.number}{again}: {shown}")
        try:
            check_trial(self.program, self.sweep, values)
        except SeqcError as e:
            return self._end(trial, ledger.INVALID, e.message, say=f"skipped: {e.message}")
        command = process.TrialCommand(
            spec=Path(self.sweep.file),
            experiment=self.sweep.experiment,
            overrides=overrides,
            run_dir=run_dir,
            log=self.folder / "logs" / f"trial-{trial.number:03d}.log",
            backend=self.backend,
            sweep_folder=self.folder,
        )
        trial.set_user_attr("log", str(command.log))
        self.ran += 1
        try:
            return self._train(trial, command)
        finally:
            trial.set_user_attr("command", command.shown())

    def _end(self, trial: optuna.Trial, why: str, message: str, say: str | None = None) -> float:
        trial.set_user_attr("reason", why)
        if message:
            trial.set_user_attr("error", message[:2000])
        if say:
            self.say(f"trial {trial.number}: {say}")
        raise TrialEnded(why)

    def _train(self, trial: optuna.Trial, command: process.TrialCommand) -> float:
        metric = self.sweep.metric
        seen: dict[int, float] = {}
        state = {"pruned_at": None, "checkpoint": None}
        started = time.monotonic()

        def on_record(record: dict[str, Any]) -> None:
            split = record.get("split")
            step = int(record.get("step", 0))
            if split == "checkpoint":
                state["checkpoint"] = step
            if split != "dev" or record.get("task", metric.task) != metric.task:
                return
            value = record.get(metric.name)
            if not isinstance(value, int | float) or step in seen:
                return
            seen[step] = float(value)
            if step == 0 or state["pruned_at"] is not None:
                return  # the untrained model's figure says nothing about the values
            trial.report(float(value), step)
            if math.isfinite(value) and trial.should_prune():
                state["pruned_at"] = step

        proc = process.start(command)
        trial.set_user_attr("trial_pid", proc.pid)
        status = process.follow(
            proc,
            command.run_dir / "metrics.jsonl",
            on_record,
            lambda: bool(self.stop) or state["pruned_at"] is not None,
        )
        minutes = (time.monotonic() - started) / 60.0
        trial.set_user_attr("minutes", round(minutes, 2))
        last = max(seen) if seen else None
        if state["pruned_at"] is not None and (status == 0 or process.stopped(status)):
            trial.set_user_attr("stopped_at", state["checkpoint"] or state["pruned_at"])
            self.say(
                f"trial {trial.number}: pruned at step {state['pruned_at']} "
                f"({metric.text} {seen[state['pruned_at']]:.4g}); its run stopped at step "
                f"{state['checkpoint'] or state['pruned_at']}"
            )
            raise optuna.TrialPruned()
        if self.stop and process.stopped(status):
            trial.set_user_attr("reason", ledger.INTERRUPTED)
            trial.set_user_attr("stopped_at", state["checkpoint"])
            self.say(
                f"trial {trial.number}: stopped at step {state['checkpoint']} "
                "(checkpointed; the next `seqc sweep` resumes it)"
            )
            raise Stop()
        if status != 0:
            tail = process.last_lines(command.log)
            why = f"`seqc train` exited {status}: " + (tail[-1] if tail else "no output")
            return self._end(
                trial, ledger.ERROR, "\n".join(tail), say=f"failed: {why}; see {command.log}"
            )
        if last is None:
            return self._end(
                trial,
                ledger.ERROR,
                f"the run wrote no dev `{metric.name}`",
                say=f"failed: the run wrote no dev {metric.name} (is there dev data?)",
            )
        trial.set_user_attr("steps", last)
        if not math.isfinite(seen[last]):
            return self._end(
                trial,
                ledger.ERROR,
                f"{metric.text} is {seen[last]}",
                say=f"diverged: {metric.text} {seen[last]}",
            )
        self.say(
            f"trial {trial.number}: {metric.text} {seen[last]:.4g} at step {last} "
            f"({minutes:.1f} min)"
        )
        return seen[last]
