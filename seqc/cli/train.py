"""`seqc train`: train an experiment, in one process or as one of a group.

The work is `seqc.run.train.loop.train`; this command joins the run's processes (`seqc launch`, or
flags, or a cluster's environment), opens the session, says what is trained on which backend,
and prints the dev figures around the run and a decoded sample. Process 0 speaks for the group.
A run stopped by a signal exits 130 or 143 with the command line that resumes it.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from seqc.backends import registry
from seqc.backends.api import Cluster
from seqc.cli.console import ConsoleReporter, err, out
from seqc.cli.guard import guarded
from seqc.cli.options import BackendOpt, ExpOpt, FileArg, RunDirOpt, SetOpt, TokenizerCacheOpt
from seqc.run.processes.cluster import cluster_from
from seqc.run.scoring.evaluate import headline
from seqc.run.session import MultiTaskSession, open_training
from seqc.run.train.checks import check_strategy
from seqc.run.train.failures import CheckpointNoSpace
from seqc.run.train.interrupt import Interrupted
from seqc.run.train.loop import train


@guarded
def train_cmd(
    spec: FileArg,
    experiment: ExpOpt,
    set_: SetOpt = None,
    run_dir: RunDirOpt = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue from the last checkpoint.")
    ] = False,
    cache_dir: TokenizerCacheOpt = None,
    backend: BackendOpt = None,
    progress: Annotated[bool, typer.Option(help="Show the progress bar.")] = True,
    dev_eval: Annotated[
        bool,
        typer.Option(
            help="Evaluate on dev before and after training (--no-dev-eval: skip both; at a "
            "large vocabulary each takes minutes). `train.eval_every` sets those in between."
        ),
    ] = True,
    dev_eval_before: Annotated[
        bool,
        typer.Option(
            help="Evaluate on dev before training (--no-dev-eval-before: skip that one only; "
            "a sweep's trials do, as the untrained model's figure tells the pruner nothing)."
        ),
    ] = True,
    prompt: Annotated[str, typer.Option(help="Prompt of the sample printed at the end.")] = "",
    coordinator: Annotated[
        str | None,
        typer.Option(help="HOST:PORT of process 0, for a run of several processes."),
    ] = None,
    num_processes: Annotated[
        int | None, typer.Option(help="Processes in the run (default: 1, or the cluster's).")
    ] = None,
    process_id: Annotated[int | None, typer.Option(help="This process's rank.")] = None,
) -> None:
    """Train an experiment; prints dev perplexity (a CTC model's: loss) before and after, and
    a decoded sample.

    A run of several processes (`seqc launch`, or one `seqc train` per process with
    --coordinator, --num-processes, --process-id, or a cluster's environment) trains one model:
    process 0 owns the run directory and prints."""
    from seqc.resolve.experiment import resolve
    from seqc.resolve.program import load_program
    from seqc.run.decoding.text_decoder import from_session, sample_text

    if backend is not None:  # a bad --backend fails before the data is read, not after
        registry.check_backend(backend)
    cluster = cluster_from(coordinator, num_processes, process_id)
    # the experiment read before its data: its `backend` (a run's processes must join before
    # any of them computes) and what it refuses on the spec alone
    resolved = resolve(load_program(spec), experiment, set_ or [])
    name = backend or str(resolved.config["backend"])
    engine = registry.backend(name)
    # what the spec alone decides is refused before the processes join or the data is read
    check_strategy(resolved, engine, cluster)
    engine.start(cluster)  # before any computation; a parameter server serves here
    if cluster.several and not cluster.primary:
        engine.barrier("seqc-data")  # process 0 prepares the data's caches first
    session = open_training(spec, experiment, set_ or [], cache_dir)
    if cluster.several and cluster.primary:
        engine.barrier("seqc-data")
    say: Callable[[str], None] = err.print if cluster.primary else (lambda text: None)
    shout: Callable[[str], None] = out.print if cluster.primary else (lambda text: None)
    run_dir = run_dir or Path("runs") / experiment
    tasks = list(session.sessions.values()) if isinstance(session, MultiTaskSession) else [session]
    for one in tasks:
        params = sum(p.size for p in one.graph.params.values())
        head = f"task {one.task}: " if len(tasks) > 1 else ""
        say(f"{head}{one.pipeline.summary()}")
        say(f"{head}model {one.task_config['model'].kind}: {params:,} params")
    if isinstance(session, MultiTaskSession):
        total = sum(p.size for p in session.multi.params.values())
        shared = sum(
            session.multi.params[n].size
            for n, users in session.multi.owners().items()
            if len(users) > 1
        )
        say(f"multi-task model: {total:,} params, {shared:,} of them shared")
    say(f"backend: {name}" + (f", {cluster.num_processes} processes" if cluster.several else ""))
    try:
        result = train(
            session,
            run_dir,
            resume=resume,
            reporter=ConsoleReporter(),
            progress=progress and cluster.primary,
            eval_before=dev_eval and dev_eval_before and not resume,
            eval_after=dev_eval,
            backend=name,
            cluster=cluster,
        )
    except Interrupted as stop:
        again = _train_again(spec, experiment, run_dir, backend, set_, cluster)
        say(
            f"{stop!s}: checkpoint {stop.step} written to {run_dir / 'checkpoints'}\n"
            f"resume with: {shlex.join([*again, '--resume'])}"
        )
        raise typer.Exit(stop.exit_code) from None
    except CheckpointNoSpace as full:  # the command that goes on, once there is room
        again = _train_again(spec, experiment, run_dir, backend, set_, cluster)
        resume_flag = ["--resume"] if full.last is not None else []
        full.hint = f"free space on {full.device}, then run: {shlex.join([*again, *resume_flag])}"
        raise
    later = f"after {result.steps} steps"
    for task, before in (result.tasks_before or {}).items():
        shout(f"{task}: {_headline(before, 'before training')}")
    for task, after in (result.tasks_after or {}).items():
        shout(f"{task}: {_headline(after, later)}")
    if result.dev_before:
        shout(_headline(result.dev_before, "before training"))
    if result.dev_after:
        shout(_headline(result.dev_after, later))
        if "raw_perplexity" in result.dev_after:  # NCE, SNIS B: scored without the softmax
            after = result.dev_after
            shout(
                f"dev perplexity of the raw scores exp(s): {after['raw_perplexity']:.2f} "
                f"(log Z {after['log_z_mean']:+.3f} +- {after['log_z_std']:.3f})"
            )
    if cluster.primary:
        for one in tasks:
            model, params = result.model, result.state["params"]
            if isinstance(session, MultiTaskSession):
                model, params = model.view(one.task), model.task_params(one.task, params)
            gen = from_session(one, model, params)
            head = f"{one.task} " if len(tasks) > 1 else ""
            shout(f"{head}sample: {sample_text(gen, prompt or None)}")
    shout(f"run directory: {run_dir}")


def _train_again(
    spec: Path,
    experiment: str,
    run_dir: Path,
    backend: str | None,
    set_: list[str] | None,
    cluster: Cluster,
) -> list[str]:
    """The command line that runs this training again (add `--resume` to continue it): under
    `seqc launch` when it started the run."""
    again = ["seqc", "train", str(spec), "-e", experiment, "--run-dir", str(run_dir)]
    if backend:
        again += ["--backend", backend]
    if cluster.several and "SEQC_NUM_PROCESSES" in os.environ:  # started by seqc launch
        workers = len(cluster.spec.get("worker", [])) or cluster.num_processes
        servers = len(cluster.spec.get("ps", []))
        again[1:1] = ["launch", "-n", str(workers), *(["--ps", str(servers)] * bool(servers))]
        again.insert(again.index("train"), "--")
    for value in set_ or []:
        again += ["--set", value]
    return again


def _headline(dev: dict[str, Any], when: str) -> str:
    """`dev perplexity before training: 71.82`, or a CTC model's `dev loss after 4 steps:
    41.20`: the figure `seqc.run.scoring.evaluate.headline` picks."""
    name, value = headline(dev)
    return f"dev {name} {when}: {value:.2f}"


COMMANDS = {"train": train_cmd}
"""This module's commands by name (`seqc.cli.app.LAZY_COMMANDS`)."""
