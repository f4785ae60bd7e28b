"""The training loop: steps, progress bar, periodic evaluation and checkpoints, exact resume.

Exactness of `--resume`: the checkpoint holds params, optimizer state, step and rng; the data
order is a pure function of (seed, step), so a resumed run sees the same batches in the same
order and reaches the same parameters as an uninterrupted one.

A run never loses work: everything that can refuse it (the run directory, the resume's
settings, the placement, the devices) is checked before anything is written; the run owns its
directory through an OS lock (`seqc.run.rundir.lock`); SIGINT or SIGTERM stops it after the step in
flight with a checkpoint (`seqc.run.train.interrupt`); a damaged newest checkpoint is set aside and
the newest good one resumed; metrics never hold a step twice; a loss that stops being finite
ends the run at once, before a checkpoint could save the broken weights.
"""

from __future__ import annotations

import contextlib
import math
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from seqc.backends import registry
from seqc.backends.api import (
    CheckpointStore,
    Cluster,
    MetricsLost,
    Model,
    MultiTaskModel,
    NoSpace,
    fetch,
)
from seqc.compiler.expert_terms import is_figure
from seqc.compiler.placement.plan import Placement
from seqc.compiler.sharding import ShardingPlan
from seqc.run.report import NoProgress, PlainReporter, Reporter
from seqc.run.rundir import identity
from seqc.run.rundir.directory import RunDir
from seqc.run.scoring.evaluate import evaluate
from seqc.run.session import MultiTaskSession, Session
from seqc.run.train.checks import check_lazy_rows, check_multitask, check_resumable, check_strategy
from seqc.run.train.dev import dev_line, error_rates, translation_scores
from seqc.run.train.failures import (
    checkpoint_no_space,
    collective,
    loss_not_finite,
)
from seqc.run.train.interrupt import NAMES, Interrupted, StopRequests
from seqc.run.train.layout import plan_mesh, plan_placement
from seqc.run.train.mix import Mix
from seqc.run.train.patience import Patience
from seqc.run.train.record import loader_state_at, minutes_before, model_params, run_info
from seqc.run.train.schedule import Schedule, learning_rate
from seqc.run.train.stepper import MultiTaskSteps, TaskSteps
from seqc.run.train.warm_start import WarmStart, warm_start


@dataclass
class TrainResult:
    run_dir: Path
    steps: int
    state: Any
    model: Model | MultiTaskModel
    backend: str = "jax"
    history: list[dict[str, Any]] = field(default_factory=list)
    dev_before: dict[str, Any] | None = None
    dev_after: dict[str, Any] | None = None
    tasks_before: dict[str, dict[str, Any]] | None = None
    """A multi-task run: each task's dev figures before training (`dev_before` is None)."""
    tasks_after: dict[str, dict[str, Any]] | None = None


def train(
    session: Session | MultiTaskSession,
    run_dir: Path,
    *,
    resume: bool = False,
    reporter: Reporter | None = None,
    eval_batches: int = 50,
    progress: bool = True,
    eval_before: bool = False,
    eval_after: bool = True,
    backend: str = "jax",
    model_options: dict[str, Any] | None = None,
    cluster: Cluster | None = None,
) -> TrainResult:
    """Train `session`'s task on `backend` ("jax" or "tf"): the same loop, data order, logs,
    run directory and checkpoints schedule on every backend. A placement the spec asks for
    (`distribution.placement`) is planned and, on a backend that places ops, run. A
    `MultiTaskSession` trains the tasks of a multi-task experiment together, in their mix. What
    the run does is said through `reporter` (default: plain lines on stderr)."""
    reporter = reporter or PlainReporter()
    cluster = cluster or Cluster()
    engine = registry.backend(backend)
    cfg = session.train_config
    rate = learning_rate(cfg, session.resolved.span("train.optimizer"))
    run = RunDir(run_dir, writer=cluster.primary)
    run.check(session.resolved, resume)
    if resume:
        identity.check_resume(run_dir, session)  # the model and data the run trained, or none
        check_resumable(run.checkpoints, engine)
    check_strategy(session.resolved, engine, cluster)
    seed = cfg.seed
    warn = reporter.warn
    steps: TaskSteps | MultiTaskSteps
    if isinstance(session, MultiTaskSession):
        mix = Mix.of(session.resolved)
        check_multitask(session, cluster)
        placement, sharding = None, None
        joint = engine.multitask_model(session.multi, cfg, mix.weights, **(model_options or {}))
        reporter.info(mix.describe())
        steps = MultiTaskSteps(session, joint, mix, seed, warn)
        model: Model | MultiTaskModel = joint
    else:
        check_lazy_rows(session, cluster, reporter)
        placement = plan_placement(session, engine, reporter)
        sharding = plan_mesh(session, placement, cluster)
        devices = None if placement is None else placement.devices
        # The model before the run directory: a device the plan lacks is an error before any
        # write.
        # a plan names the ops of the graph as lowered: a placed run trains that graph
        compiled = session.compiled if placement is None else session.compiled.without_passes()
        model = engine.model(
            compiled, cfg, placement=devices, sharding=sharding, **(model_options or {})
        )
        steps = TaskSteps(session, model, seed, warn)
    # A warm start's source and map are checked before the run directory is touched, as well.
    warm = None if resume else warm_start(session.resolved, model_params(session))
    # The primary process owns the directory for the whole group: only it writes there (the
    # checkpoints aside, which every process writes together).
    with run.lock() if cluster.primary else contextlib.nullcontext():
        run.check(session.resolved, resume, locked=True)  # again: no other run writes here now
        checkpoints = engine.checkpoints(run.checkpoints, cfg.keep_checkpoints)
        try:
            loop = Loop(session, steps, run, model, checkpoints, rate, reporter, eval_batches)
            loop.agree = engine.any_process if cluster.several else None
            loop.processes = cluster.num_processes
            state, start = loop.start(resume, placement, backend, sharding, warm)
            result = TrainResult(run_dir, cfg.steps, state, model, backend=backend)
            loop.result = result
            # the dev evaluations around a run (`seqc train --no-dev-eval` skips them) are said
            # as they start: at a large vocabulary one takes minutes
            if eval_before and loop.has_dev and start == 0:
                if cluster.primary:
                    reporter.info(loop.evaluating("before training"))
                result.tasks_before = loop.evaluate(state, 0)
            result.state = collective(engine, cluster, loop.train, state, start, progress)
            result.steps = loop.stopped_at or result.steps
            if eval_after and loop.has_dev:
                if cluster.primary:
                    reporter.info(loop.evaluating(f"after {result.steps} steps"))
                result.tasks_after = loop.evaluate(result.state, result.steps)
            if not steps.several:  # one task: its figures as they are
                name = session.resolved.tasks[0]
                result.dev_before = (result.tasks_before or {}).get(name)
                result.dev_after = (result.tasks_after or {}).get(name)
                result.tasks_before = result.tasks_after = None
        finally:
            checkpoints.close()
            run.close()
    return result


class Loop:
    """One training run's loop over a locked run directory."""

    def __init__(
        self,
        session: Session | MultiTaskSession,
        steps: TaskSteps | MultiTaskSteps,
        run: RunDir,
        model: Model | MultiTaskModel,
        checkpoints: CheckpointStore,
        rate: Schedule,
        reporter: Reporter,
        eval_batches: int,
    ) -> None:
        self.session, self.steps, self.run, self.model = session, steps, run, model
        self.checkpoints, self.rate, self.reporter = checkpoints, rate, reporter
        self.eval_batches = eval_batches
        cfg = session.train_config
        self.total = cfg.steps
        self.log_every = max(cfg.log_every, 1)
        self.eval_every, self.ckpt_every = cfg.eval_every, cfg.checkpoint_every
        self.dev_translations = cfg.dev_translations
        self.patience = Patience(cfg.patience)
        self.stopped_at: int | None = None
        self.started = time.perf_counter()
        """The step an early stop ended the run at (`train.patience`)."""
        self.has_dev = any(u.has_dev for u in steps.units.values())
        self.pending: list[tuple[int, Any]] = []
        self.window = (0.0, time.perf_counter())
        self.result: TrainResult | None = None
        self.processes = 1
        self.loader_state: dict[str, dict[str, Any]] | None = None
        """Resuming: each task's data loader state, as the checkpoint resumed from recorded."""
        self.agree: Callable[[bool], bool] | None = None
        """With several processes: whether any of them was asked to stop (all call it at each
        step, so all stop at the same one and write one checkpoint together)."""

    # ---------------------------------------------------------------- start
    def start(
        self,
        resume: bool,
        placement: Placement | None,
        backend: str,
        sharding: ShardingPlan | None = None,
        warm: WarmStart | None = None,
    ) -> tuple[dict[str, Any], int]:
        """The state to train from, and its step: a fresh one (with the params of a `warm`
        start), or the newest good checkpoint (damaged newer ones set aside, with a warning
        naming each)."""
        session, run = self.session, self.run
        seed = session.train_config.seed
        given = self.steps.initial()
        if warm is not None:
            given |= warm.given
            self.reporter.info(warm.summary())
        state = self.model.init(seed, given)
        if not resume:
            info = run_info(
                session, self.steps, self.model, backend, seed, placement, sharding, self.processes
            )
            info[identity.KEY] = identity.record(session)
            if warm is not None:
                info["init_from"] = warm.record()
            run.start(session.program, session.resolved, info)
            return state, 0
        state = self.checkpoints.restore(state)
        for why in self.checkpoints.skipped:
            self.reporter.warn(f"{why}; it was set aside")
        start = int(np.asarray(state["step"]))
        run.resumed(session.program, session.resolved, start)
        self.started -= 60.0 * minutes_before(run.metrics_path, start)
        self.loader_state = loader_state_at(run.metrics_path, start)
        self.reporter.info(f"resumed from step {start} of {run.checkpoints}")
        return state, start

    # ---------------------------------------------------------------- steps
    def train(self, state: dict[str, Any], start: int, progress: bool) -> dict[str, Any]:
        batches = self.steps.batches(start, self.loader_state)
        bar = self.reporter.progress(self.total, start) if progress else NoProgress()
        announce = lambda signum: self.reporter.info(  # noqa: E731
            f"{NAMES.get(signum, signum)}: stopping after this step with a checkpoint "
            "(again to abort at once, losing the steps since the last checkpoint)"
        )

        def checkpoint(done: int, state: dict[str, Any]) -> None:
            self.flush(done)  # (`save` would) first: the bar shows the loss it saves with
            if self.history:
                tps = self.history[-1].get("tokens_per_s", 0.0)
                bar.update(loss=self._losses(), tokens_per_s=tps)
            self.save(done, state)

        with bar, StopRequests(announce) as stop:
            for step in range(start, self.total):
                state, metrics = self.steps.step(state, next(batches), self.rate(step))
                done = step + 1
                self.pending.append((done, metrics))
                if done % self.log_every == 0 or done == self.total:
                    self.flush(done)
                    last = self.history[-1]
                    bar.update(loss=self._losses(), tokens_per_s=last.get("tokens_per_s", 0.0))
                bar.update(done)
                stale = False
                if self._eval_due(done):
                    try:
                        dev = self.evaluate(state, done)
                    except Exception:
                        # the steps since the last checkpoint are not lost to a failed
                        # evaluation (a dev file gone, a decoder's bug): --resume goes on here
                        checkpoint(done, state)
                        raise
                    shown = ", ".join(
                        (f"{t} " if self.steps.several else "") + dev_line(d)
                        for t, d in dev.items()
                    )
                    self.reporter.info(f"step {done}: dev {shown}")
                    stale = self.patience.update(done, dev)
                if (self.ckpt_every and done % self.ckpt_every == 0) or done == self.total or stale:
                    checkpoint(done, state)
                if stale and done < self.total:
                    self.reporter.info(self.patience.explain(done))
                    self.run.log({"step": done, "split": "train", "early_stop": True})
                    self.stopped_at = done
                    break
                asked = stop.signum is not None
                if self.agree is not None:
                    asked = self.agree(asked)
                if asked and done < self.total:
                    checkpoint(done, state)
                    raise Interrupted(done, stop.signum or signal.SIGTERM)
        return state

    def _eval_due(self, done: int) -> bool:
        every = self.eval_every
        return self.has_dev and bool(every) and done % every == 0 and done != self.total

    @property
    def history(self) -> list[dict[str, Any]]:
        assert self.result is not None
        return self.result.history

    def flush(self, done: int) -> None:
        """Fetch the pending steps' metrics (waiting for them), log them, and stop the run if
        a loss is not finite."""
        if not self.pending:
            return
        tokens, since = self.window
        fetched = [
            (s, {t: fetched_metrics(m) for t, m in per_task.items()})
            for s, per_task in self.pending
        ]
        elapsed = time.perf_counter() - since
        for s, per_task in fetched:
            for task, m in per_task.items():
                if m is None:  # its worker died holding them (an asynchronous run goes on)
                    self.reporter.info(f"note: step {s}'s metrics were lost with its worker")
                    continue
                tokens += float(m["tokens"])
                record: dict[str, Any] = {"step": s, "split": "train"}
                if self.steps.several:
                    record["task"] = task
                record |= {
                    "loss": float(m["loss"]),
                    "grad_norm": float(m["grad_norm"]),
                    "lr": self.rate(s - 1) * self._scale(task),
                }
                record |= expert_figures(m)
                if s == done:
                    record["tokens_per_s"] = tokens / max(elapsed, 1e-9)
                self.run.log(record)
                self.history.append(record)
                if not math.isfinite(record["loss"]):
                    self.pending.clear()
                    raise loss_not_finite(
                        s,
                        record["loss"],
                        task,
                        last=self.checkpoints.latest(),
                        run=self.run.path,
                        checkpoints=self.run.checkpoints,
                        resolved=self.session.resolved,
                        several=self.steps.several,
                    )
        self.pending.clear()
        self.window = (0.0, time.perf_counter())

    def _losses(self) -> str:
        """The latest training loss, or each task's latest (a multi-task run), for the bar."""
        if not self.steps.several:
            return f"{self.history[-1]['loss']:.3f}"
        latest: dict[str, float] = {}
        for record in reversed(self.history):
            if record.get("split") == "train" and "task" in record:
                latest.setdefault(record["task"], record["loss"])
            if len(latest) == len(self.steps.units):
                break
        return " ".join(f"{t} {latest[t]:.3f}" for t in self.steps.units if t in latest)

    def _scale(self, task: str) -> float:
        return self.steps.mix.lr_scale[task] if isinstance(self.steps, MultiTaskSteps) else 1.0

    def save(self, done: int, state: dict[str, Any]) -> None:
        """A checkpoint of `state` at step `done`, once its metrics are known to be finite."""
        self.flush(done)
        if self.checkpoints.latest() != done:
            if self.agree is not None:  # every process still there: a collective save started
                self.agree(False)  # with one gone would wait for it, and leave a half step
            try:
                self.checkpoints.save(done, state)
            except NoSpace as e:
                raise checkpoint_no_space(e, self.checkpoints.latest()) from None
            minutes = (time.perf_counter() - self.started) / 60.0
            loader = self.steps.loader_state()  # where each task's data stream goes on from
            record = {"step": done, "split": "checkpoint", "minutes": minutes, "loader": loader}
            self.run.log(record)

    def evaluating(self, when: str) -> str:
        """The line said as a dev evaluation around the run starts."""
        batches = f"at most {self.eval_batches} batches" if self.eval_batches else "all of it"
        return f"evaluating on dev {when} ({batches}; --no-dev-eval skips this)"

    def evaluate(self, state: dict[str, Any], step: int) -> dict[str, dict[str, Any]]:
        """Each task's dev figures (a task without dev data is left out), logged."""
        out = {}
        for task, unit in self.steps.units.items():
            if not unit.has_dev:
                continue
            params = unit.params(state["params"])
            dev = evaluate(unit.model, params, unit.session.pipeline, "dev", self.eval_batches)
            dev |= error_rates(unit, params)
            if step:  # an untrained model's translations score 0 and run to max_length
                dev |= translation_scores(unit, params, self.dev_translations)
            tag = {"task": task} if self.steps.several else {}
            minutes = (time.perf_counter() - self.started) / 60.0  # this process's, for curves
            self.run.log({"step": step, "split": "dev", **tag, **dev, "minutes": minutes})
            out[task] = dev
        return out


def fetched_metrics(metrics: Any) -> dict[str, Any] | None:
    """A step's metrics, or None when the backend lost them with a worker (`MetricsLost`)."""
    try:
        return fetch(metrics)
    except MetricsLost:
        return None


def expert_figures(metrics: dict[str, Any]) -> dict[str, Any]:
    """The mixture-of-experts figures of a step's metrics (`seqc.compiler.expert_terms`), as
    `metrics.jsonl` keeps them: each layer's auxiliary loss and dropped fraction a number, its
    experts' loads a list."""
    out: dict[str, Any] = {}
    for k, v in metrics.items():
        if is_figure(k):
            a = np.asarray(v, np.float64)
            out[k] = float(a) if a.ndim == 0 else [round(float(x), 6) for x in a.ravel()]
    return out
