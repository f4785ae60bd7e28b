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
  `PARITY_ATOL` is not written.
  A CTC model's frame logits are compared on the real frames of dev batches (padding frames
  are exactly "blank with certainty" in both, `seqc.compiler.lower.ctc`).
- figures: model size, latency (batch 1, 32 positions, median of repeated runs; a speech model:
  2 s of audio, and 32 decoded positions for an attention decoder), quality on dev (perplexity
  from the same teacher-forced logits, by the task's own criterion graph, or a CTC model's loss,
  as `seqc.run.evaluate` chooses; BLEU of greedy translations for translation tasks; WER and
  CER of greedy transcripts for speech, each utterance run alone and unpadded as a deployed
  model runs it) next to the trained model's, and the parity error.
- calibration (static int8 ONNX, full int8 TFLite) of a speech model's encoder runs dev
  utterances one at a time, unpadded: the padding of a batch puts -1e9 into attention scores
  and frame logits, which would set their int8 ranges.

Formats are found through `seqc.backends.registry` and built behind the `ArtifactFormat`
contract. Each artifact is built in a temporary folder beside its target and renamed into place
when complete, with a `manifest.json` (see `seqc.run.artifact`).
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from seqc.backends import registry
from seqc.backends.api import Backend, ExportJob, StepFunctions, Weights
from seqc.compiler.incremental import StepProgram, incremental, stepping_inputs, whole_graph
from seqc.compiler.lower.criterion import named
from seqc.compiler.lower.ctc import FORCED
from seqc.compiler.lower.sampled import variant
from seqc.compiler.min_length import min_audio_samples
from seqc.compiler.scoring import SCORE_INPUT, SCORE_OUTPUT, scoring_graph
from seqc.compiler.step_signature import StepSignature
from seqc.data.staging import staged
from seqc.data.targets import output_folder
from seqc.resolve.values import CallValue
from seqc.run.artifact import model_bytes, sha256_of, write_manifest
from seqc.run.decode import decoder_for
from seqc.run.evaluate import headline, summarize
from seqc.run.rundir import copy_spec_tree
from seqc.run.stepdecode import (
    StepDecoder,
    encoder_feeds,
    one_pass,
    step_through,
    teacher_forced,
)
from seqc.run.transcribe import (
    GREEDY,
    audio_arrays,
    one_by_one,
    score_transcripts,
    transcribe_attention,
    transcribe_ctc,
)
from seqc.run.translate import score_translations
from seqc.spec.errors import CheckError, ExportError, FileError, UsageError

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
AUDIO_FIELDS = ("audio", "audio_mask")
CALIBRATION_UTTERANCES = 32
"""Dev utterances a speech model's encoder is calibrated on (one at a time, unpadded)."""
BLEU_DECODE = CallValue(kind="greedy", namespace="decode", args={"max_length": 64})
"""How artifacts (and the trained model beside them) translate for the BLEU column."""


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


@dataclass
class Context:
    """What every artifact of one export shares: the program, weights, dev data, reference."""

    session: Any
    params: dict[str, np.ndarray]
    weights: Weights
    reference: Backend
    """The backend that trained the weights: its model is what every artifact must match."""
    program: StepProgram
    sig: StepSignature
    batches: list[dict[str, np.ndarray]]
    logits: list[np.ndarray]
    """The reference model's logits of each batch."""
    reference_quality: dict[str, float]
    bleu_examples: int
    task_kind: str
    _calibration: dict[str, list[dict[str, np.ndarray]]] = field(default_factory=dict)
    scoring: bool = False
    """True for the context of scoring exports (`normalize = false`): `program` is the
    scoring graph's and `logits` hold the reference's raw scores of the next tokens [B, T]."""
    _scoring: Context | None = None
    wer_examples: int = 0
    """Dev utterances each speech artifact (and the trained model) transcribes for WER."""

    @property
    def speech(self) -> bool:
        return self.task_kind == "asr"

    def calibration(self, which: str, limit: int = 64) -> list[dict[str, np.ndarray]]:
        """Up to `limit` real feeds of the `encoder` or the `step` graph, spread over the dev
        batches run teacher-forced through the reference backend's step functions (a speech
        encoder: dev utterances one at a time, unpadded; see the module doc)."""
        if which not in self._calibration:
            if which == "encoder" and self.speech:
                feeds = [
                    encoder_feeds(self.sig, u)
                    for u in _utterances(self.session, min(limit, CALIBRATION_UTTERANCES))
                ]
            elif which == "encoder":
                feeds = [encoder_feeds(self.sig, b) for b in self.batches]
            else:
                fns = self.reference.step_functions(self.program, self.params)
                feeds = [f for b in self.batches for f, _ in step_through(fns, self.sig, b)]
            stride = max(len(feeds) // limit, 1)
            self._calibration[which] = feeds[::stride][:limit]
        return self._calibration[which]


class Job(NamedTuple):
    """One artifact to build."""

    format: str
    quantize: str
    normalize: bool = True
    keep_float: tuple[str, ...] = ()
    """Layers left in float under int8 (TFLite; `seqc.backends.tflite.selective`)."""


KEEP_FLOAT_FORMATS = ("tflite",)
"""Formats whose int8 can leave named layers in float."""


def plan(
    formats: list[str],
    quantize: list[str],
    normalize: bool = True,
    keep_float: tuple[str, ...] = (),
    span: Any = None,
) -> list[Job]:
    """The artifacts to build; a pair a format has no mode for is an error. `keep_float` goes
    to the TFLite int8 artifacts among them, and is an error when there is none (`span`:
    where the spec said it)."""
    out = []
    for f in formats:
        modes = registry.artifact_format(registry.check_format(f)).quantize
        for q in quantize:
            if q not in modes:
                raise UsageError(
                    f"format `{f}` has no `{q}` quantization",
                    code="bad-quantize",
                    expected=", ".join(modes),
                    found=q,
                )
            if not normalize and f not in SCORING_FORMATS:
                raise UsageError(
                    f"format `{f}` exports the logits only; --no-normalize is for "
                    f"{' and '.join(SCORING_FORMATS)}",
                    code="bad-normalize",
                )
            kept = f in KEEP_FLOAT_FORMATS and q == "int8"
            out.append(Job(f, q, normalize, tuple(keep_float) if kept else ()))
    if keep_float and not any(job.keep_float for job in out):
        raise UsageError(
            f"keep_float leaves layers in float under int8 quantization of "
            f"{' and '.join(KEEP_FLOAT_FORMATS)}; no artifact asked for here has it",
            span=span,
            code="bad-keep-float",
            hint='use it with tflite(quantize = "int8") (--format tflite --quantize int8), or '
            "drop it",
        )
    return out


SCORING_FORMATS = ("onnx", "tflite")
"""Formats that take `normalize = false` (a scoring artifact)."""


def from_spec(session: Any) -> list[Job]:
    """The artifacts the experiment's `export { ... }` block lists, each with its own
    quantization and normalization; none when it lists none."""
    out = []
    span = session.resolved.span("export.formats")
    for call in session.resolved.config["export"]["formats"]:
        q = str(call.args.get("quantize", "none"))
        keep = tuple(str(x) for x in call.args.get("keep_float", ()))
        out += plan([call.kind], [q], bool(call.args.get("normalize", True)), keep, span)
    for job in out:
        check_layers(session, job.keep_float, span)
    return out


def check_layers(session: Any, layers: tuple[str, ...], span: Any = None) -> None:
    """Every name in `layers` is a layer of the task's model (a path such as `frontend` or
    `encoder.0`, as `seqc show --graph` lists them)."""
    known = {op.layer for op in session.graph.ops if op.layer}
    for name in layers:
        if not any(k == name or k.startswith(f"{name}.") for k in known):
            tops = sorted({k.split(".")[0] for k in known})
            raise UsageError(
                f"keep_float names `{name}`, which is no layer of task `{session.task}`'s model",
                span=span,
                code="unknown-layer",
                expected=", ".join(tops[:12]),
                found=name,
            )


def folder_name(job: Job) -> str:
    name = f"{job.format}-{job.quantize}" if job.normalize else f"{job.format}-{job.quantize}-score"
    return f"{name}-float-{'-'.join(job.keep_float)}" if job.keep_float else name


def _split(session: Any) -> str:
    return "dev" if "dev" in session.pipeline.splits else "train"


def dev_batches(session: Any, n: int, rows: int = 8, length: int = 48) -> list[dict]:
    """Up to `n` batches of the spec's dev split (train if none), cut to `rows` x `length`
    (the decoded length: a source, audio included, is kept whole)."""
    out = []
    for i, batch in enumerate(session.pipeline.batches(_split(session))):
        if i >= n:
            break
        arrays = {}
        for k, v in batch.arrays.items():
            v = np.asarray(v)[:rows]
            is_time = k not in ("src", "src_mask", *AUDIO_FIELDS) and v.ndim >= 2
            arrays[k] = v[:, :length] if is_time else v
        out.append(arrays)
    return out


def _utterances(session: Any, n: int) -> list[dict[str, np.ndarray]]:
    """Up to `n` dev utterances, each alone and unpadded (`audio`, `audio_mask` [1, N])."""
    out = []
    for batch in session.pipeline.batches(_split(session)):
        for r in range(batch.num_examples):
            length = int(np.asarray(batch.arrays["audio_mask"])[r].sum())
            out.append(audio_arrays(np.asarray(batch.arrays["audio"])[r, :length]))
            if len(out) >= n:
                return out
    return out


def _quality(ctx: Context, logits: list[np.ndarray]) -> dict[str, float]:
    """The dev figure of these logits of the dev batches that `seqc.run.evaluate` heads a
    task's evaluation with (perplexity; a CTC model's: its criterion's loss), by the task's own
    evaluation criterion run on the reference backend (of a scoring context's raw scores:
    exp(s) as p)."""
    if ctx.scoring:
        return {"raw_perplexity": _raw_perplexity(ctx, logits)}
    compiled = ctx.session.compiled
    sums = {"loss_sum": 0.0, "nll_sum": 0.0, "tokens": 0.0}
    for z, batch in zip(logits, ctx.batches, strict=True):
        inputs = compiled.criterion_inputs(np.asarray(z, np.float32), batch)
        out = named(ctx.reference.run(compiled.eval_criterion, {}, inputs))
        sums["loss_sum"] += float(out["loss"]) * float(out["tokens"])
        sums["nll_sum"] += float(out["nll_sum"])
        sums["tokens"] += float(out["tokens"])
    name, value = headline(summarize(sums, ctc=compiled.ctc))
    return {name: value}


def prepare(
    session: Any,
    params: dict[str, np.ndarray],
    weights: Weights,
    parity_batches: int = 2,
    bleu_examples: int = 0,
    wer_examples: int = 0,
) -> Context:
    graph = session.graph
    reference = registry.backend(weights.backend)
    if session.compiled.ctc:  # frame logits in one pass: nothing is decoded step by step
        program = whole_graph(graph)
    else:
        program = incremental(graph, stepping_inputs(graph))
    sig = StepSignature.of(program, session.compiled.fields)
    batches = dev_batches(session, parity_batches)
    model = reference.model(session.compiled, session.train_config)
    state = model.with_params(params)
    logits = [np.asarray(model.logits(state["params"], b)) for b in batches]
    kind = session.compiled.kind
    ctx = Context(
        session, params, weights, reference, program, sig, batches, logits, {}, bleu_examples, kind
    )
    ctx.wer_examples = wer_examples
    ctx.reference_quality = _quality(ctx, logits)
    tok = session.pipeline.target_tokenizer
    if bleu_examples and kind == "seq2seq":
        ctx.reference_quality["bleu"] = _bleu(
            ctx, decoder_for(model, state["params"], tok.bos_id, tok.eos_id, tok.pad_id)
        )
    if wer_examples and ctx.speech:
        if program.encoder_only:  # the trained model runs batched: what it was evaluated as
            ctx.reference_quality |= _wer(ctx, logits=lambda a: model.logits(state["params"], a))
        else:
            decoder = decoder_for(model, state["params"], tok.bos_id, tok.eos_id, tok.pad_id)
            ctx.reference_quality |= _wer(ctx, decoder=decoder)
    return ctx


def _wer(ctx: Context, logits: Any = None, decoder: Any = None) -> dict[str, float]:
    """WER and CER (percent) of greedy transcripts of the first `wer_examples` dev utterances,
    by CTC frame logits or an attention decoder."""
    pipeline = ctx.session.pipeline
    split = _split(ctx.session)
    if logits is not None:
        hyps, refs = transcribe_ctc(logits, pipeline, split, None, ctx.wer_examples)
    else:
        hyps, refs = transcribe_attention(decoder, pipeline, split, GREEDY, ctx.wer_examples)
    scores = score_transcripts(hyps, refs)
    return {"wer": float(scores["wer"]), "cer": float(scores["cer"])}


def real_frames(logits: np.ndarray) -> np.ndarray:
    """The frames of CTC frame logits [B, F, V] that hold audio: a padding frame is forced to
    "blank with certainty" (every id but the blank at -1e9)."""
    return ~np.all(np.asarray(logits)[..., 1:] <= FORCED / 2, axis=-1)


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


SELF_NORMALISED = 'nce, or snis with variant = "B"'


def scoring_context(ctx: Context) -> Context:
    """The context of scoring exports: the scoring graph stepped like the forward, and the
    reference's raw scores of each next token (its logits at the label) to match. Only a
    model trained to be self-normalised may be deployed by its raw scores."""
    if ctx._scoring is not None:
        return ctx._scoring
    session = ctx.session
    compiled = session.compiled
    loss = compiled.config["loss"]
    if variant(loss) not in ("nce", "normalizing"):
        raise CheckError(
            f"normalize = false deploys the raw scores exp(s) as probabilities, which only a "
            f"self-normalised model gives; this one was trained with `{loss.kind}`",
            span=session.resolved.span(f"{session.task}.loss"),
            code="not-self-normalised",
            expected=SELF_NORMALISED,
            found=loss.kind,
            hint="export with normalize = true (the logits), or train with nce(...) or snis(...)",
        )
    graph = scoring_graph(session.graph)
    program = incremental(graph, [*stepping_inputs(session.graph), SCORE_INPUT], SCORE_OUTPUT)
    labels, _ = compiled.labels
    sig = StepSignature.of(program, compiled.fields, score_field=labels)
    scores = [
        np.take_along_axis(np.asarray(z), np.asarray(b[labels])[..., None], -1)[..., 0]
        for z, b in zip(ctx.logits, ctx.batches, strict=True)
    ]
    view = dataclasses.replace(
        ctx, program=program, sig=sig, logits=scores, reference_quality={}, bleu_examples=0,
        _calibration={}, scoring=True, _scoring=None,
    )  # fmt: skip
    view.reference_quality = _quality(view, scores)
    ctx._scoring = view
    return view


def _raw_perplexity(ctx: Context, scores: list[np.ndarray]) -> float:
    """exp of the mean negative raw score of the real next tokens: the perplexity a
    self-normalised model is deployed with (`raw_perplexity` in `seqc eval`)."""
    _, mask = ctx.session.compiled.labels
    total = tokens = 0.0
    for s, batch in zip(scores, ctx.batches, strict=True):
        m = np.asarray(batch[mask], bool)
        total -= float(np.asarray(s, np.float64)[m].sum())
        tokens += float(m.sum())
    return float(np.exp(total / max(tokens, 1.0)))


def _bleu(ctx: Context, decoder: Any) -> float:
    pipeline = ctx.session.pipeline
    split = "dev" if "dev" in pipeline.splits else "train"
    scores = score_translations(decoder, pipeline, BLEU_DECODE, split, ctx.bleu_examples)
    return scores["bleu"]


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


def _job(ctx: Context, keep_float: tuple[str, ...] = ()) -> ExportJob:
    session = ctx.session
    return ExportJob(
        keep_float=keep_float,
        graph=session.graph,
        params=ctx.params,
        program=ctx.program,
        signature=ctx.sig,
        metadata={"seqc.experiment": session.resolved.name, "seqc.task": session.task},
        calibration=ctx.calibration,
    )


def export_one(
    ctx: Context,
    fmt: str,
    quantize: str,
    target: Path,
    normalize: bool = True,
    keep_float: tuple[str, ...] = (),
) -> Row:
    """Build, gate, measure and package one artifact into `target` (see the module doc);
    `normalize = false` exports the scoring graph (`scoring_context`); `keep_float`: layers a
    TFLite int8 artifact leaves in float."""
    if not normalize:
        ctx = scoring_context(ctx)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise _exists(target)
    output_folder(target.parent, "--out")
    artifact = registry.artifact_format(fmt)
    with staged(target.parent, target.name) as tmp, staged(target.parent, "work") as work:
        extra = artifact.build(_job(ctx, keep_float), tmp, quantize, work)
        fns = artifact.runtime(tmp, ctx.sig)
        forward = one_pass if ctx.sig.encoder_only else teacher_forced
        logits = [forward(fns, ctx.sig, b) for b in ctx.batches]
        parity = _parity(ctx, logits)
        allowed = SPEECH_PARITY_ATOL if ctx.speech else PARITY_ATOL
        if quantize == "none" and parity > allowed:
            what = "scores" if ctx.scoring else "logits"
            raise ExportError(
                f"the {fmt} artifact's {what} differ from the trained model's by {parity:.3g} "
                f"on dev batches (allowed {allowed}); nothing was written",
                path=str(target),
                code="parity-failed",
            )
        quality = _quality(ctx, logits)
        if ctx.bleu_examples and ctx.task_kind == "seq2seq":
            quality["bleu"] = _bleu(ctx, _artifact_decoder(ctx, fns))
        if ctx.wer_examples and ctx.speech:
            if ctx.sig.encoder_only:
                quality |= _wer(ctx, logits=one_by_one(lambda a: one_pass(fns, ctx.sig, a)))
            else:
                quality |= _wer(ctx, decoder=_artifact_decoder(ctx, fns))
        latency = _latency_ms(fns, ctx.sig, ctx.session.pipeline.sample_rate)
        manifest = _package(ctx, tmp, fmt, quantize, parity, quality, latency, extra)
        artifact.stamp(tmp, _props(tmp, manifest))
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


def _package(
    ctx: Context,
    folder: Path,
    fmt: str,
    quantize: str,
    parity: float,
    quality: dict[str, float],
    latency: float,
    extra: dict[str, Any],
) -> dict[str, Any]:
    """Tokenizer and frozen spec into the folder; the manifest (written by the caller)."""
    session = ctx.session
    pipeline = session.pipeline
    pipeline.tokenizer.save(folder / "tokenizer" / "source")
    if pipeline.target_tokenizer is not pipeline.tokenizer:
        pipeline.target_tokenizer.save(folder / "tokenizer" / "target")
    copy_spec_tree(session.program, folder / "spec", origin=False)
    tok = pipeline.target_tokenizer
    decode = session.task_config.get("decode")
    program = ctx.program
    served = program.encoder if program.step is None else program.step
    assert served is not None
    manifest = {
        "format": fmt,
        "quantize": quantize,
        "experiment": session.resolved.name,
        "task": session.task,
        "task_kind": ctx.task_kind,
        "vocab_size": pipeline.tokenizer.vocab_size,
        "special": {"bos": tok.bos_id, "eos": tok.eos_id, "pad": tok.pad_id},
        "decode": None if decode is None else {"kind": decode.kind, "args": dict(decode.args)},
        "checkpoint": {"backend": ctx.weights.backend, "step": ctx.weights.step},
        "step": ctx.sig.to_json(),
        "inputs": {
            name: [list(served.ops[vid].type.shape), served.ops[vid].type.dtype]
            for name, vid in served.inputs.items()
        },
        "outputs": list(program.encoder_outputs if program.step is None else program.step_outputs),
        "audio": _audio_entry(ctx),
        "scoring": _scoring_entry(ctx),
        "parity_max_abs_err": parity,
        "quality": quality,
        "reference_quality": ctx.reference_quality,
        "latency_ms": latency,
        **extra,
    }
    return manifest


def _audio_entry(ctx: Context) -> dict[str, Any] | None:
    """What a speech artifact's audio input takes (None for text models): `seqc decode
    --artifact DIR --input utt.wav` reads wav files at this rate, and refuses one shorter than
    `min_samples` (the model's shortest input: its front end leaves no frame of less, and a
    runtime fails on it) as the checkpoint does."""
    rate = ctx.session.pipeline.sample_rate
    if not ctx.speech or rate is None:
        return None
    shortest = min_audio_samples(ctx.session.graph)
    return {
        "sample_rate": int(rate),
        "channels": 1,
        "min_samples": shortest,
        "min_ms": 1000.0 * shortest / int(rate),
        "inputs": {"audio": "float32 samples in [-1, 1)", "audio_mask": "true on real samples"},
    }


def _scoring_entry(ctx: Context) -> dict[str, Any]:
    """What the artifact's first output means, for whoever deploys it."""
    if ctx.program.encoder_only:
        return {
            "normalize": True,
            "output": ctx.program.output,
            "means": "CTC frame logits [B, F, vocab] in one pass; id 0 is the blank, and "
            "padding frames are blank with certainty (0 for the blank, -1e9 for the rest), so "
            "greedy or prefix beam search over all F frames gives the transcript",
            "blank": 0,
        }
    if not ctx.scoring:
        return {
            "normalize": True,
            "output": ctx.program.output,
            "means": "logits over the vocabulary at each step; log p = log_softmax(logits)",
        }
    return {
        "normalize": False,
        "input": ctx.sig.score_input,
        "output": ctx.program.output,
        "means": "the raw score s of the token fed as `input` at each step; the model was "
        "trained self-normalised, so log p is taken as s (no softmax over the vocabulary)",
        "loss": ctx.session.compiled.config["loss"].kind,
    }


def _props(folder: Path, manifest: dict[str, Any]) -> dict[str, str]:
    """The manifest and the frozen spec (by relative path), as text, and the sha256 of the
    tokenizer folder beside the model (the manifest's `files` entry for it), for formats that
    carry metadata in the model file itself: a file that travels alone says what it is and
    which tokenizer it needs. Not the tokenizer's bytes: a SentencePiece model (300 KB, more
    as text) would outweigh a small int8 model's weights, in every file of the artifact."""
    spec = {
        p.relative_to(folder / "spec").as_posix(): p.read_text()
        for p in sorted((folder / "spec").rglob("*"))
        if p.is_file()
    }
    return {
        "seqc.manifest": json.dumps(manifest, sort_keys=True, default=str),
        "seqc.spec": json.dumps(spec, sort_keys=True),
        "seqc.tokenizer_sha256": sha256_of(folder / "tokenizer"),
    }
