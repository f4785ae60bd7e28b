"""The options that name a language model for another task's hypotheses (`seqc rescore`,
`seqc decode --lm`): an exported artifact, or a run's checkpoint with its spec and experiment,
and which of its scores to read."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from seqc.run.lm.language_model import SCORES, LmSource
from seqc.run.weights.restore import Source
from seqc.spec.errors import UsageError

LmOpt = Annotated[
    Path | None,
    typer.Option(
        "--lm",
        help="An exported LM artifact (ONNX, TFLite or SavedModel folder).",
        show_default=False,
    ),
]
LmSpecOpt = Annotated[
    Path | None,
    typer.Option(
        "--lm-spec", help="Or a trained LM's .seq file (with --lm-experiment).", show_default=False
    ),
]
LmExperimentOpt = Annotated[
    str | None, typer.Option("--lm-experiment", help="The LM's experiment.", show_default=False)
]
LmRunDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--lm-run-dir",
        help="The LM's run directory (default runs/<experiment>).",
        show_default=False,
    ),
]
LmScoresOpt = Annotated[
    str | None,
    typer.Option(
        "--lm-scores",
        help="normalized (log-softmax over the vocabulary) or raw (a self-normalised LM's "
        "score of the word alone). Default: raw for a scoring artifact, else normalized.",
        show_default=False,
    ),
]

LmWeightOpt = Annotated[float, typer.Option("--lm-weight", help="Shallow fusion: the LM's weight.")]
LengthBonusOpt = Annotated[
    float, typer.Option("--length-bonus", help="Shallow fusion: added per word.")
]


def lm_source(
    artifact: Path | None,
    spec: Path | None,
    experiment: str | None,
    run_dir: Path | None,
    scores: str | None,
    cache_dir: Path | None = None,
) -> LmSource | None:
    """The LM the options name, or None; a contradiction or a half-named checkpoint is a
    usage error."""
    if scores is not None and scores not in SCORES:
        raise UsageError(
            f"--lm-scores {scores!r} is not one of {', '.join(SCORES)}",
            code="bad-option",
            hint="--lm-scores raw or --lm-scores normalized",
        )
    if artifact is not None and (spec or experiment or run_dir):
        raise UsageError(
            "--lm names an artifact; --lm-spec, --lm-experiment and --lm-run-dir "
            "name a checkpoint: give one of the two",
            code="bad-option",
        )
    if artifact is not None:
        return LmSource(artifact=artifact, scores=scores)
    if spec is None and experiment is None and run_dir is None:
        return None
    if spec is None or experiment is None:
        raise UsageError(
            "a language model's checkpoint is named by --lm-spec and --lm-experiment",
            code="missing-option",
            hint="--lm-spec examples/asr/read_speech.seq --lm-experiment lm.verses.snis "
            "[--lm-run-dir runs/lm.verses.snis], or --lm ARTIFACT",
        )
    source = Source(spec=spec, experiment=experiment, run_dir=run_dir, cache_dir=cache_dir)
    return LmSource(source=source, scores=scores)
