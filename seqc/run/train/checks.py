"""What a training run refuses before it writes anything: a strategy the backend or the
cluster cannot run, what a multi-task model or lazy rows do not do yet, a checkpoint of another
backend or without optimizer state to resume from. Each is said at the spec line that asks
for it (`seqc.run.train.loop` calls these first).

What the spec alone decides is `seqc.compiler.run_checks`, which `seqc check` runs too; these
functions add what only the run knows (its backend, its processes, its data) and call those
for the rest, so `check` and `train` refuse a spec with one implementation."""

from __future__ import annotations

from pathlib import Path

from seqc.backends import registry
from seqc.backends.api import Backend, Cluster
from seqc.backends.weights import read_weights
from seqc.compiler.config import Adam
from seqc.compiler.lazy_rows import lazy_tables
from seqc.compiler.run_checks import check_lazy_rows as check_lazy_spec
from seqc.compiler.run_checks import check_multitask as check_multitask_spec
from seqc.compiler.run_checks import check_run
from seqc.resolve.experiment import ResolvedExperiment
from seqc.run.report import Reporter
from seqc.run.session import MultiTaskSession, Session
from seqc.run.train.layout import check_mesh_processes
from seqc.spec.errors import CheckError, UsageError


def check_strategy(resolved: ResolvedExperiment, engine: Backend, cluster: Cluster) -> None:
    """`distribution.sync` against the backend and the processes: asynchronous training runs on
    TF with parameter servers (`seqc launch --ps K`); a cluster with servers trains async. Then
    everything the spec alone decides (`check_run`, as `seqc check` runs it), and a mesh that
    does not span the run's processes (`check_mesh_processes`)."""
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
    if servers and not asks_async:
        raise CheckError(
            "this run's cluster has parameter servers, but the experiment trains synchronously",
            span=span,
            code="sync-with-parameter-servers",
            hint='set distribution.sync = "async" (--set distribution.sync=async), or launch '
            "without --ps",
        )
    check_run(resolved, several=cluster.several)
    check_mesh_processes(resolved, cluster)


def check_multitask(joint: MultiTaskSession, cluster: Cluster) -> None:
    """A multi-task model trains on one device of one process (each task's steps over the
    shared params); what it does not do yet is refused at the line that asks for it."""
    check_multitask_spec(joint.resolved, several=cluster.several)


def check_lazy_rows(session: Session, cluster: Cluster, reporter: Reporter) -> None:
    """`adam(lazy_rows = true)` runs on one device of one process, one step per update; say
    which params it updates by rows (`seqc.compiler.lazy_rows`)."""
    resolved, cfg, compiled = session.resolved, session.train_config, session.compiled
    if not (isinstance(cfg.optimizer, Adam) and cfg.optimizer.lazy_rows):
        return
    check_lazy_spec(resolved, several=cluster.several)
    tables = lazy_tables([compiled.training_graph, compiled.train_criterion], cfg.optimizer)
    if tables:
        shown = ", ".join(f"{n} ({spec.gathers} gathers)" for n, spec in tables.items())
        reporter.info(f"lazy rows: {shown} update only the rows each step gathers")
    else:
        reporter.warn(
            "lazy_rows = true, but every param is read by more than gathers "
            "(no embedding table or sampled output layer); all update densely"
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
