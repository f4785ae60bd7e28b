"""Test-time voice normalisation: each speaker's audio resampled by the factor the model is
most confident under, before it is transcribed (a speech task's `decode = beam(..., warp =
voice_warp())`).

Why: a recogniser trained on a pool of voices meets a new speaker whose vocal tract is not
one of theirs (a woman's formants are some 15-20% above a man's, and a pool of synthetic voices
may have few women). Vocal tract length normalisation (VTLN) answers that at test time: warp
the new speaker's frequency axis by the factor under which the model fits best, estimated from
the speaker's own audio, with no transcript. Here the warp is a resampling of the waveform
(`seqc.data.augment.resample`, the speed perturbation of training): formants and pitch scale by
the factor and the duration by its inverse, which a model trained with speed perturbation
already takes in its stride. Done on the host, it changes no graph, so a checkpoint and each of
its exported artifacts are normalised the same way.

The criterion is the model's confidence: the mean over an utterance's frames of the largest
log-posterior (the best path's log-probability per frame), averaged over the speaker's first
`utterances` utterances; every utterance of the speaker is then transcribed at the factor of
highest confidence (ties to the factor nearest 1). It reads no reference, so it may run on a
test split, as a deployed recogniser would adapt to whoever speaks to it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from seqc.compiler.config import VoiceWarp
from seqc.data.augment import resample, stretched
from seqc.run.decoding.ctc import log_softmax, real_frames

Forward = Callable[[Sequence[np.ndarray]], list[np.ndarray]]
"""Utterances' samples -> each one's frame log-posteriors [F_i, V], its real frames only."""

Logits = Callable[[Mapping[str, np.ndarray]], Any]
"""A CTC model's forward over a padded batch: its arrays -> frame logits [B, F, V]."""

PAD_SAMPLES = 8000
"""A batch's audio is padded to a multiple of this (half a second at 16 kHz): a compiled model
builds one program per shape, and resampling makes every length new."""

BATCH = 32
"""Utterances a batched forward runs at once."""


def warped(samples: np.ndarray, factor: float) -> np.ndarray:
    """`samples` resampled by `factor` (1: as they are)."""
    return np.asarray(samples, np.float32) if factor == 1.0 else resample(samples, factor)


def confidence(logp: np.ndarray) -> float:
    """The mean over frames of the largest log-posterior: the best path's log-probability per
    frame (0 is certainty)."""
    z = np.asarray(logp, np.float64)
    return float(z.max(axis=-1).mean()) if z.size else 0.0


def batched(logits: Logits, batch: int = BATCH, pad: int = PAD_SAMPLES) -> Forward:
    """A `Forward` over a model that takes padded batches (a checkpoint's `model.logits`):
    utterances in groups of `batch`, padded to a multiple of `pad` samples, and the rows to a
    power of two (filled with the first utterance again, whose results are dropped): a speaker
    with 3 utterances and one with 5 then share a compiled program."""

    def run(utterances: Sequence[np.ndarray]) -> list[np.ndarray]:
        out: list[np.ndarray] = []
        for start in range(0, len(utterances), batch):
            rows = list(utterances[start : start + batch])
            real = len(rows)
            rows += [rows[0]] * (min(batch, 1 << (real - 1).bit_length()) - real)
            width = max(1, -(-max(len(x) for x in rows) // pad)) * pad
            audio = np.zeros((len(rows), width), np.float32)
            mask = np.zeros((len(rows), width), bool)
            for r, x in enumerate(rows):
                audio[r, : len(x)], mask[r, : len(x)] = x, True
            z = np.asarray(logits({"audio": audio, "audio_mask": mask}), np.float32)
            keep = real_frames(z)
            out += [log_softmax(z[r][keep[r]]) for r in range(real)]
        return out

    return run


def alone(logits: Logits) -> Forward:
    """A `Forward` over a model run on one unpadded utterance at a time (an exported
    artifact, as `seqc.run.scoring.transcribe.one_by_one` runs it)."""

    def run(utterances: Sequence[np.ndarray]) -> list[np.ndarray]:
        out = []
        for x in utterances:
            one = np.asarray(x, np.float32).reshape(1, -1)
            z = np.asarray(logits({"audio": one, "audio_mask": np.ones(one.shape, bool)}))
            out.append(log_softmax(np.asarray(z[0], np.float32)))
        return out

    return run


@dataclass(frozen=True)
class Choice:
    """One speaker's factor and what chose it."""

    factor: float
    confidence: dict[float, float]
    """Each candidate factor's mean confidence."""
    utterances: int
    """How many of the speaker's utterances it was measured on."""
    posteriors: tuple[np.ndarray, ...] = field(default=(), compare=False, repr=False)
    """Those utterances' frame log-posteriors at `factor` (so they are not run again)."""

    def record(self) -> dict[str, Any]:
        return {
            "factor": self.factor,
            "utterances": self.utterances,
            "confidence": {f"{f:g}": round(c, 6) for f, c in self.confidence.items()},
        }


def choose(
    forward: Forward, utterances: Sequence[np.ndarray], warp: VoiceWarp, min_samples: int = 1
) -> Choice:
    """The factor of `warp.factors` under which the model is most confident on the first
    `warp.utterances` of `utterances` (one speaker's, in order); ties to the factor nearest 1.
    A factor that would shorten any of the speaker's utterances below `min_samples` (the
    model's shortest input) is not a candidate; 1 always is."""
    first = list(utterances[: warp.utterances])
    shortest = min((len(x) for x in utterances), default=min_samples)
    candidates = [f for f in warp.factors if f == 1.0 or stretched(shortest, f) >= min_samples]
    scores: dict[float, float] = {}
    best, kept, rank = 1.0, (), (-np.inf, -np.inf)
    for f in candidates or [1.0]:
        zs = tuple(forward([warped(x, f) for x in first]))
        scores[f] = float(np.mean([confidence(z) for z in zs]))
        if (scores[f], -abs(f - 1.0)) > rank:  # a tie keeps the factor nearer 1, or the first
            best, kept, rank = f, zs, (scores[f], -abs(f - 1.0))
    return Choice(best, scores, len(first), kept)


def speakers(keys: Sequence[str | None]) -> dict[str, list[int]]:
    """Utterance indices by speaker, in order; a None key is an utterance alone."""
    groups: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(f"\0{i}" if key is None else key, []).append(i)
    return groups


def normalised(
    forward: Forward,
    utterances: Sequence[np.ndarray],
    keys: Sequence[str | None],
    warp: VoiceWarp,
    min_samples: int = 1,
) -> tuple[list[np.ndarray], dict[str, Choice]]:
    """Each utterance's frame log-posteriors at its speaker's factor (`keys`: who speaks each,
    None for an utterance alone), and each speaker's choice (an utterance alone's as
    "utterance N", N its place in `utterances` from 1)."""
    out: list[np.ndarray | None] = [None] * len(utterances)
    choices: dict[str, Choice] = {}
    for key, ids in speakers(keys).items():
        choice = choose(forward, [utterances[i] for i in ids], warp, min_samples)
        choices[f"utterance {ids[0] + 1}" if key.startswith("\0") else key] = choice
        rest = ids[choice.utterances :]  # the first were run at this factor while choosing
        more = forward([warped(utterances[i], choice.factor) for i in rest])
        scored = [*choice.posteriors, *more]
        for i, z in zip(ids, scored, strict=True):
            out[i] = z
    return [z for z in out if z is not None], choices
