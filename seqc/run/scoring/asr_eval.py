"""A speech checkpoint's `seqc eval`: WER and CER on a split, overall and, with `--by FIELD`,
per group of a manifest field, printed and written to RUN/eval/STEP-SPLIT/ with every
utterance's transcript, where a reported figure can be checked and rescored (`scores.json`,
`hypotheses.txt`, `references.txt`, `audio.txt`, line N of each the split's utterance N)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqc.backends.api import Model, Weights
from seqc.run.decoding.voice_warp import Choice
from seqc.run.report import Reporter
from seqc.run.scoring.breakdown import group_of, rates_by, table
from seqc.run.scoring.transcribe import score_model, warp_record
from seqc.run.session import Session

if TYPE_CHECKING:
    from seqc.run.export.artifact import Artifact

ASR_FILES = ("audio.txt", "hypotheses.txt", "references.txt", "scores.json")
"""What `write_transcripts` puts in its folder: the first three line up."""

COUNTS = ("words", "substitutions", "deletions", "insertions", "chars", "char_edits")


def evaluate_speech(
    session: Session,
    model: Model,
    params: Any,
    weights: Weights,
    split: str,
    limit: int,
    by: list[str],
    run_dir: Path,
    folder: Path,
    reporter: Reporter,
) -> dict[str, Any]:
    """Transcribe the first `limit` utterances of `split` (0: all), report WER and CER overall
    and per group of each field in `by`, and write them with the transcripts to `folder`; the
    scored transcripts (`score_model`'s)."""
    w = score_model(model, params, session.pipeline, split, session.compiled.decode, limit)
    facts = {
        "task": session.task,
        "split": split,
        "limit": limit,
        "checkpoint": {"step": weights.step, "path": str(weights.path), "backend": weights.backend},
        "decode": session.compiled.decode.to_json() if session.compiled.decode else "greedy",
    }
    report_speech(session, w, split, by, run_dir, folder, reporter, facts)
    return w


def evaluate_speech_artifact(
    session: Session,
    artifact: Artifact,
    split: str,
    limit: int,
    by: list[str],
    run_dir: Path,
    folder: Path,
    reporter: Reporter,
) -> None:
    """`evaluate_speech` with an exported artifact in place of the checkpoint: each utterance
    alone and unpadded, as a deployed model hears it, decoded with the spec's strategy as the
    checkpoint's transcripts are."""
    from seqc.run.decoding.forced import one_pass
    from seqc.run.decoding.steps import StepDecoder
    from seqc.run.export.artifact import step_functions
    from seqc.run.scoring.transcribe import (
        GREEDY,
        one_by_one,
        score_transcripts,
        transcribe_attention,
        transcribe_ctc,
    )

    fns, sig, pipeline = step_functions(artifact), artifact.signature, session.pipeline
    strategy = session.compiled.decode
    choices: dict[str, Choice] = {}
    if sig.encoder_only:  # CTC: frame logits in one pass
        run = one_by_one(lambda arrays: one_pass(fns, sig, arrays))
        hyps, refs, order = transcribe_ctc(run, pipeline, split, strategy, limit, choices)
    else:
        special = artifact.manifest["special"]
        decoder = StepDecoder(fns, sig, special["bos"], special["eos"], special["pad"])
        hyps, refs, order = transcribe_attention(
            decoder, pipeline, split, strategy or GREEDY, limit
        )
    facts = {
        "task": session.task,
        "split": split,
        "limit": limit,
        "artifact": artifact.record(),
        "decode": strategy.to_json() if strategy else "greedy",
    }
    w = score_transcripts(hyps, refs, order) | warp_record(choices)
    report_speech(session, w, split, by, run_dir, folder, reporter, facts)


def report_speech(
    session: Session,
    w: dict[str, Any],
    split: str,
    by: list[str],
    run_dir: Path,
    folder: Path,
    reporter: Reporter,
    facts: dict[str, Any],
) -> None:
    """Print the scored transcripts' figures (overall, and by each field in `by`) and write
    them to `folder` with `facts` (what was scored, how)."""
    examples = session.pipeline.splits[split].examples  # `by` checked by the caller, up front
    for hyp, ref in w["samples"]:
        reporter.info(f"  hyp: {hyp}\n  ref: {ref}")
    reporter.result(
        f"{split}_wer: {w['wer']:.2f}  ({w['examples']} utterances, {w['words']} words)"
    )
    reporter.result(f"{split}_cer: {w['cer']:.2f}")
    if "voice_warp" in w:
        for line in warp_lines(split, w["voice_warp"]):
            reporter.result(line)
        facts = facts | {"voice_warp": w["voice_warp"]}
    used = [examples[i] for i in w["indices"]]
    groups: dict[str, dict[str, dict[str, Any]]] = {}
    for field in by:
        rates = rates_by([group_of(ex, field) for ex in used], w["hypotheses"], w["references"])
        groups[field] = rates
        reporter.result(f"{split} by {field}:")
        for line in table(field, rates):
            reporter.result(line)
    write_transcripts(folder, w, [ex.source for ex in used], groups, facts, run_dir)
    reporter.result(f"{split} transcripts and scores: {folder}")


WARP_LINES = 20
"""Speakers whose voice-warp factor `seqc eval` prints one by one; more are counted by factor
(scores.json has each)."""


def warp_lines(split: str, choices: dict[str, dict[str, Any]]) -> list[str]:
    """What `seqc eval` prints of a voice warp's choices: a line per speaker, or for many
    speakers how many chose each factor."""
    if len(choices) <= WARP_LINES:
        return [
            f"{split} voice warp: {speaker}: factor {c['factor']:g} "
            f"(chosen on {c['utterances']} utterances)"
            for speaker, c in sorted(choices.items())
        ]
    counts: dict[float, int] = {}
    for c in choices.values():
        counts[c["factor"]] = counts.get(c["factor"], 0) + 1
    each = ", ".join(f"{f:g}: {n}" for f, n in sorted(counts.items()))
    return [f"{split} voice warp: {len(choices)} speakers, by factor {each} (scores.json: each)"]


def write_transcripts(
    folder: Path,
    scored: dict[str, Any],
    audio: list[str],
    groups: dict[str, dict[str, dict[str, Any]]],
    facts: dict[str, Any],
    run_dir: Path,
) -> None:
    """The transcripts, one per line in split order, and `scores.json` (WER, CER, their counts,
    each `--by` field's groups, `facts`), replacing an earlier evaluation's folder whole."""
    from seqc.run.rundir.lock import unwritable
    from seqc.run.rundir.outputs import write_folder

    record = {
        **facts,
        "wer": scored["wer"],
        "cer": scored["cer"],
        "utterances": scored["examples"],
        **{k: scored[k] for k in COUNTS},
        "by": groups,
    }
    names = dict(zip(("audio", "hyps", "refs", "scores"), ASR_FILES, strict=True))
    try:
        write_folder(
            folder,
            {
                names["audio"]: audio,
                names["hyps"]: scored["hypotheses"],
                names["refs"]: scored["references"],
                names["scores"]: json.dumps(record, indent=2, default=str) + "\n",
            },
        )
    except OSError as e:
        raise unwritable(run_dir, e) from None
