"""Augmentation of training audio on the host: speed perturbation, reverberation and additive
noise, declared in the input block (`augment = [speed(...), reverb(...), noise(...)]`), applied
to the train split only, in that order (a voice at another speed, in a room, over a channel).

Why on the host and not in the graph: both change the waveform before the front end, and speed
perturbation changes an utterance's length, which sets its mask; a graph's shapes are fixed per
bucket. (What belongs in the graph is there: SpecAugment and `UtteranceNorm` are layers.)

Why these: a recogniser trained on a few rule-based voices fails on a new one (issue 38), and
the standard remedies imitate speaker and channel variation. Speed perturbation (Ko et al.,
2015; Kaldi's and ESPnet's recipes) resamples an utterance by a factor, which moves its pitch
and formants and changes its tempo; reverberation convolves it with a simulated room's impulse
response (`seqc.data.rooms`); additive noise at a signal-to-noise ratio drawn per utterance
imitates a channel.

Deterministic: an utterance's draws come from a generator seeded by (the input's seed, the
training step, the utterance's index), so a batch is the same however the run got there, a
resumed run included, and every process of a run draws the same for the same row (a process
that does not read a row's wav still knows its length, `length`).

A speed factor below 1 lengthens an utterance (by 1 / factor); where that would pass the
bucket's bound, the factor is raised to what the bound allows, so nothing is cut off (a cut
utterance would no longer say its transcript).
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from seqc.data import rooms
from seqc.resolve.values import CallValue

COLOURS = ("white", "pink", "brown")
"""Generated noise: flat spectrum, 1/f power, 1/f^2 power."""


@dataclass(frozen=True)
class Speed:
    """Resample by a factor drawn from `rates` (a list: one of them; two numbers with
    `range`: uniform between them), with probability `p`."""

    rates: tuple[float, ...] = (0.9, 1.0, 1.1)
    p: float = 1.0
    continuous: bool = False

    def factor(self, rng: np.random.Generator) -> float:
        hit = rng.random() < self.p  # every draw is made, whatever the outcome
        pick = (
            rng.uniform(min(self.rates), max(self.rates))
            if self.continuous
            else self.rates[int(rng.integers(len(self.rates)))]
        )
        return float(pick) if hit else 1.0


@dataclass(frozen=True)
class Noise:
    """Add noise of a colour at a signal-to-noise ratio (dB) drawn uniformly from `snr`, with
    probability `p`."""

    snr: tuple[float, float] = (10.0, 30.0)
    colour: str = "white"
    p: float = 0.5


@dataclass(frozen=True)
class Reverb:
    """Convolve with one of `rooms` simulated rooms' responses (RT60 uniform in `rt60`,
    seconds), with probability `p`."""

    rt60: tuple[float, float] = (0.2, 0.7)
    p: float = 0.3
    rooms: int = 16


@dataclass(frozen=True)
class Augmenter:
    """The augmentations of one input, in their order, and the seed their draws start from."""

    speed: Speed | None
    noise: Noise | None
    seed: int
    reverb: Reverb | None = None

    def rng(self, step: int, index: int, stream: int) -> np.random.Generator:
        """The draws of one augmentation (`stream`) of utterance `index` at `step`."""
        return np.random.default_rng([self.seed, step, index, stream])

    def factor(self, step: int, index: int, frames: int, bound: int) -> float:
        """The speed factor of utterance `index` at `step`, raised so that it fits `bound`."""
        if self.speed is None:
            return 1.0
        f = self.speed.factor(self.rng(step, index, 0))
        return max(f, frames / bound) if stretched(frames, f) > bound else f

    def length(self, step: int, index: int, frames: int, bound: int) -> int:
        """How many samples the utterance has after augmentation (its mask's length)."""
        return stretched(frames, self.factor(step, index, frames, bound))

    def __call__(self, samples: np.ndarray, step: int, index: int, bound: int) -> np.ndarray:
        """The augmented utterance (float32 in [-1, 1])."""
        out = np.asarray(samples, np.float32)
        f = self.factor(step, index, len(out), bound)
        if f != 1.0:
            out = resample(out, f)
        if self.reverb is not None:
            rng = self.rng(step, index, 2)
            hit = rng.random() < self.reverb.p
            room = int(rng.integers(self.reverb.rooms))
            if hit:
                bank = rooms.responses(self.reverb.rt60, self.reverb.rooms, self.seed)
                out = rooms.reverberate(out, bank[room])
        if self.noise is not None:
            rng = self.rng(step, index, 1)
            hit = rng.random() < self.noise.p
            snr = rng.uniform(*self.noise.snr)
            noise = coloured(self.noise.colour, len(out), rng)
            if hit:
                out = mix(out, noise, snr)
        return out


def stretched(frames: int, factor: float) -> int:
    """Samples of an utterance of `frames` samples played at `factor` times its speed."""
    return max(1, math.ceil(frames / factor - 1e-9))


def resample(samples: np.ndarray, factor: float) -> np.ndarray:
    """Speed perturbation by `factor`: the waveform read `factor` times as fast (linear
    interpolation between samples), so it lasts 1 / factor as long, its pitch and formants
    scaled by `factor`, as sox's `speed` does."""
    n = len(samples)
    out_n = stretched(n, factor)
    if n < 2:
        return np.resize(np.asarray(samples, np.float32), out_n)
    at = np.minimum(np.arange(out_n, dtype=np.float64) * factor, n - 1)
    return np.interp(at, np.arange(n), samples).astype(np.float32)


def coloured(colour: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` samples of noise whose power falls as 1/f^k (k = 0 white, 1 pink, 2 brown), shaped
    in the frequency domain from white Gaussian noise, zero mean, unit power."""
    white = rng.standard_normal(n)
    k = COLOURS.index(colour)
    if k and n > 2:
        spectrum = np.fft.rfft(white)
        f = np.arange(len(spectrum), dtype=np.float64)
        f[0] = 1.0
        shaped = np.fft.irfft(spectrum / f ** (k / 2.0), n)
    else:
        shaped = white
    shaped = shaped - shaped.mean()
    power = float(np.mean(shaped**2))
    return (shaped / math.sqrt(power) if power > 0 else shaped).astype(np.float32)


def mix(signal: np.ndarray, noise: np.ndarray, snr_db: float) -> np.ndarray:
    """`signal` plus `noise` scaled so that the signal's power over the noise's is `snr_db`
    decibels; clipped to [-1, 1] as a wav is. A silent signal is returned as it is."""
    p_signal = float(np.mean(np.asarray(signal, np.float64) ** 2))
    p_noise = float(np.mean(np.asarray(noise, np.float64) ** 2))
    if p_signal == 0.0 or p_noise == 0.0:
        return np.asarray(signal, np.float32)
    scale = math.sqrt(p_signal / (p_noise * 10.0 ** (snr_db / 10.0)))
    return np.clip(signal + scale * noise, -1.0, 1.0).astype(np.float32)


def augmenter(calls: Sequence[CallValue], seed: int) -> Augmenter | None:
    """The input block's `augment` list (resolved calls) as an Augmenter; None when empty."""
    speed = noise = reverb = None
    for call in calls:
        kind, args = call.kind, dict(call.args)
        if kind == "speed":
            rates = tuple(float(r) for r in args["rates"])
            speed = Speed(rates, float(args["p"]), bool(args["range"]))
        elif kind == "noise":
            low, high = (float(v) for v in args["snr"])
            noise = Noise((low, high), str(args["colour"]), float(args["p"]))
        elif kind == "reverb":
            low, high = (float(v) for v in args["rt60"])
            reverb = Reverb((low, high), float(args["p"]), int(args["rooms"]))
    if speed is None and noise is None and reverb is None:
        return None
    if reverb is not None and importlib.util.find_spec("pyroomacoustics") is None:
        # said here, where the run starts, not in the loader's thread at the first batch
        raise ModuleNotFoundError("reverb needs pyroomacoustics", name="pyroomacoustics")
    return Augmenter(speed, noise, seed, reverb)
