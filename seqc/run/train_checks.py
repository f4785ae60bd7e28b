"""What a training run refuses before it writes anything: a strategy the backend or the
cluster cannot run, what a multi-task model or lazy rows do not do yet, a checkpoint of another
backend or without optimizer state to resume from. Each is said at the spec line that asks
for it (`seqc.run.train` calls these first)."""

from __future__ import annotations

import math
from pathlib import Path

from rich.console import Console

from seqc.backends import registry
from seqc.backends.api import Backend, Cluster
from seqc.backends.weights import read_weights
from seqc.compiler.sharding import mesh_of
from seqc.compiler.sparse_rows import lazy_tables
from seqc.resolve.experiment import ResolvedExperiment
from seqc.run.session import Joint, Session
from seqc.spec.errors import CheckError, UsageError


def check_strategy(resolved: ResolvedExperiment, engine: Backend, cluster: Cluster) -> None:
    """`distribution.sync` against the backend and the processes: asynchronous training runs on
    TF with parameter servers (`seqc launch --ps K`); a cluster with servers trains async."""
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


def check_joint(joint: Joint, cluster: Cluster) -> None:
    """A multi-task model trains on one device of one process (each task's steps over the
    shared params); what it does not do yet is refused at the line that asks for it."""
    resolved, cfg = joint.resolved, joint.train_config
    dist = resolved.config["distribution"]
    why, span = None, None
    if math.prod(mesh_of(resolved).values()) > 1 or cluster.several:
        why, span = "a mesh of devices or several processes", resolved.span("distribution.mesh")
    elif dist["placement"].kind != "single":
        why = f"`placement = {dist['placement'].kind}` (plan it with `seqc place`)"
        span = resolved.span("distribution.placement")
    elif cfg["mix_by"] == "sum" and cfg["optimizer"].args.get("lazy_rows"):
        why, span = 'lazy rows with `mix_by = "sum"`', resolved.span("train.optimizer")
    if why is not None:
        raise CheckError(
            f"a multi-task model trains on one device of one process; {why} is not implemented "
            "for it",
            span=span or resolved.span("train"),
            code="not-implemented",
            hint="train the tasks on one device (distribution.mesh = {data: 1}, placement = "
            "single), or train one task per experiment",
        )


def check_lazy_rows(session: Session, cluster: Cluster, console: Console) -> None:
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


def check_resumable(directory: Path, engine: Backend) -> None:
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
