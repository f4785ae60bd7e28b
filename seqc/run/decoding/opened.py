"""What `seqc decode` decodes with: an exported artifact (checked against the spec when one is
given), or a checkpoint restored on a backend (`seqc.run.weights.restore`), as a `TextDecoder`.

Why apart from `restore`: restoring weights is what every run command and a language model
used for fusion need (`seqc.run.lm.language_model`); the decoders are built on top of the
scorers that fusion reaches, so the module that makes them sits above both.
"""

from __future__ import annotations

from pathlib import Path

from seqc.run.decoding.text_decoder import TextDecoder, from_artifact, from_session
from seqc.run.report import PlainReporter, Reporter
from seqc.run.session import open_session
from seqc.run.weights.restore import Source, artifact_task, restore, run_backend
from seqc.spec.errors import UsageError


def open_generator(source: Source, reporter: Reporter | None = None) -> TextDecoder:
    """The generator (`seqc.run.decoding.text_decoder.TextDecoder`) of an artifact, or of a
    checkpoint restored on a backend."""
    reporter = reporter or PlainReporter()
    overrides = list(source.overrides)
    if source.artifact is not None:
        from seqc.run.export.artifact import check_against, load_artifact

        art = load_artifact(source.artifact)
        if source.spec is not None:
            if source.experiment is None:
                raise UsageError("with a spec, name its experiment: -e EXP", code="missing-option")
            # a multi-task experiment's artifact says which task it holds
            named = source.task or artifact_task(
                source.spec, source.experiment, overrides, art.manifest.get("task")
            )
            session = open_session(
                source.spec, source.experiment, overrides, cache_dir=source.cache_dir, task=named
            )
            check_against(art, session)
        gen = from_artifact(art)
        reporter.info(
            f"decoding with {art.format} ({art.manifest['quantize']}) from {source.artifact}"
        )
        return gen
    if source.spec is None or source.experiment is None:
        raise UsageError(
            "decode needs a spec and an experiment, or --artifact",
            code="missing-option",
            hint="seqc decode SPEC -e EXP [--run-dir D], or seqc decode --artifact DIR",
        )
    session = open_session(
        source.spec, source.experiment, overrides, cache_dir=source.cache_dir, task=source.task
    )
    run_dir = source.run_dir or Path("runs") / source.experiment
    backend = run_backend(session, source.backend)
    restored = restore(session, source.checkpoint or run_dir, backend, reporter)
    return from_session(session, restored.model, restored.state["params"])
