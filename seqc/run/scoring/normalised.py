"""A split transcribed with test-time voice normalisation (`decode = beam(..., warp =
voice_warp())`): its utterances grouped by the manifest field that names who speaks, each
group's factor chosen by the model's confidence (`seqc.run.decoding.voice_warp`), then every
utterance decoded at its group's factor, as `transcribe_ctc` decodes it otherwise.

Why a module apart from `transcribe`: the plain path decodes batch by batch as the pipeline
makes them; this one needs a whole speaker's audio before it decodes any of it."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from seqc.compiler.config import DecodeConfig, VoiceWarp
from seqc.run.decoding.ctc import ctc_decode_batch
from seqc.run.decoding.voice_warp import Choice, Logits, batched, normalised

if TYPE_CHECKING:
    from seqc.data.pipeline import InputPipeline


def warp_of(strategy: DecodeConfig | None) -> VoiceWarp | None:
    """The voice warp a decode names, if any."""
    warp = getattr(strategy, "warp", None)
    return warp if isinstance(warp, VoiceWarp) else None


def without_warp(strategy: DecodeConfig | None) -> DecodeConfig | None:
    """`strategy` with no voice warp (training's dev evaluations decode the audio as it is)."""
    if warp_of(strategy) is None:
        return strategy
    return dataclasses.replace(strategy, warp=None)  # type: ignore[type-var]


def normalised_split(
    logits: Logits, pipeline: InputPipeline, split: str, warp: VoiceWarp, limit: int = 0
) -> tuple[list[int], list[np.ndarray], dict[str, Choice]]:
    """The indices of the first `limit` utterances of `split` (all if 0), in split order; each
    one's frame log-posteriors at its speaker's factor; and each speaker's choice. An
    utterance whose manifest lacks the `by` field (or `by = ""`) is its own speaker."""
    examples = pipeline.splits[split].examples
    audio: dict[int, np.ndarray] = {}
    for batch in pipeline.batches(split):
        samples, mask = np.asarray(batch.arrays["audio"]), np.asarray(batch.arrays["audio_mask"])
        for row, i in enumerate(batch.indices[: batch.num_examples]):
            audio[i] = samples[row, : int(mask[row].sum())]
        if limit and len(audio) >= limit:
            break
    order = sorted(audio)[: limit or None]
    keys = [_speaker(examples[i].fields, warp.by) for i in order]
    utterances = [audio[i] for i in order]
    scores, choices = normalised(batched(logits), utterances, keys, warp, pipeline.min_samples)
    return order, scores, choices


def transcribe_normalised(
    logits: Logits,
    pipeline: InputPipeline,
    split: str,
    kind: str,
    width: int,
    warp: VoiceWarp,
    limit: int = 0,
) -> tuple[list[str], list[str], list[int], dict[str, Choice]]:
    """Hypotheses, references and indices of `normalised_split`'s utterances, each decoded
    (`kind`, `width`) at its speaker's factor; and each speaker's choice."""
    tok = pipeline.target_tokenizer
    examples = pipeline.splits[split].examples
    order, scores, choices = normalised_split(logits, pipeline, split, warp, limit)
    hyps: list[str] = []
    for z in scores:
        (ids,) = ctc_decode_batch(z[None], np.ones((1, z.shape[0]), bool), kind, width)
        hyps.append(str(tok.decode(ids)))
    return hyps, [examples[i].target or "" for i in order], order, choices


def _speaker(fields: Mapping[str, object] | None, by: str) -> str | None:
    value = (fields or {}).get(by) if by else None
    return None if value is None else str(value)
