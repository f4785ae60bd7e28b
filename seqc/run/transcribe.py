"""Transcribing held-out speech and scoring it: word and character error rates.

The one place an utterance is transcribed for a figure, so `seqc eval`, the training loop's dev
evaluation and `seqc export`'s check of an artifact compute WER the same way:

- a CTC model runs once over a batch of utterances (the pipeline's own buckets, padded) and each
  row's frame logits are decoded on the host (`seqc.run.ctc_decode`: greedy, or the prefix beam
  search for `beam(width)`). Padding frames are "blank with certainty" in a compiled CTC model,
  so they never add a token;
- an attention decoder (Listen-Attend-Spell) decodes one utterance at a time with the shared
  step-by-step decoder (`seqc.run.decode.Decoder`), its audio arrays given as the source.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from seqc.resolve.values import CallValue
from seqc.run.ctc_decode import ctc_decode_batch
from seqc.run.wer import error_rates

Logits = Callable[[Mapping[str, np.ndarray]], Any]
"""A CTC model's forward: the batch's arrays -> frame logits [B, F, V]."""


def ctc_strategy(strategy: CallValue | None) -> tuple[str, int]:
    """("greedy" | "beam", width) for a task's `decode = ...`."""
    if strategy is not None and strategy.kind == "beam":
        return "beam", int(strategy.args.get("width", 8))
    return "greedy", 1


def transcribe_ctc(
    logits: Logits, pipeline: Any, split: str, strategy: CallValue | None, limit: int = 0
) -> tuple[list[str], list[str]]:
    """Hypotheses and references for the first `limit` utterances of `split` (all if 0)."""
    kind, width = ctc_strategy(strategy)
    tok = pipeline.target_tokenizer
    examples = pipeline.splits[split].examples
    hyps: dict[int, str] = {}
    for batch in pipeline.batches(split):
        z = np.asarray(logits(batch.arrays), np.float32)
        rows = batch.num_examples
        frames = np.ones(z.shape[:2], bool)
        for i, ids in zip(
            batch.indices[:rows],
            ctc_decode_batch(z[:rows], frames[:rows], kind, width),
            strict=True,
        ):
            hyps[i] = tok.decode(ids)
        if limit and len(hyps) >= limit:
            break
    order = sorted(hyps)[: limit or None]
    return [hyps[i] for i in order], [examples[i].target or "" for i in order]


def transcribe_attention(
    decoder: Any, pipeline: Any, split: str, strategy: CallValue, limit: int = 0
) -> tuple[list[str], list[str]]:
    """The same for an attention decoder: each utterance's audio is the decoder's source."""
    tok = pipeline.target_tokenizer
    examples = pipeline.splits[split].examples
    hyps: dict[int, str] = {}
    for batch in pipeline.batches(split):
        for row, i in enumerate(batch.indices[: batch.num_examples]):
            source = {k: batch.arrays[k][row : row + 1] for k in ("audio", "audio_mask")}
            hyps[i] = tok.decode(decoder.generate(strategy, [], source))
            if limit and len(hyps) >= limit:
                break
        if limit and len(hyps) >= limit:
            break
    order = sorted(hyps)
    return [hyps[i] for i in order], [examples[i].target or "" for i in order]


def score_transcripts(hyps: list[str], refs: list[str]) -> dict[str, Any]:
    """WER and CER (percent) with their counts, and three samples to print."""
    rates = error_rates(hyps, refs)
    return {**rates, "examples": len(hyps), "samples": list(zip(hyps[:3], refs[:3], strict=True))}


def score_model(
    model: Any, params: Any, pipeline: Any, split: str, strategy: CallValue | None, limit: int = 0
) -> dict[str, Any]:
    """WER and CER of a backend's model on `split` (CTC or attention decoder)."""
    if model.task.ctc:
        hyps, refs = transcribe_ctc(
            lambda arrays: model.logits(params, arrays), pipeline, split, strategy, limit
        )
        return score_transcripts(hyps, refs)
    from seqc.run.decode import Decoder

    tok = pipeline.target_tokenizer
    decoder = Decoder(model, params, tok.bos_id, tok.eos_id, tok.pad_id)
    strategy = strategy or CallValue(kind="greedy", namespace="decode", args={"max_length": 32})
    hyps, refs = transcribe_attention(decoder, pipeline, split, strategy, limit)
    return score_transcripts(hyps, refs)
