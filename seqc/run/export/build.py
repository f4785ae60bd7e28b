"""`seqc export`: deployment artifacts from trained weights, each checked against the model.

For each requested format (ONNX, TFLite, SavedModel) and quantization, the model's op graph is
split into an encoder and a decoder-step graph with explicit caches
(`seqc.compiler.incremental`), emitted, gated and measured. A CTC speech model is decoded on the
host from frame logits, so it has nothing to step: it is exported whole, as an encoder alone
(`whole_graph`: raw audio and its mask in, the front end inside, frame logits out).

- gate: ONNX passes `onnx.checker` (full check) and strict shape inference, and the reference
  evaluator agrees with onnxruntime on a step; every artifact is run step by step over batches
  of the spec's own dev data (teacher-forced) and its logits are compared with the trained
  model's full forward pass, on the backend that trained it. An fp32 artifact further than
  `PARITY_ATOL` is not written. A language model's sentence scorer (ONNX's `sequence.onnx`)
  answers to the same gate: its scores of the dev labels against the log-softmax of the
  trained model's logits there (a scoring export: against its raw scores).
  A CTC model's frame logits are compared on the real frames of dev batches (padding frames
  are exactly "blank with certainty" in both, `seqc.compiler.lower.ctc`).
- figures: model size, latency (batch 1, 32 positions, median of repeated runs; a speech model:
  2 s of audio, and 32 decoded positions for an attention decoder), quality on dev (perplexity
  from the same teacher-forced logits, by the task's own criterion graph, or a CTC model's loss,
  as `seqc.run.scoring.evaluate` chooses; BLEU of greedy translations for translation tasks; WER and
  CER of greedy transcripts for speech, each utterance run alone and unpadded as a deployed
  model runs it) next to the trained model's, and the parity error.
- calibration (static int8 ONNX, full int8 TFLite): feeds drawn once per export
  (`seqc.run.export.context`).

Formats are found through `seqc.backends.registry` and built behind the `ArtifactFormat`
contract. Each artifact is built in a temporary folder beside its target and renamed into place
when complete, with a `manifest.json` (`seqc.run.export.package` writes what it says,
`seqc.run.export.artifact` reads it back). Which artifacts to build is `seqc.run.export.plan`'s.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from seqc.backends import registry
from seqc.backends.api import ExportJob, SentenceScorer, StepFunctions, sentence_scorer
from seqc.compiler.step_signature import StepSignature
from seqc.data.staging import staged
from seqc.data.targets import output_folder
from seqc.run.decoding.ctc import real_frames
from seqc.run.decoding.forced import one_pass, sequence_feeds, teacher_forced
from seqc.run.decoding.search import log_softmax64
from seqc.run.decoding.steps import StepDecoder
from seqc.run.export.artifact import model_bytes, write_manifest
from seqc.run.export.context import (
    Context,
    dev_bleu,
    dev_quality,
    dev_wer,
    scoring_context,
    with_sentences,
)
from seqc.run.export.package import model_properties, pack
from seqc.run.scoring.transcribe import audio_arrays, one_by_one
from seqc.spec.errors import ExportError, FileError, UsageError

PARITY_ATOL = 1e-4
"""Largest |logit difference| an fp32 artifact may show against the trained model."""
SPEECH_PARITY_ATOL = 5e-3
"""The same for a speech model, whose log-mel front end is ill-conditioned in float32: a mel
bin of a quiet frame sits near the log's floor (1e-6), so the rounding of the DFT matmuls
(~1e-7 of the frame's energy, in whatever order a runtime sums) becomes ~1e-4 in the log,
and the input LayerNorm over the bins magnifies it again. Two runtimes of the same graph
differ by that much: on a 4-step tiny Conformer-CTC, the TF backend differs from JAX by 3.5e-4
and onnxruntime by 8.8e-4, at a few quiet frames (elsewhere 1e-5); a wrong emitter differs by
whole units. WER and CER of the artifact beside the trained model's are the quality check."""

LATENCY_LENGTH = 32
LATENCY_SECONDS = 2.0
"""A speech model's latency is of this much audio, at batch 1."""


@dataclass
class Row:
    """One artifact's line of the export table."""

    format: str
    quantize: str
    path: Path
    size_bytes: int
    latency_ms: float
    quality: dict[str, float]
    parity: float
    extra: dict[str, Any] = field(default_factory=dict)


def _parity(ctx: Context, logits: list[np.ndarray]) -> float:
    """Largest |difference| from the reference's logits on the dev batches (a CTC model's:
    on real frames, where the values mean something; padding frames are forced in both)."""
    worst = 0.0
    for a, b in zip(logits, ctx.logits, strict=True):
        diff = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))
        if ctx.program.encoder_only:
            diff = diff[real_frames(b)]
        worst = max(worst, float(np.max(diff, initial=0.0)))
    return worst


def _sequence_parity(ctx: Context, scorer: SentenceScorer) -> float:
    """Largest |difference| of a sentence scorer's scores of the dev batches' labels from the
    reference's: its raw scores (a scoring context), or the log-softmax of its logits read at
    the labels."""
    labels, _ = ctx.session.compiled.labels
    worst = 0.0
    for z, batch in zip(ctx.logits, ctx.batches, strict=True):
        if ctx.scoring:
            want = np.asarray(z, np.float64)
        else:
            log_p = log_softmax64(z)
            want = np.take_along_axis(log_p, np.asarray(batch[labels])[..., None], -1)[..., 0]
        got = np.asarray(scorer(sequence_feeds(ctx.sig, batch)), np.float64)
        worst = max(worst, float(np.max(np.abs(got - want), initial=0.0)))
    return worst


def _latency_ms(fns: Any, sig: StepSignature, sample_rate: int | None, reps: int = 5) -> float:
    """Batch 1, `LATENCY_LENGTH` positions (and a source that long; a speech model's source:
    `LATENCY_SECONDS` of audio at `sample_rate`): median over `reps`."""
    n = LATENCY_LENGTH
    ids = np.full((1, n), 5, np.int32)
    arrays = {"src": ids, "src_mask": np.ones((1, n), bool), "tgt_in": ids, "inputs": ids}
    if sample_rate is not None:  # a quiet noise: a real signal's magnitude, not silence's log
        noise = np.random.default_rng(0).normal(0.0, 0.05, int(LATENCY_SECONDS * sample_rate))
        arrays |= audio_arrays(noise.astype(np.float32))
    if sig.score_field is not None:
        arrays[sig.score_field] = ids

    def run() -> None:
        if sig.encoder_only:
            one_pass(fns, sig, arrays)
        else:
            teacher_forced(fns, sig, arrays)

    run()  # warm up: first runs allocate and specialise
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    return 1000.0 * statistics.median(times)


def _job(ctx: Context, keep_float: tuple[str, ...], shared: Path | None, variant: str) -> ExportJob:
    session = ctx.session
    return ExportJob(
        keep_float=keep_float,
        shared=shared,
        variant=variant,
        graph=session.graph,
        params=ctx.params,
        program=ctx.program,
        signature=ctx.sig,
        metadata={"seqc.experiment": session.resolved.name, "seqc.task": session.task},
        calibration=ctx.calibration,
        probe=ctx.probe,
    )


def export_one(
    ctx: Context,
    fmt: str,
    quantize: str,
    target: Path,
    normalize: bool = True,
    keep_float: tuple[str, ...] = (),
    shared: Path | None = None,
    sentences: bool = False,
) -> Row:
    """Build, gate, measure and package one artifact into `target` (see the module doc);
    `normalize = false` exports the scoring graph (`scoring_context`); `keep_float`: layers a
    TFLite int8 artifact leaves in float; `shared`: the folder of the export's intermediates
    (`ExportJob.shared`); `sentences`: a language model's artifact carries its sentence
    scorer (`StepProgram.sequence`, a format that has one: ONNX)."""
    if not normalize:
        ctx = scoring_context(ctx)
    if sentences:
        if ctx.program.encoder is not None or ctx.program.step is None:
            raise no_sentence_scorer(ctx.session.task)
        ctx = with_sentences(ctx)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise _exists(target)
    output_folder(target.parent, "--out")
    artifact = registry.artifact_format(fmt)
    with staged(target.parent, target.name) as tmp, staged(target.parent, "work") as work:
        job = _job(ctx, keep_float, shared, "forward" if normalize else "scoring")
        extra = artifact.build(job, tmp, quantize, work)
        fns = artifact.runtime(tmp, ctx.sig)
        forward = one_pass if ctx.sig.encoder_only else teacher_forced
        logits = [forward(fns, ctx.sig, b) for b in ctx.batches]
        parity = _parity(ctx, logits)
        scorer = sentence_scorer(fns)
        if sentences and scorer is None:
            raise ExportError(
                f"the {fmt} artifact has no sentence scorer; {fmt} does not carry one",
                path=str(target),
                code="bad-sentences",
            )
        if scorer is not None:  # a language model's sentence scorer answers to the same gate
            extra["sequence_parity"] = _sequence_parity(ctx, scorer)
            parity = max(parity, extra["sequence_parity"])
        allowed = SPEECH_PARITY_ATOL if ctx.speech else PARITY_ATOL
        if quantize == "none" and parity > allowed:
            what = "scores" if ctx.scoring else "logits"
            raise ExportError(
                f"the {fmt} artifact's {what} differ from the trained model's by {parity:.3g} "
                f"on dev batches (allowed {allowed}); nothing was written",
                path=str(target),
                code="parity-failed",
            )
        quality = dev_quality(ctx, logits)
        if ctx.bleu_examples and ctx.task_kind == "seq2seq":
            quality["bleu"] = dev_bleu(ctx, _artifact_decoder(ctx, fns))
        if ctx.wer_examples and ctx.speech:
            if ctx.sig.encoder_only:
                quality |= dev_wer(ctx, logits=one_by_one(lambda a: one_pass(fns, ctx.sig, a)))
            else:
                quality |= dev_wer(ctx, decoder=_artifact_decoder(ctx, fns))
        latency = _latency_ms(fns, ctx.sig, ctx.session.pipeline.sample_rate)
        manifest = pack(ctx, tmp, fmt, quantize, parity, quality, latency, extra)
        artifact.stamp(tmp, model_properties(tmp, manifest))
        write_manifest(tmp, manifest)
        size = model_bytes(tmp, fmt)
        try:  # an empty folder is replaced; another export's artifact (one run at once) is not
            if target.is_dir() and not any(target.iterdir()):
                target.rmdir()
            tmp.rename(target)
        except OSError:
            if target.exists():
                raise _exists(target, meanwhile=True) from None
            raise
    shown = f"{fmt} score" if ctx.scoring else fmt
    return Row(shown, quantize, target, size, latency, quality, parity, extra)


def no_sentence_scorer(task: str) -> UsageError:
    """`--sentences` asked of a model that does not score sentences of its own tokens."""
    return UsageError(
        f"a sentence scorer scores a language model's sentences; task `{task}` is not a "
        "language model (it reads a source or audio)",
        code="not-a-language-model",
        hint="drop --sentences (or sentences = true)",
    )


def _exists(target: Path, meanwhile: bool = False) -> FileError:
    """An artifact folder that holds something already: never written over. `meanwhile`:
    another export wrote it while this one ran (two exports into one --out at once)."""
    return FileError(
        f"{target} "
        + ("was written by another export meanwhile" if meanwhile else "already holds an export"),
        path=str(target),
        code="exists",
        hint="choose another --out, or delete the old export",
    )


def _artifact_decoder(ctx: Context, fns: StepFunctions) -> StepDecoder:
    tok = ctx.session.pipeline.target_tokenizer
    return StepDecoder(fns, ctx.sig, tok.bos_id, tok.eos_id, tok.pad_id)
