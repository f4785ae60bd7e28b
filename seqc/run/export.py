"""`seqc export`: deployment artifacts from trained weights, each checked against the model.

For each requested format (ONNX, TFLite, SavedModel) and quantization, the model's op graph is
split into an encoder and a decoder-step graph with explicit caches
(`seqc.compiler.incremental`), emitted, gated and measured:

- gate: ONNX passes `onnx.checker` (full check) and strict shape inference, and the reference
  evaluator agrees with onnxruntime on a step; every artifact is run step by step over batches
  of the spec's own dev data (teacher-forced) and its logits are compared with the trained
  model's full forward pass. An fp32 artifact further than `PARITY_ATOL` is not written.
- figures: model size, latency (batch 1, 32 positions, median of repeated runs), quality on dev
  (perplexity from the same teacher-forced logits; BLEU of greedy translations for
  translation tasks) next to the trained model's, and the parity error.

Each artifact is built in a temporary folder beside its target and renamed into place when
complete, with a `manifest.json` (see `seqc.run.artifact`).
"""

from __future__ import annotations

import math
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from seqc.backends.inputs import LABELS, input_fields
from seqc.backends.weights import Weights
from seqc.compiler.incremental import StepProgram, incremental, stepping_inputs
from seqc.run.artifact import RUNTIMES, model_bytes, signature_json, write_manifest
from seqc.run.stepdecode import StepSignature, teacher_forced, zero_caches
from seqc.spec.errors import FileError, SeqcError, UsageError

PARITY_ATOL = 1e-4
"""Largest |logit difference| an fp32 artifact may show against the trained model."""

FORMATS = ("onnx", "tflite", "savedmodel")
QUANTIZE = {
    "onnx": ("none", "dynamic", "int8"),
    "tflite": ("none", "dynamic", "fp16", "int8"),
    "savedmodel": ("none",),
}
LATENCY_LENGTH = 32


class ExportError(SeqcError):
    phase = "export"


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
    program: StepProgram
    sig: StepSignature
    batches: list[dict[str, np.ndarray]]
    reference: list[np.ndarray]
    reference_quality: dict[str, float]
    bleu_examples: int
    task_kind: str


def plan(formats: list[str], quantize: list[str]) -> list[tuple[str, str]]:
    """The (format, quantization) pairs to build; a pair a format has no mode for is an error."""
    out = []
    for f in formats:
        if f not in FORMATS:
            raise UsageError(
                f"unknown export format `{f}`",
                code="bad-format",
                expected=", ".join(FORMATS),
                found=f,
            )
        for q in quantize:
            if q not in QUANTIZE[f]:
                raise UsageError(
                    f"format `{f}` has no `{q}` quantization",
                    code="bad-quantize",
                    expected=", ".join(QUANTIZE[f]),
                    found=q,
                )
            out.append((f, q))
    return out


def dev_batches(session: Any, n: int, rows: int = 8, length: int = 48) -> list[dict]:
    """Up to `n` batches of the spec's dev split (train if none), cut to `rows` x `length`."""
    split = "dev" if "dev" in session.pipeline.splits else "train"
    out = []
    for i, batch in enumerate(session.pipeline.batches(split)):
        if i >= n:
            break
        arrays = {}
        for k, v in batch.arrays.items():
            v = np.asarray(v)[:rows]
            is_time = k not in ("src", "src_mask") and v.ndim >= 2
            arrays[k] = v[:, :length] if is_time else v
        out.append(arrays)
    return out


def _quality(logits: list[np.ndarray], batches: list[dict], task_kind: str) -> dict[str, float]:
    """Dev perplexity (nll averaged over real tokens) from logits of these batches."""
    labels_key, mask_key = LABELS[task_kind]
    nll, count = 0.0, 0.0
    for z, b in zip(logits, batches, strict=True):
        z = z.astype(np.float64)
        z = z - z.max(-1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
        labels, mask = np.asarray(b[labels_key]), np.asarray(b[mask_key], np.float64)
        picked = np.take_along_axis(logp, labels[..., None], axis=-1)[..., 0]
        nll -= float((picked * mask).sum())
        count += float(mask.sum())
    return {"perplexity": math.exp(min(nll / max(count, 1.0), 50.0))}


def prepare(
    session: Any,
    params: dict[str, np.ndarray],
    weights: Weights,
    parity_batches: int = 2,
    bleu_examples: int = 0,
) -> Context:
    from seqc.backends.jax.train import JaxModel

    graph = session.graph
    program = incremental(graph, stepping_inputs(graph))
    sig = StepSignature.of(program, input_fields(graph))
    batches = dev_batches(session, parity_batches)
    model = JaxModel(graph, session.task_config, session.train_config)
    reference = [np.asarray(model.logits(params, b)) for b in batches]
    kind = session.pipeline.task
    quality = _quality(reference, batches, kind)
    ctx = Context(
        session, params, weights, program, sig, batches, reference, quality, bleu_examples, kind
    )
    if bleu_examples and kind == "seq2seq":
        from seqc.run.decode import Decoder

        tok = session.pipeline.target_tokenizer
        ref = Decoder(model, params, "seq2seq", tok.bos_id, tok.eos_id, tok.pad_id)
        ctx.reference_quality["bleu"] = _bleu(ctx, ref)
    return ctx


def _bleu(ctx: Context, decoder: Any) -> float:
    import sacrebleu

    from seqc.compiler.values import CallValue

    pipeline = ctx.session.pipeline
    split = "dev" if "dev" in pipeline.splits else "train"
    examples = pipeline.splits[split].examples[: ctx.bleu_examples]
    greedy = CallValue(kind="greedy", namespace="decode", args={"max_length": 64})
    src_tok, tgt_tok = pipeline.tokenizer, pipeline.target_tokenizer
    hyps = []
    for ex in examples:
        src = [*src_tok.encode(ex.source), src_tok.eos_id]
        hyps.append(tgt_tok.decode(decoder.generate(greedy, [], src)))
    refs = [ex.target or "" for ex in examples]
    return float(sacrebleu.corpus_bleu(hyps, [refs]).score)


# ------------------------------------------------------------------------------ building


def _build_onnx(ctx: Context, folder: Path, quantize: str, work: Path) -> dict[str, Any]:
    import onnx

    from seqc.backends.onnx.emit import check, to_onnx
    from seqc.backends.onnx.runtime import Session, reference_run

    program, extra = ctx.program, {}
    metadata = {"seqc.experiment": ctx.session.resolved.name, "seqc.task": ctx.session.task}
    graphs = [("step", program.step, list(program.step_outputs))]
    if program.encoder is not None:
        graphs.insert(0, ("encoder", program.encoder, list(program.encoder_outputs)))
    for name, graph, outputs in graphs:
        model = to_onnx(
            graph, ctx.params, name=f"seqc_{name}", output_names=outputs, metadata=metadata
        )
        check(model)
        fp32 = work / f"{name}.onnx"
        onnx.save(model, str(fp32))
        target = folder / f"{name}.onnx"
        if quantize == "none":
            shutil.copy2(fp32, target)
        elif quantize == "dynamic":
            from seqc.backends.onnx.quantize import quantize_dynamic

            quantize_dynamic(fp32, target)
        else:
            from seqc.backends.onnx.quantize import quantize_static

            quantize_static(fp32, target, _calibration(ctx, name))
    # A second runtime on one step of the float model: onnx's reference evaluator against
    # onnxruntime (the evaluator has no int8 kernels at this opset).
    feeds = next(iter(_step_feeds(ctx, "step")))
    got = Session(work / "step.onnx").run(feeds)
    want = reference_run(onnx.load(str(work / "step.onnx")), feeds)
    extra["reference_evaluator_err"] = max(
        float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
        for a, b in zip(got, want, strict=True)
    )
    return extra


def _step_feeds(ctx: Context, which: str) -> Any:
    """Real feeds of the encoder or the step function: the dev batches run teacher-forced
    through the JAX step graph, recording each position's inputs (calibration data)."""
    from seqc.backends.jax.step import JaxStepFunctions

    fns = JaxStepFunctions(ctx.program, ctx.params)
    sig = ctx.sig
    field_ = "tgt_in" if sig.encoder_inputs else "inputs"
    for arrays in ctx.batches:
        enc_feeds = {n: arrays[f] for n, f in sig.encoder_inputs.items()}
        if which == "encoder":
            yield enc_feeds
            continue
        memory = fns.encode(enc_feeds)
        tokens = np.asarray(arrays[field_], np.int32)
        caches = zero_caches(sig, tokens.shape[0], tokens.shape[1])
        for pos in range(tokens.shape[1]):
            feeds = {sig.token_input: tokens[:, pos : pos + 1], "pos": np.asarray(pos, np.int32)}
            feeds = {k: v for k, v in (feeds | memory | caches).items() if k in sig.step_inputs}
            yield feeds
            _, caches = fns.step(feeds)


def _calibration(ctx: Context, which: str, limit: int = 64) -> list[dict[str, np.ndarray]]:
    feeds = list(_step_feeds(ctx, which))
    stride = max(len(feeds) // limit, 1)
    return feeds[::stride][:limit]


def _build_tflite(ctx: Context, folder: Path, quantize: str, work: Path) -> dict[str, Any]:
    from seqc.backends.tf.savedmodel import export_savedmodel
    from seqc.backends.tflite.convert import convert

    saved = export_savedmodel(ctx.session.graph, ctx.params, work / "sm", {}, ctx.program)
    keys = ["encode", "step"] if ctx.program.encoder is not None else ["step"]

    def representative() -> Any:
        for name, key in (("encoder", "encode"), ("step", "step")):
            if key in keys:
                for feeds in _calibration(ctx, name):
                    yield key, feeds

    rep = representative if quantize == "int8" else None
    (folder / "model.tflite").write_bytes(convert(saved, quantize, rep, keys))
    return {}


def _build_savedmodel(ctx: Context, folder: Path, quantize: str, work: Path) -> dict[str, Any]:
    from seqc.backends.tf.savedmodel import export_savedmodel

    export_savedmodel(ctx.session.graph, ctx.params, folder / "saved_model", {}, ctx.program)
    return {}


BUILDERS = {"onnx": _build_onnx, "tflite": _build_tflite, "savedmodel": _build_savedmodel}


def _latency_ms(fns: Any, sig: StepSignature, reps: int = 5) -> float:
    """Batch 1, `LATENCY_LENGTH` positions (and a source that long): median over `reps`."""
    n = LATENCY_LENGTH
    ids = np.full((1, n), 5, np.int32)
    arrays = {"src": ids, "src_mask": np.ones((1, n), bool), "tgt_in": ids, "inputs": ids}
    teacher_forced(fns, sig, arrays)  # warm up: first runs allocate and specialise
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        teacher_forced(fns, sig, arrays)
        times.append(time.perf_counter() - t)
    return 1000.0 * statistics.median(times)


def export_one(ctx: Context, fmt: str, quantize: str, target: Path) -> Row:
    if target.exists() and any(target.iterdir()):
        raise FileError(
            f"{target} already holds an export",
            path=str(target),
            code="exists",
            hint="choose another --out, or delete the old export",
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    work = Path(tempfile.mkdtemp(prefix=".work-", dir=target.parent))
    try:
        extra = BUILDERS[fmt](ctx, tmp, quantize, work)
        fns = RUNTIMES[fmt](tmp, ctx.sig, {})
        logits = [teacher_forced(fns, ctx.sig, b) for b in ctx.batches]
        parity = max(
            float(np.max(np.abs(a - b))) for a, b in zip(logits, ctx.reference, strict=True)
        )
        if quantize == "none" and parity > PARITY_ATOL:
            raise ExportError(
                f"the {fmt} artifact's logits differ from the trained model's by {parity:.3g} "
                f"on dev batches (allowed {PARITY_ATOL}); nothing was written",
                path=str(target),
                code="parity-failed",
            )
        quality = _quality(logits, ctx.batches, ctx.task_kind)
        if ctx.bleu_examples and ctx.task_kind == "seq2seq":
            quality["bleu"] = _bleu(ctx, _artifact_decoder(ctx, fns))
        latency = _latency_ms(fns, ctx.sig)
        manifest = _package(ctx, tmp, fmt, quantize, parity, quality, latency, extra)
        if fmt == "onnx":
            _stamp_onnx(tmp, manifest)
        write_manifest(tmp, manifest)
        size = model_bytes(tmp, fmt)
        if target.exists():
            target.rmdir()
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    return Row(fmt, quantize, target, size, latency, quality, parity, extra)


def _artifact_decoder(ctx: Context, fns: Any) -> Any:
    from seqc.run.stepdecode import StepDecoder

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
    spec_dir = folder / "spec"
    spec_dir.mkdir()
    for f in session.program.files:
        src = Path(f.path)
        if src.is_file():
            shutil.copy2(src, spec_dir / src.name)
    tok = pipeline.target_tokenizer
    decode = session.task_config.get("decode")
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
        "step": signature_json(ctx.sig),
        "inputs": {
            name: [list(ctx.program.step.ops[vid].type.shape), ctx.program.step.ops[vid].type.dtype]
            for name, vid in ctx.program.step.inputs.items()
        },
        "outputs": list(ctx.program.step_outputs),
        "parity_max_abs_err": parity,
        "quality": quality,
        "reference_quality": ctx.reference_quality,
        "latency_ms": latency,
        **extra,
    }
    return manifest


def _stamp_onnx(folder: Path, manifest: dict[str, Any]) -> None:
    """The manifest, the frozen spec and the tokenizer files into each ONNX file's
    metadata_props, so a model file that travels alone still says what it is (metadata does
    not change what the graph computes, so the measured figures stay valid)."""
    import base64
    import json

    import onnx

    spec = {p.name: p.read_text() for p in sorted((folder / "spec").iterdir())}
    tokenizer = {
        p.relative_to(folder / "tokenizer").as_posix(): base64.b64encode(p.read_bytes()).decode()
        for p in sorted((folder / "tokenizer").rglob("*"))
        if p.is_file()
    }
    props = {
        "seqc.manifest": json.dumps(manifest, sort_keys=True, default=str),
        "seqc.spec": json.dumps(spec, sort_keys=True),
        "seqc.tokenizer": json.dumps(tokenizer, sort_keys=True),
    }
    for path in sorted(folder.glob("*.onnx")):
        model = onnx.load(str(path))
        kept = [m for m in model.metadata_props if m.key not in props]
        del model.metadata_props[:]
        model.metadata_props.extend(kept)
        for key, value in props.items():
            model.metadata_props.add(key=key, value=value)
        onnx.save(model, str(path))
