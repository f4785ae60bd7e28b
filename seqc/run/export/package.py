"""What travels with an artifact's model files: the tokenizer, the frozen spec, and the
manifest that says what the artifact is and how to drive it (`seqc.run.export.artifact` has the
folder's layout and reads it back); and, for formats that carry metadata in the model file
itself, the properties that let a file that travels alone say what it is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from seqc.compiler.min_length import min_audio_samples
from seqc.run.export.artifact import sha256_of
from seqc.run.export.context import Context
from seqc.run.rundir.directory import copy_spec_tree


def pack(
    ctx: Context,
    folder: Path,
    fmt: str,
    quantize: str,
    parity: float,
    quality: dict[str, float],
    latency: float,
    extra: dict[str, Any],
) -> dict[str, Any]:
    """Tokenizer and frozen spec into the folder; the manifest (written by the caller,
    `write_manifest`, once the model files are stamped)."""
    session = ctx.session
    pipeline = session.pipeline
    pipeline.tokenizer.save(folder / "tokenizer" / "source")
    if pipeline.target_tokenizer is not pipeline.tokenizer:
        pipeline.target_tokenizer.save(folder / "tokenizer" / "target")
    copy_spec_tree(session.program, folder / "spec", origin=False)
    tok = pipeline.target_tokenizer
    decode = session.compiled.decode
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
        "packed": pipeline.packed if ctx.task_kind == "lm" else None,
        "decode": None if decode is None else decode.to_json(),
        "checkpoint": {"backend": ctx.weights.backend, "step": ctx.weights.step},
        "step": ctx.sig.to_json(),
        "inputs": {
            name: [list(served.ops[vid].type.shape), served.ops[vid].type.dtype]
            for name, vid in served.inputs.items()
        },
        "outputs": list(program.encoder_outputs if program.step is None else program.step_outputs),
        "audio": audio_entry(ctx),
        "scoring": scoring_entry(ctx),
        "parity_max_abs_err": parity,
        "quality": quality,
        "reference_quality": ctx.reference_quality,
        "latency_ms": latency,
        **extra,
    }
    return manifest


def audio_entry(ctx: Context) -> dict[str, Any] | None:
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


def scoring_entry(ctx: Context) -> dict[str, Any]:
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


def model_properties(folder: Path, manifest: dict[str, Any]) -> dict[str, str]:
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
