"""The training loop: steps, progress bar, periodic evaluation and checkpoints, exact resume.

Exactness of `--resume`: the checkpoint holds params, optimizer state, step and rng; the data
order is a pure function of (seed, step), so a resumed run sees the same batches in the same
order and reaches the same parameters as an uninterrupted one.
"""

from __future__ import annotations

import time
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
from seqc.backends.api import Backend, fetch
from seqc.backends.weights import read_weights
from seqc.compiler.placement.plan import Placement, place
from seqc.run.evaluate import evaluate
from seqc.run.rundir import RunDir
from seqc.run.schedule import learning_rate
from seqc.run.session import Session
from seqc.spec.errors import CheckError, UsageError


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
) -> TrainResult:
    """Train `session`'s task on `backend` ("jax" or "tf"): the same loop, data order, logs,
    run directory and checkpoints schedule on every backend. A placement the spec asks for
    (`distribution.placement`) is planned and, on a backend that places ops, run."""
    console = console or Console(stderr=True)
    engine = registry.backend(backend)
    cfg = session.train_config
    total = int(cfg["steps"])
    seed = int(cfg["seed"])
    rate = learning_rate(cfg, session.resolved.span("train.optimizer"))
    if resume:
        _check_resumable(run_dir / "checkpoints", engine)
    placement = _placement(session, engine, console)
    devices = None if placement is None else placement.devices
    # The model before the run directory: a device the plan lacks is an error before any write.
    model = engine.model(session.compiled, cfg, placement=devices, **(model_options or {}))
    run = RunDir.create(run_dir, session.program, session.resolved, resume)
    run.write_run_info(
        {
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
        }
    )
    state = model.init(seed)
    checkpoints = engine.checkpoints(run.checkpoints)
    start = 0
    if resume and checkpoints.latest() is not None:
        state = checkpoints.restore(state)
        start = int(np.asarray(state["step"]))
        run.truncate_metrics(start)
        console.print(f"resumed from step {start} of {run.checkpoints}")
    has_dev = "dev" in session.pipeline.splits
    result = TrainResult(run_dir, total, state, model, backend=backend)
    if eval_before and has_dev and start == 0:
        result.dev_before = evaluate(model, state["params"], session.pipeline, "dev", eval_batches)
        run.log({"step": 0, "split": "dev", **result.dev_before})
    batches = session.pipeline.batches("train", start_step=start)
    log_every = max(int(cfg["log_every"]), 1)
    eval_every, ckpt_every = int(cfg["eval_every"]), int(cfg["checkpoint_every"])
    window_tokens, window_start = 0.0, time.perf_counter()
    pending: list[tuple[int, Any]] = []
    bar = _progress(console, progress)
    with bar:
        job = bar.add_task("train", total=total, completed=start, loss=float("nan"), tps=0.0)
        for step in range(start, total):
            batch = next(batches)
            state, metrics = model.train_step(state, batch, rate(step))
            pending.append((step + 1, metrics))
            done = step + 1
            if done % log_every == 0 or done == total:
                fetched = [fetch(m) for _, m in pending]
                elapsed = time.perf_counter() - window_start
                for (s, _), m in zip(pending, fetched, strict=True):
                    window_tokens += float(m["tokens"])
                    record = {
                        "step": s,
                        "split": "train",
                        "loss": float(m["loss"]),
                        "grad_norm": float(m["grad_norm"]),
                        "lr": rate(s - 1),
                    }
                    if s == done:
                        record["tokens_per_s"] = window_tokens / max(elapsed, 1e-9)
                    run.log(record)
                    result.history.append(record)
                last = result.history[-1]
                bar.update(job, loss=last["loss"], tps=last.get("tokens_per_s", 0.0))
                pending.clear()
                window_tokens, window_start = 0.0, time.perf_counter()
            bar.update(job, completed=done)
            if has_dev and eval_every and done % eval_every == 0 and done != total:
                dev = evaluate(model, state["params"], session.pipeline, "dev", eval_batches)
                run.log({"step": done, "split": "dev", **dev})
                console.print(f"step {done}: dev perplexity {dev['perplexity']:.2f}")
            if ckpt_every and done % ckpt_every == 0:
                checkpoints.save(done, state)
    if checkpoints.latest() != total:
        checkpoints.save(total, state)
    checkpoints.close()
    if has_dev:
        result.dev_after = evaluate(model, state["params"], session.pipeline, "dev", eval_batches)
        run.log({"step": total, "split": "dev", **result.dev_after})
    run.close()
    result.state = state
    return result


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
