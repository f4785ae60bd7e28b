"""`seqc eval`: score a run's checkpoint, or an exported translator or recogniser, on a split.

The work is `seqc.run.scoring.checkpoint_eval.evaluate_checkpoint` (and
`seqc.run.scoring.artifact_eval` for `--artifact`): figures on stdout, which weights were scored
and sample decodings on stderr.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from seqc.backends import registry
from seqc.cli.console import ConsoleReporter, out
from seqc.cli.guard import guarded
from seqc.cli.options import (
    BackendOpt,
    CheckpointOpt,
    ExpOpt,
    FileArg,
    RunDirOpt,
    SetOpt,
    TaskOpt,
    TokenizerCacheOpt,
)
from seqc.run.scoring.checkpoint_eval import evaluate_checkpoint
from seqc.run.scoring.own_manifest import with_manifest
from seqc.run.session import open_session, open_sessions
from seqc.run.weights.restore import artifact_task, run_backend
from seqc.spec.errors import UsageError

DEV_LIMIT = 200
"""How many examples `seqc eval` decodes by default on a split other than test."""


@guarded
def eval_cmd(
    spec: FileArg,
    experiment: ExpOpt,
    run_dir: RunDirOpt = None,
    split: Annotated[
        str | None,
        typer.Option(help="dev or test (default: dev; test with --manifest).", show_default=False),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            help="Decode only the first N examples for BLEU/chrF or WER/CER (0: all; default: "
            f"all of test, the first {DEV_LIMIT} of dev).",
            show_default=False,
        ),
    ] = None,
    set_: SetOpt = None,
    cache_dir: TokenizerCacheOpt = None,
    backend: BackendOpt = None,
    checkpoint: CheckpointOpt = None,
    task: TaskOpt = None,
    artifact: Annotated[
        Path | None,
        typer.Option(
            help="Score this exported artifact instead of a checkpoint: a translator's BLEU and "
            "chrF, a recogniser's WER and CER (with --by and --manifest as for a checkpoint); "
            "hypotheses in RUN/eval/ARTIFACT-SPLIT, -TASK after it in a multi-task run.",
        ),
    ] = None,
    by: Annotated[
        list[str] | None,
        typer.Option(
            "--by",
            help="A speech task's WER and CER per group of this manifest field too (voice, "
            "engine, ...); repeat for several. Written to RUN/eval/STEP-SPLIT/scores.json.",
        ),
    ] = None,
    manifest: Annotated[
        Path | None,
        typer.Option(
            help="Score a speech model on this manifest of wavs and transcripts (JSON Lines, "
            "audio paths relative to it) in place of the spec's split.",
        ),
    ] = None,
) -> None:
    """Score the last checkpoint of a run: loss, perplexity, token accuracy; BLEU and chrF of
    decoded translations when the task lists them, with sacreBLEU's signatures, the
    hypotheses written to RUN/eval/STEP-SPLIT/. A multi-task run: every task, or --task.
    With --artifact: an exported translator's BLEU and chrF, or a recogniser's WER and CER, on
    the split, decoded as the checkpoint's are. With --by FIELD, a speech task's WER and CER
    per group of a manifest field; with --manifest FILE, on your own recordings."""
    if backend is not None:  # a bad --backend fails before the data is read, not after
        registry.check_backend(backend)
    run_dir = run_dir or Path("runs") / experiment
    split = split or ("test" if manifest is not None else "dev")
    # your own manifest's transcripts go to RUN/eval/STEP-manifest-NAME
    set_, label = with_manifest(spec, experiment, list(set_ or []), task, split, manifest)
    if manifest is not None:
        limit = 0 if limit is None else limit  # your own recordings: all of them
    if limit is None:  # a test figure is reported on the whole split; dev is a quick look
        limit = 0 if split == "test" else DEV_LIMIT
    reporter = ConsoleReporter()
    if artifact is not None:
        from seqc.run.export.artifact import load_artifact
        from seqc.run.scoring.artifact_eval import eval_artifact

        if checkpoint is not None:
            raise UsageError(
                "--artifact and --checkpoint both name what to score; give one",
                code="conflicting-options",
            )
        named = task or artifact_task(
            spec, experiment, set_, load_artifact(artifact).manifest.get("task")
        )
        session = open_session(spec, experiment, set_ or [], cache_dir=cache_dir, task=named)
        eval_artifact(session, artifact, split, limit, run_dir, reporter, by, label)
        return
    sessions = open_sessions(spec, experiment, set_ or [], cache_dir=cache_dir, task=task)
    for session in sessions:
        if len(sessions) > 1:
            out.print(f"task {session.task}:")
        source = checkpoint or run_dir
        engine = run_backend(session, backend)
        evaluate_checkpoint(session, source, engine, split, limit, run_dir, reporter, by, label)


COMMANDS = {"eval": eval_cmd}
"""This module's commands by name (`seqc.cli.app.LAZY_COMMANDS`)."""
