"""The training loop: steps, progress bar, periodic evaluation and checkpoints, exact resume.

Exactness of `--resume`: the checkpoint holds params, optimizer state, step and rng; the data
order is a pure function of (seed, step), so a resumed run sees the same batches in the same
order and reaches the same parameters as an uninterrupted one.

A run never loses work: everything that can refuse it (the run directory, the resume's
settings, the placement, the devices) is checked before anything is written; the run owns its
directory through an OS lock (`seqc.run.lock`); SIGINT or SIGTERM stops it after the step in
flight with a checkpoint (`seqc.run.interrupt`); a damaged newest checkpoint is set aside and
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
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from seqc.backends import registry
from seqc.backends.api import Backend, CheckpointStore, Cluster, MetricsLost, Model, fetch
from seqc.backends.weights import read_weights
from seqc.compiler.placement.plan import Placement, place
from seqc.compiler.sharding import ShardingPlan, check_batches, mesh_of, plan_sharding
from seqc.compiler.sparse_rows import lazy_tables
from seqc.run.candidates import candidates_for
from seqc.run.evaluate import evaluate
from seqc.run.interrupt import NAMES, Interrupted, StopRequests
from seqc.run.rundir import RunDir
from seqc.run.schedule import Schedule, learning_rate
from seqc.run.session import Session
from seqc.spec.errors import CheckError, DeviceError, SeqcError, UsageError


class LossNotFinite(SeqcError):
    """The training loss became NaN or infinite."""

    phase = "train"


@dataclass
class TrainResult:
    run_dir: Path
    steps: int
    state: Any
    model: Any
    backend: str = "jax"
    history: list[dict[str, Any]] = field(default_factory=list)
    dev_before: dict[str, Any] | None = None
    dev_after: dict[str, Any] | None = None


def train(
    session: Session,
    run_dir: Path,
    *,
    resume: bool = False,
    console: Console | None = None,
    eval_batches: int = 50,
    progress: bool = True,
    eval_before: bool = False,
    backend: str = "jax",
    model_options: dict[str, Any] | None = None,
    cluster: Cluster | None = None,
) -> TrainResult:
    """Train `session`'s task on `backend` ("jax" or "tf"): the same loop, data order, logs,
    run directory and checkpoints schedule on every backend. A placement the spec asks for
    (`distribution.placement`) is planned and, on a backend that places ops, run."""
    console = console or Console(stderr=True)
    cluster = cluster or Cluster()
    engine = registry.backend(backend)
    cfg = session.train_config
    rate = learning_rate(cfg, session.resolved.span("train.optimizer"))
    run = RunDir(run_dir, writer=cluster.primary)
    run.check(session.resolved, resume)
    if resume:
        _check_resumable(run.checkpoints, engine)
    _check_strategy(session, engine, cluster)
    _check_lazy_rows(session, cluster, console)
    placement = _placement(session, engine, console)
    sharding = _sharding(session, placement)
    devices = None if placement is None else placement.devices
    # The model before the run directory: a device the plan lacks is an error before any write.
    model = engine.model(
        session.compiled, cfg, placement=devices, sharding=sharding, **(model_options or {})
    )
    # The primary process owns the directory for the whole group: only it writes there (the
    # checkpoints aside, which every process writes together).
    with run.lock() if cluster.primary else contextlib.nullcontext():
        run.check(session.resolved, resume, locked=True)  # again: no other run writes here now
        checkpoints = engine.checkpoints(run.checkpoints)
        try:
            loop = _Loop(session, run, model, checkpoints, rate, console, eval_batches)
            loop.agree = engine.any_process if cluster.several else None
            loop.processes = cluster.num_processes
            state, start = loop.start(resume, placement, backend, sharding)
            result = TrainResult(run_dir, int(cfg["steps"]), state, model, backend=backend)
            loop.result = result
            if eval_before and loop.has_dev and start == 0:
                result.dev_before = loop.evaluate(state, 0)
            result.state = _collective(engine, cluster, loop.train, state, start, progress)
            if loop.has_dev:
                result.dev_after = loop.evaluate(result.state, result.steps)
        finally:
            checkpoints.close()
            run.close()
    return result


class _Loop:
    """One training run's loop over a locked run directory."""

    def __init__(
        self,
        session: Session,
        run: RunDir,
        model: Model,
        checkpoints: CheckpointStore,
        rate: Schedule,
        console: Console,
        eval_batches: int,
    ) -> None:
        self.session, self.run, self.model = session, run, model
        self.checkpoints, self.rate, self.console = checkpoints, rate, console
        self.eval_batches = eval_batches
        cfg = session.train_config
        self.total = int(cfg["steps"])
        self.log_every = max(int(cfg["log_every"]), 1)
        self.eval_every, self.ckpt_every = int(cfg["eval_every"]), int(cfg["checkpoint_every"])
        self.has_dev = "dev" in session.pipeline.splits
        self.candidates = candidates_for(
            session.compiled,
            session.pipeline,
            int(cfg["seed"]),
            warn=lambda text: console.print(f"warning: {text}", soft_wrap=True),
        )
        self.pending: list[tuple[int, Any]] = []
        self.window = (0.0, time.perf_counter())
        self.result: TrainResult | None = None
        self.processes = 1
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
    ) -> tuple[dict[str, Any], int]:
        """The state to train from, and its step: a fresh one, or the newest good checkpoint
        (damaged newer ones set aside, with a warning naming each)."""
        session, run = self.session, self.run
        seed = int(session.train_config["seed"])
        given = {} if self.candidates is None else self.candidates.initial(session.compiled)
        state = self.model.init(seed, given)
        if not resume:
            info = self._info(backend, seed, placement, sharding)
            run.start(session.program, session.resolved, info)
            return state, 0
        state = self.checkpoints.restore(state)
        for why in self.checkpoints.skipped:
            self.console.print(f"warning: {why}; it was set aside", soft_wrap=True)
        start = int(np.asarray(state["step"]))
        run.resumed(session.program, session.resolved, start)
        self.console.print(f"resumed from step {start} of {run.checkpoints}")
        return state, start

    def _info(
        self,
        backend: str,
        seed: int,
        placement: Placement | None,
        sharding: ShardingPlan | None,
    ) -> dict[str, Any]:
        session = self.session
        return {
            "experiment": session.resolved.name,
            "task": session.task,
            "backend": backend,
            "seed": seed,
            "data_seed": session.pipeline.seed,
            "params": sum(p.size for p in session.graph.params.values()),
            "data": session.pipeline.summary(),
            "placement": None
            if placement is None
            else {"algorithm": placement.plan.algorithm, "devices": placement.used},
            "mesh": None if sharding is None else dict(sharding.mesh),
            "topology": {
                "backend": backend,
                "processes": self.processes,
                "mesh": None if sharding is None else dict(sharding.mesh),
                "strategy": self.model.strategy,
            },
        }

    # ---------------------------------------------------------------- steps
    def train(self, state: dict[str, Any], start: int, progress: bool) -> dict[str, Any]:
        batches = self.session.pipeline.batches("train", start_step=start)
        bar = _progress(self.console, progress)
        announce = lambda signum: self.console.print(  # noqa: E731
            f"{NAMES.get(signum, signum)}: stopping after this step with a checkpoint "
            "(again to abort at once, losing the steps since the last checkpoint)"
        )
        with bar, StopRequests(announce) as stop:
            job = bar.add_task("train", total=self.total, completed=start, loss=math.nan, tps=0.0)
            for step in range(start, self.total):
                batch = next(batches)
                if self.candidates is not None:  # a sampled loss: the step's candidate words
                    batch = self.candidates.attach(batch, step)
                state, metrics = self.model.train_step(state, batch, self.rate(step))
                done = step + 1
                self.pending.append((done, metrics))
                if done % self.log_every == 0 or done == self.total:
                    self.flush(done)
                    last = self.history[-1]
                    bar.update(job, loss=last["loss"], tps=last.get("tokens_per_s", 0.0))
                bar.update(job, completed=done)
                if self._eval_due(done):
                    dev = self.evaluate(state, done)
                    self.console.print(f"step {done}: dev perplexity {dev['perplexity']:.2f}")
                if (self.ckpt_every and done % self.ckpt_every == 0) or done == self.total:
                    self.save(done, state)
                asked = stop.signum is not None
                if self.agree is not None:
                    asked = self.agree(asked)
                if asked and done < self.total:
                    self.save(done, state)
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
        fetched = [_fetched(m) for _, m in self.pending]
        elapsed = time.perf_counter() - since
        for (s, _), m in zip(self.pending, fetched, strict=True):
            if m is None:  # its worker died holding them (an asynchronous run goes on)
                self.console.print(f"note: step {s}'s metrics were lost with its worker")
                continue
            tokens += float(m["tokens"])
            record = {
                "step": s,
                "split": "train",
                "loss": float(m["loss"]),
                "grad_norm": float(m["grad_norm"]),
                "lr": self.rate(s - 1),
            }
            if s == done:
                record["tokens_per_s"] = tokens / max(elapsed, 1e-9)
            self.run.log(record)
            self.history.append(record)
            if not math.isfinite(record["loss"]):
                self.pending.clear()
                raise self._not_finite(s, record["loss"])
        self.pending.clear()
        self.window = (0.0, time.perf_counter())

    def _not_finite(self, step: int, loss: float) -> LossNotFinite:
        last = self.checkpoints.latest()
        resolved = self.session.resolved
        where = (
            f"the last good checkpoint is step {last} in {self.run.checkpoints}"
            if last is not None
            else "no checkpoint was written before it"
        )
        return LossNotFinite(
            f"the training loss became {loss} at step {step}; {where}",
            span=resolved.span("train.optimizer") or resolved.span("train"),
            path=str(self.run.path),
            code="loss-not-finite",
            hint="lower the learning rate, set train.clip_norm, or check the data; then resume "
            "from the last checkpoint (--resume) or start anew",
        )

    def save(self, done: int, state: dict[str, Any]) -> None:
        """A checkpoint of `state` at step `done`, once its metrics are known to be finite."""
        self.flush(done)
        if self.checkpoints.latest() != done:
            self.checkpoints.save(done, state)

    def evaluate(self, state: dict[str, Any], step: int) -> dict[str, Any]:
        pipeline = self.session.pipeline
        dev = evaluate(self.model, state["params"], pipeline, "dev", self.eval_batches)
        self.run.log({"step": step, "split": "dev", **dev})
        return dev


def _placement(session: Session, engine: Backend, console: Console) -> Placement | None:
    """The placement the spec asks for, planned and checked, or None when the plan puts
    everything on one device (what an unplaced program runs anyway). A backend that runs a
    step as one program on one device refuses a plan over several, at the spec's line."""
    dist = session.resolved.config["distribution"]
    asked = dist["placement"]
    if asked.kind == "single" and int(asked.args.get("device", 0)) == 0:
        return None
    from seqc.compiler.placement.report import summary

    placed = place(session.graph, session.resolved, session.task)
    if placed.trivial:
        console.print(f"placement {placed.plan.algorithm}: every op on device 0")
        return None
    if not engine.places_ops:
        raise CheckError(
            f"`placement = {asked.kind}` puts the model's ops on {placed.used} devices, but the "
            f"{engine.title} backend runs a training step as one program on one device",
            span=placed.span,
            code="cannot-place",
            hint="train with --backend tf (it pins each op to its device), or set "
            "distribution.placement = single",
        )
    console.print(f"placement ({engine.title} devices):\n{summary(placed.problem, placed.plan)}")
    return placed


def _collective(engine: Backend, cluster: Cluster, fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)`, with a collective that failed in a run of several processes (another one
    died: the launcher or the cluster names which) said as such, with what to do."""
    try:
        return fn(*args)
    except Exception as e:
        if not cluster.several or not engine.collective_failure(e):
            raise
        lines = [x.strip() for x in str(e).splitlines() if x.strip()] or [type(e).__name__]
        cause = lines[0] if not lines[0].endswith(":") else lines[-1]  # TF: "...error:" first
        raise DeviceError(
            f"process {cluster.process_id}: a collective with the run's other processes failed "
            f"({cause[:300]})",
            code="process-lost",
            hint="another process stopped or is unreachable; once the cause is fixed, resume "
            "the whole group from the last checkpoint with --resume",
        ) from None


def _check_strategy(session: Session, engine: Backend, cluster: Cluster) -> None:
    """`distribution.sync` against the backend and the processes: asynchronous training runs on
    TF with parameter servers (`seqc launch --ps K`); a cluster with servers trains async."""
    resolved = session.resolved
    span = resolved.span("distribution.sync")
    asks_async = resolved.config["distribution"]["sync"] == "async"
    servers = "ps" in cluster.spec
    if asks_async and not engine.trains_async:
        raise CheckError(
            f'`sync = "async"` trains with parameter servers, which the {engine.title} backend '
            "does not have",
            span=span,
            code="cannot-train-async",
            hint='train with --backend tf, or set distribution.sync = "sync"',
        )
    if asks_async and not servers:
        raise CheckError(
            '`sync = "async"` needs parameter servers and workers, and this run has none',
            span=span,
            code="no-parameter-servers",
            hint="start it with seqc launch -n 2 --ps 1 -- train ..., or on a cluster whose "
            "TF_CONFIG names a chief, workers and ps",
        )
    placement = resolved.config["distribution"]["placement"]
    if asks_async and placement.kind != "single":
        raise CheckError(
            f"asynchronous training runs each step whole on a worker; it cannot place ops by "
            f"`placement = {placement.kind}`",
            span=resolved.span("distribution.placement"),
            code="cannot-place",
            hint="set distribution.placement = single",
        )
    if servers and not asks_async:
        raise CheckError(
            "this run's cluster has parameter servers, but the experiment trains synchronously",
            span=span,
            code="sync-with-parameter-servers",
            hint='set distribution.sync = "async" (--set distribution.sync=async), or launch '
            "without --ps",
        )


def _fetched(metrics: Any) -> dict[str, Any] | None:
    """A step's metrics, or None when the backend lost them with a worker (`MetricsLost`)."""
    try:
        return fetch(metrics)
    except MetricsLost:
        return None


def _check_lazy_rows(session: Session, cluster: Cluster, console: Console) -> None:
    """`adam(lazy_rows = true)` runs on one device of one process, one step per update; say
    which params it updates by rows (`seqc.compiler.sparse_rows`)."""
    resolved, cfg, compiled = session.resolved, session.train_config, session.compiled
    if not (cfg["optimizer"].kind == "adam" and cfg["optimizer"].args.get("lazy_rows")):
        return
    span = resolved.span("train.optimizer") or resolved.span("train")
    dist = resolved.config["distribution"]
    why = None
    if math.prod(mesh_of(resolved).values()) > 1 or cluster.several:
        why = "a mesh of devices or several processes (each would touch other rows)"
    elif dist["placement"].kind != "single":
        why = f"`placement = {dist['placement'].kind}` (ops placed on several devices)"
    elif int(cfg.get("accumulate", 1)) > 1:
        why = "gradient accumulation (train.accumulate > 1)"
    if why is not None:
        raise CheckError(
            f"adam(lazy_rows = true) is implemented for one device and one update per step, "
            f"not for {why}",
            span=span,
            code="not-implemented",
            hint="set lazy_rows = false (the dense update), or train on one device",
        )
    tables = lazy_tables([compiled.training_graph, compiled.train_criterion], cfg["optimizer"])
    if tables:
        shown = ", ".join(f"{n} ({spec.gathers} gathers)" for n, spec in tables.items())
        console.print(f"lazy rows: {shown} update only the rows each step gathers")
    else:
        console.print(
            "warning: lazy_rows = true, but every param is read by more than gathers "
            "(no embedding table or sampled output layer); all update densely",
            soft_wrap=True,
        )


def _sharding(session: Session, placement: Placement | None) -> ShardingPlan | None:
    """The sharding plan of the spec's mesh, or None for one device; the training batches must
    split over its data axes."""
    if math.prod(mesh_of(session.resolved).values()) == 1:
        return None
    resolved = session.resolved
    if placement is not None:
        raise CheckError(
            "a run either places ops on devices (distribution.placement) or shards over a mesh "
            "(distribution.mesh), not both",
            span=resolved.span("distribution.mesh"),
            code="place-and-shard",
            hint="set distribution.placement = single, or the mesh to {data: 1}",
        )
    plan = plan_sharding(session.graph, resolved, session.task)
    sizes = [b.batch_size for b in session.pipeline.buckets]
    check_batches(plan, sizes, resolved.span(f"{session.task}.input.buckets"))
    return plan


def _check_resumable(directory: Path, engine: Backend) -> None:
    """A run resumes only from a full checkpoint of its own backend (optimizer state included)."""
    if not directory.is_dir() or not any(directory.iterdir()):
        return
    written_by = registry.checkpoint_backend(directory)
    if written_by.name != engine.name:
        raise UsageError(
            f"the checkpoints in {directory} were written by the {written_by.title} backend; a "
            "run resumes only on the backend that wrote it",
            code="backend-mismatch",
            expected=written_by.name,
            found=engine.name,
            hint=f"resume with --backend {written_by.name}, or start a new run directory (use "
            f"`seqc convert` to move the weights)",
        )
    if not read_weights(directory).full_state:
        raise UsageError(
            f"the checkpoint in {directory} holds weights only (converted), not the optimizer "
            "state a resumed run needs",
            code="weights-only",
            hint="evaluate or decode from it, or train from scratch in a new run directory",
        )


def _progress(console: Console, enabled: bool) -> Progress:
    return Progress(
        TextColumn("[bold]step"),
        MofNCompleteColumn(),
        BarColumn(),
        TextColumn("loss {task.fields[loss]:.3f}"),
        TextColumn("{task.fields[tps]:,.0f} tok/s"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        disable=not enabled,
        transient=False,
    )
