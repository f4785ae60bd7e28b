"""`seqc eval --manifest FILE`: score a speech model on any manifest of wavs and transcripts, a
user's own recordings included, in place of the spec's split.

The manifest becomes an override of the task's input (`TASK.input.SPLIT.path = FILE`, or a new
`audio_manifest(FILE)` reader with the training reader's sample rate and field names where the
spec has no such split), so it is read and checked exactly as the spec's own manifests are:
every wav's header at its line, the sample rate, the fields. The tokenizer, buckets and model
are the run's.
"""

from __future__ import annotations

import json
from pathlib import Path

from seqc.resolve.experiment import resolve
from seqc.resolve.program import load_program
from seqc.resolve.values import CallValue
from seqc.spec.errors import FileError, UsageError


def with_manifest(
    spec: Path,
    experiment: str,
    overrides: list[str],
    task: str | None,
    split: str,
    manifest: Path | None,
) -> tuple[list[str], str | None]:
    """The overrides with `manifest` (if given) as the `split` of the speech task's input, and
    the label its transcripts go under in RUN/eval in place of the split's name
    (`manifest-NAME`: under the split's own name they would replace the spec's split's)."""
    if manifest is None:
        return overrides, None
    extra = manifest_override(spec, experiment, overrides, task, split, manifest)
    return [*overrides, extra], f"manifest-{manifest.stem}"


def manifest_override(
    spec: Path,
    experiment: str,
    overrides: list[str],
    task: str | None,
    split: str,
    manifest: Path,
) -> str:
    """The `--set` that makes `manifest` the `split` of the speech task's input."""
    if not manifest.is_file():
        raise FileError(
            f"no manifest at {manifest}",
            code="file-not-found",
            path=str(manifest),
            hint='a manifest is JSON Lines, one {"audio": "wavs/0001.wav", "text": "..."} per '
            "line, audio paths relative to the manifest's folder",
        )
    resolved = resolve(load_program(spec), experiment, overrides)
    tasks = list(resolved.tasks)
    if task is None:
        if len(tasks) != 1:
            raise UsageError(
                f"--manifest replaces one task's {split} split; experiment `{experiment}` has "
                f"the tasks {', '.join(tasks)}",
                code="which-task",
                hint="name the speech task with --task",
            )
        task = tasks[0]
    readers = resolved.config[task]["input"]
    train = readers.get("train")
    if not isinstance(train, CallValue) or train.kind != "audio_manifest":
        raise UsageError(
            f"--manifest scores a speech task; task `{task}`'s input is not read from audio "
            "manifests",
            code="not-speech",
            hint="--manifest is for speech recognisers; score text with --split",
        )
    path = json.dumps(str(manifest.resolve()))
    current = readers.get(split)
    if isinstance(current, CallValue) and current.kind == "audio_manifest":
        return f"{task}.input.{split}.path={path}"
    args = train.args
    named = ", ".join(
        f"{k} = {json.dumps(args[k])}" for k in ("audio", "text", "sample_rate") if k in args
    )
    return f"{task}.input.{split}=audio_manifest({path}{', ' + named if named else ''})"
