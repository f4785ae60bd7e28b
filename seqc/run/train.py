"""The training loop: steps, progress bar, periodic evaluation and checkpoints, exact resume.

Exactness of `--resume`: the checkpoint holds params, optimizer state, step and rng; the data
order is a pure function of (seed, step), so a resumed run sees the same batches in the same
order and reaches the same parameters as an uninterrupted one.

A run never loses work: everything that can refuse it (the run directory, the resume's
settings, the placement, the devices) is checked before anything is written; the run owns its
directory through an OS lock (`seqc.run.rundir.lock`); SIGINT or SIGTERM stops it after the step in
flight with a checkpoint (`seqc.run.interrupt`); a damaged newest checkpoint is set aside and
the newest good one resumed; metrics never hold a step twice; a loss that stops being finite
ends the run at once, before a checkpoint could save the broken weights.
"""

from __future__ import annotations

import contextlib
import json
import math
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from seqc.backends import registry
from seqc.backends.api import Backend, CheckpointStore, Cluster, MetricsLost, NoSpace, fetch
from seqc.compiler.placement.plan import Placement, place
from seqc.compiler.sharding import ShardingPlan, check_batches, mesh_of, plan_sharding
from seqc.run.interrupt import NAMES, Interrupted, StopRequests
from seqc.run.mix import Mix
from seqc.run.patience import Patience
from seqc.run.report import NoProgress, PlainReporter, Reporter
from seqc.run.rundir import identity
from seqc.run.rundir.directory import RunDir
from seqc.run.schedule import Schedule, learning_rate
from seqc.run.scoring.evaluate import evaluate, headline
from seqc.run.session import MultiTaskSession, Session
from seqc.run.stepper import MultiTaskSteps, TaskSteps
from seqc.run.train_checks import check_lazy_rows, check_multitask, check_resumable, check_strategy
from seqc.run.warm_start import WarmStart, warm_start
from seqc.spec.errors import CheckError, DeviceError, FileError, SeqcError


class LossNotFinite(SeqcError):
    """The training loss became NaN or infinite."""

    phase = "train"


class CheckpointNoSpace(FileError):
    """A checkpoint its device had no room for: the run stopped there, the checkpoints before
    it intact (`last`, the newest; None when there is none)."""

    device: Path | None = None
    last: int | None = None


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
        model: Any = joint
    else:
        check_lazy_rows(session, cluster, reporter)
        placement = _placement(session, engine, reporter)
        sharding = _sharding(session, placement, cluster)
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
    warm = None if resume else warm_start(session.resolved, _params(session))
    # The primary process owns the directory for the whole group: only it writes there (the
    # checkpoints aside, which every process writes together).
    with run.lock() if cluster.primary else contextlib.nullcontext():
        run.check(session.resolved, resume, locked=True)  # again: no other run writes here now
        checkpoints = engine.checkpoints(run.checkpoints, cfg.keep_checkpoints)
        try:
            loop = _Loop(session, steps, run, model, checkpoints, rate, reporter, eval_batches)
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
            result.state = _collective(engine, cluster, loop.train, state, start, progress)
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


class _Loop:
    """One training run's loop over a locked run directory."""

    def __init__(
        self,
        session: Session | MultiTaskSession,
        steps: TaskSteps | MultiTaskSteps,
        run: RunDir,
        model: Any,
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
            info = self._info(backend, seed, placement, sharding)
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
        self.started -= 60.0 * _minutes_before(run.metrics_path, start)
        self.reporter.info(f"resumed from step {start} of {run.checkpoints}")
        return state, start

    def _params(self) -> dict[str, Any]:
        return _params(self.session)

    def _info(
        self,
        backend: str,
        seed: int,
        placement: Placement | None,
        sharding: ShardingPlan | None,
    ) -> dict[str, Any]:
        session, units = self.session, self.steps.units
        first = next(iter(units.values())).session
        info: dict[str, Any] = {
            "experiment": session.resolved.name,
            "task": first.task,
            "backend": backend,
            "seed": seed,
            "data_seed": first.pipeline.seed,
            "params": sum(p.size for p in self._params().values()),
            "data": first.pipeline.summary(),
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
        if isinstance(self.steps, MultiTaskSteps):
            mix = self.steps.mix
            info["task"] = None
            info["tasks"] = {
                t: {
                    "input": u.session.pipeline.name,
                    "data_seed": u.session.pipeline.seed,
                    "data": u.session.pipeline.summary(),
                    "params": sum(p.size for p in u.session.graph.params.values()),
                    "weight": mix.weights[t],
                    "lr_scale": mix.lr_scale[t],
                }
                for t, u in units.items()
            }
            info["mix"] = {"by": mix.by, "weights": mix.weights, "lr_scale": mix.lr_scale}
            info["shared"] = {
                name: users for name, users in session.multi.owners().items() if len(users) > 1
            }
        return info

    # ---------------------------------------------------------------- steps
    def train(self, state: dict[str, Any], start: int, progress: bool) -> dict[str, Any]:
        batches = self.steps.batches(start)
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
                    dev = self.evaluate(state, done)
                    shown = ", ".join(
                        (f"{t} " if self.steps.several else "") + _shown(d) for t, d in dev.items()
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
            (s, {t: _fetched(m) for t, m in per_task.items()}) for s, per_task in self.pending
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
                if s == done:
                    record["tokens_per_s"] = tokens / max(elapsed, 1e-9)
                self.run.log(record)
                self.history.append(record)
                if not math.isfinite(record["loss"]):
                    self.pending.clear()
                    raise self._not_finite(s, record["loss"], task)
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

    def _not_finite(self, step: int, loss: float, task: str) -> LossNotFinite:
        last = self.checkpoints.latest()
        resolved = self.session.resolved
        where = (
            f"the last good checkpoint is step {last} in {self.run.checkpoints}"
            if last is not None
            else "no checkpoint was written before it"
        )
        of = f" of task `{task}`" if self.steps.several else ""
        fix = "lower the learning rate, set train.clip_norm, or check the data"
        if last is None:
            then = (
                "then train again: no checkpoint was written, so there is nothing to resume and "
                "the same --run-dir starts anew"
            )
        else:  # a resume must keep the optimizer's settings, and would meet the same batches
            source = json.dumps(str(self.run.path))
            then = (
                "then start a new run (another --run-dir), from scratch or from the last good "
                f"weights: --set 'train.init_from=checkpoint({source}, step = {last})' (a "
                "resume keeps the settings that diverged)"
            )
        return LossNotFinite(
            f"the training loss{of} became {loss} at step {step}; {where}",
            span=resolved.span("train.optimizer") or resolved.span("train"),
            path=str(self.run.path),
            code="loss-not-finite",
            hint=f"{fix}; {then}",
        )

    def save(self, done: int, state: dict[str, Any]) -> None:
        """A checkpoint of `state` at step `done`, once its metrics are known to be finite."""
        self.flush(done)
        if self.checkpoints.latest() != done:
            if self.agree is not None:  # every process still there: a collective save started
                self.agree(False)  # with one gone would wait for it, and leave a half step
            try:
                self.checkpoints.save(done, state)
            except NoSpace as e:
                raise self._no_space(e) from None
            minutes = (time.perf_counter() - self.started) / 60.0
            self.run.log({"step": done, "split": "checkpoint", "minutes": minutes})

    def _no_space(self, e: NoSpace) -> CheckpointNoSpace:
        """The run's error for a checkpoint its device had no room for: what is intact, and
        what to do (`seqc.cli.train` adds the command that continues the run)."""
        last = self.checkpoints.latest()
        room = f"{_size(e.free)} free" + (f", about {_size(e.needed)} needed" if e.needed else "")
        if last is None:
            intact = "no checkpoint was written before it"
        elif last == e.step:
            intact = f"checkpoint {last} was written, without its checksums (it reads as it is)"
        else:
            intact = f"checkpoint {last} is intact"
        error = CheckpointNoSpace(
            f"no space left on {e.device} writing checkpoint {e.step} ({room}); {intact}",
            path=str(e.directory),
            code="no-space",
            hint=f"free space on {e.device}, then "
            + ("continue the run with --resume" if last is not None else "train again"),
        )
        error.device, error.last = e.device, last
        return error

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
            dev |= _error_rates(unit, params)
            if step:  # an untrained model's translations score 0 and run to max_length
                dev |= _translation_scores(unit, params, self.dev_translations)
            tag = {"task": task} if self.steps.several else {}
            minutes = (time.perf_counter() - self.started) / 60.0  # this process's, for curves
            self.run.log({"step": step, "split": "dev", **tag, **dev, "minutes": minutes})
            out[task] = dev
        return out


def _params(session: Session | MultiTaskSession) -> dict[str, Any]:
    """The model's params by name (every task's, a shared one once)."""
    if isinstance(session, MultiTaskSession):
        return session.multi.params
    return dict(session.graph.params)


def _minutes_before(metrics: Path, step: int) -> float:
    """The training minutes the run had logged by `step` (its checkpoint's record, else its
    last dev record up to there), so that a resumed run's dev curve goes on from where it
    stopped rather than from zero, counting the minutes up to the checkpoint it resumes from."""
    minutes = 0.0
    if not metrics.exists():
        return minutes
    for line in metrics.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("split") in ("dev", "checkpoint") and int(record.get("step", 0)) <= step:
            minutes = max(minutes, float(record.get("minutes", 0.0)))
    return minutes


def _shown(dev: dict[str, Any]) -> str:
    """One task's dev figures as the step line prints them: the headline figure (perplexity,
    or a CTC model's loss; `seqc.run.scoring.evaluate.headline`), then WER or BLEU if measured."""
    name, value = headline(dev)
    text = f"{name} {value:.2f}"
    if "wer" in dev:
        text += f" (wer {dev['wer']:.2f}, cer {dev['cer']:.2f})"
    if "bleu" in dev:
        text += f" (bleu {dev['bleu']:.2f}, chrf {dev['chrf']:.2f})"
    return text


def _translation_scores(unit: Any, params: Any, examples: int) -> dict[str, float]:
    """BLEU and chrF of the first `examples` dev translations, for a translation task that lists
    them among its metrics: what early stopping and the dev curve follow (perplexity is a poor
    proxy for BLEU late in training, when label smoothing and length matter)."""
    session = unit.session
    if session.pipeline.task != "seq2seq" or not examples:
        return {}
    if not {m.kind for m in session.task_config["metrics"]} & {"bleu", "chrf"}:
        return {}
    from seqc.run.decoding.decoders import decoder_for
    from seqc.run.decoding.text_decoder import fallback_strategy
    from seqc.run.scoring.translate import score_translations

    tok = session.pipeline.target_tokenizer
    decoder = decoder_for(unit.model, params, tok.bos_id, tok.eos_id, tok.pad_id)
    strategy = session.compiled.decode or fallback_strategy()
    t0 = time.perf_counter()
    scores = score_translations(decoder, session.pipeline, strategy, "dev", examples)
    seconds = time.perf_counter() - t0
    return {
        "bleu": scores["bleu"],
        "chrf": scores["chrf"],
        "translations": scores["examples"],
        "translate_s": seconds,
    }


ATTENTION_DEV_UTTERANCES = 100
"""Dev utterances an attention decoder transcribes at each evaluation during training (it decodes
one utterance at a time); a CTC model transcribes the whole dev split in one pass per batch."""


def _error_rates(unit: Any, params: Any) -> dict[str, float]:
    """WER and CER on dev for a speech task that lists them among its metrics."""
    session = unit.session
    if session.pipeline.task != "asr":
        return {}
    if not {m.kind for m in session.task_config["metrics"]} & {"wer", "cer"}:
        return {}
    from seqc.run.scoring.transcribe import score_model

    limit = 0 if unit.model.task.ctc else ATTENTION_DEV_UTTERANCES
    scores = score_model(
        unit.model, params, session.pipeline, "dev", session.compiled.decode, limit
    )
    return {"wer": scores["wer"], "cer": scores["cer"]}


def _placement(session: Session, engine: Backend, reporter: Reporter) -> Placement | None:
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
        reporter.info(f"placement {placed.plan.algorithm}: every op on device 0")
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
    reporter.info(f"placement ({engine.title} devices):\n{summary(placed.problem, placed.plan)}")
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
        engine.leave()  # its exit must not wait for the process that is gone
        raise DeviceError(
            f"process {cluster.process_id}: a collective with the run's other processes failed "
            f"({cause[:300]})",
            code="process-lost",
            hint="another process stopped or is unreachable; once the cause is fixed, resume "
            "the whole group from the last checkpoint with --resume",
        ) from None


def _fetched(metrics: Any) -> dict[str, Any] | None:
    """A step's metrics, or None when the backend lost them with a worker (`MetricsLost`)."""
    try:
        return fetch(metrics)
    except MetricsLost:
        return None


def _sharding(
    session: Session, placement: Placement | None, cluster: Cluster
) -> ShardingPlan | None:
    """The sharding plan of the spec's mesh, or None for one device; the training batches must
    split over its data axes. A synchronous run of several processes trains one model over
    every process's devices: a mesh smaller than the processes (the default `{data: 1}`) would
    have each train alone, and their collective checkpoint fail after training."""
    resolved = session.resolved
    mesh = mesh_of(resolved)
    processes = cluster.num_processes
    if cluster.several and "ps" not in cluster.spec and math.prod(mesh.values()) < processes:
        shown = ", ".join(f"{a}: {n}" for a, n in mesh.items())
        raise CheckError(
            f"a run of {processes} processes trains one model over every process's devices, "
            f"but the mesh {{{shown}}} spans {_devices(math.prod(mesh.values()))}",
            span=resolved.span("distribution.mesh") or resolved.span("distribution"),
            code="mesh-devices",
            expected=f"a mesh of at least {processes} devices (processes x devices each)",
            found=f"{{{shown}}}",
            hint=f"set the mesh to the run's devices: --set \"distribution.mesh={{data: "
            f'{processes}}}" for one device per process (more with several each); or train '
            "in one process",
        )
    if math.prod(mesh.values()) == 1:
        return None
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


def _size(n: float) -> str:
    """Bytes for a message: `4.5 MiB`."""
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _devices(n: int) -> str:
    return f"{n} device" + ("s" if n != 1 else "")
