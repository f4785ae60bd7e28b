"""`seqc choose`: which of a run's weights to report, chosen on held-out data before the test is
read. The work is `seqc.run.weights.choose` (the candidates, the rule, `RUN/chosen.json`); each
candidate is scored as `seqc eval` scores a checkpoint, its transcripts or translations kept in
`RUN/eval/`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from seqc.backends import registry
from seqc.cli.console import ConsoleReporter, out
from seqc.cli.guard import guarded
from seqc.cli.options import (
    BackendOpt,
    ExpOpt,
    FileArg,
    RunDirOpt,
    SetOpt,
    TaskOpt,
    TokenizerCacheOpt,
)
from seqc.spec.errors import UsageError


class _Aside:
    """The reporter each candidate's scoring speaks to: its figures and samples stay out of
    stdout (the table says them), warnings go on."""

    def __init__(self, reporter: ConsoleReporter) -> None:
        self.reporter = reporter

    def info(self, text: str) -> None:
        del text

    def warn(self, text: str) -> None:
        self.reporter.warn(text)

    def result(self, text: str) -> None:
        del text

    def progress(self, total: int, start: int) -> Any:
        return self.reporter.progress(total, start)


@guarded
def choose_cmd(
    spec: FileArg,
    experiment: ExpOpt,
    run_dir: RunDirOpt = None,
    split: Annotated[
        str | None,
        typer.Option(
            help="The split to choose on (default: dev; with --manifest, its data).",
            show_default=False,
        ),
    ] = None,
    manifest: Annotated[
        Path | None,
        typer.Option(
            help="Choose a speech model's weights on this manifest of wavs and transcripts "
            "(JSON Lines, as `seqc eval --manifest` takes), in place of a split of the spec.",
        ),
    ] = None,
    limit: Annotated[
        int,
        typer.Option(help="Decode only the first N examples of it (0: all).", min=0),
    ] = 0,
    averages: Annotated[
        bool,
        typer.Option(
            "--averages/--no-averages",
            help="Also score the means of the newest 2, 3, ... checkpoints (`seqc average`).",
        ),
    ] = True,
    set_: SetOpt = None,
    cache_dir: TokenizerCacheOpt = None,
    backend: BackendOpt = None,
    task: TaskOpt = None,
) -> None:
    """Choose the weights to report among a run's kept checkpoints and the means of its newest
    2, 3, ... of them: each scored on a held-out split or manifest (WER for speech, BLEU for
    translation, else perplexity or loss), the best taken (a tie to the newer, unaveraged),
    every figure written to RUN/chosen.json. Read the test once after, with --checkpoint."""
    from seqc.run.scoring.checkpoint_eval import evaluate_checkpoint
    from seqc.run.scoring.own_manifest import with_manifest
    from seqc.run.session import open_sessions
    from seqc.run.weights import choose
    from seqc.run.weights.restore import run_backend

    if backend is not None:
        registry.check_backend(backend)
    run_dir = run_dir or Path("runs") / experiment
    split = split or ("test" if manifest is not None else "dev")
    if split == "test" and manifest is None:
        raise UsageError(
            "seqc choose reads the test split: a choice made on it makes its figure meaningless",
            code="choose-on-test",
            hint="choose on dev, or on a manifest held out of training (--manifest FILE)",
        )
    set_, label = with_manifest(spec, experiment, list(set_ or []), task, split, manifest)
    sessions = open_sessions(spec, experiment, set_, cache_dir=cache_dir, task=task)
    if len(sessions) > 1:
        raise UsageError(
            f"{experiment} has {len(sessions)} tasks and a choice is made on one figure",
            code="several-tasks",
            hint="name the task to choose on with --task",
        )
    session = sessions[0]
    engine = run_backend(session, backend)
    metrics = {m.kind for m in session.task_config["metrics"]}
    rule = choose.criterion(session.pipeline.task, metrics)
    found = choose.candidates(run_dir, averages)
    reporter = ConsoleReporter()
    aside = _Aside(reporter)

    def score(candidate: choose.Candidate) -> dict[str, Any]:
        return evaluate_checkpoint(
            session, candidate.path, engine, split, limit, run_dir, aside, None, label
        )

    about = {
        "experiment": experiment,
        "task": session.task,
        "data": str(manifest) if manifest is not None else split,
        "limit": limit,
    }
    done = choose.choose(found, score, rule, run_dir, about, reporter)
    out.print(f"{'candidate':<24} {choose.measure(done.scored[0][1], rule)[0]:>10}")
    for candidate, figures in done.scored:
        mark = "  <- chosen" if candidate == done.chosen else ""
        out.print(f"{candidate.name:<24} {choose.measure(figures, rule)[1]:>10.4g}{mark}")
    out.print(f"chosen: {done.chosen.name}: {done.chosen.path}")
    out.print(f"every figure: {done.record}")
    out.print(
        f"read the test once: seqc eval {spec} -e {experiment} --run-dir {run_dir} "
        f"--checkpoint {done.chosen.path} --split test"
    )


COMMANDS = {"choose": choose_cmd}
"""This module's commands by name (`seqc.cli.app.LAZY_COMMANDS`)."""
