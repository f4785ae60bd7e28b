"""Simulated rooms for the `reverb` augmentation: impulse responses of shoebox rooms by
pyroomacoustics' image source method, and an utterance convolved with one.

Why simulated: no recorded impulse responses come with a registry package, and a simulated
room is what ESPnet's and Kaldi's recipes use when they have none (Ko et al., 2017). Why a
bank: simulating one room takes from 0.03 s (RT60 0.2 s) to over a second (RT60 0.8 s) here,
far more than a training step allows per utterance; `rooms` responses are simulated once per
process (seeded by the input's seed, so every process and every resumed run has the same bank)
and each utterance picks one.

A room: 3-10 m by 3-8 m by 2.4-4 m, absorption and reflection order from the drawn RT60 by
Sabine's formula (`pyroomacoustics.inverse_sabine`), a source and a microphone at least 0.5 m
from the walls and from each other.
"""

from __future__ import annotations

import functools

import numpy as np

SAMPLE_RATE = 16_000
MAX_ORDER = 40
"""The image sources' reflection order at most: past it the tail is below what matters here,
and the simulation's cost grows with the cube of the order."""
FILTER_HALF = 40
"""Samples of pyroomacoustics' fractional-delay filter before an arrival. What its response
holds earlier than that before the direct sound is the undershoot of its high-pass filter (a
slow -1.6% drift, 5% of the energy over 10 ms in one room measured): cut, as no sound arrives
before the direct one."""
MARGIN = 0.5
"""Metres kept between the source, the microphone and the walls."""


@functools.cache
def responses(rt60: tuple[float, float], rooms: int, seed: int) -> tuple[np.ndarray, ...]:
    """`rooms` impulse responses (float32, the direct sound's peak at 1), each its own room."""
    import pyroomacoustics as pra  # late: only a reverberated input needs it

    out = []
    for k in range(rooms):
        rng = np.random.default_rng([seed, 2, k])
        dims = np.array([rng.uniform(3, 10), rng.uniform(3, 8), rng.uniform(2.4, 4.0)])
        t60 = float(rng.uniform(*rt60))
        absorption, order = pra.inverse_sabine(t60, dims)
        room = pra.ShoeBox(
            dims,
            fs=SAMPLE_RATE,
            materials=pra.Material(absorption),
            max_order=min(int(order), MAX_ORDER),
            use_rand_ism=False,
        )
        source, mic = _places(dims, rng)
        room.add_source(source)
        room.add_microphone(mic)
        room.compute_rir()
        rir = np.asarray(room.rir[0][0], np.float64)
        direct = int(np.argmax(np.abs(rir)))
        rir[: max(0, direct - FILTER_HALF)] = 0.0  # nothing is heard before the direct sound
        out.append((rir / np.max(np.abs(rir))).astype(np.float32))
    return tuple(out)


def _places(dims: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A source and a microphone inside the room, apart from each other and from the walls."""
    while True:
        source, mic = (rng.uniform(MARGIN, dims - MARGIN) for _ in range(2))
        if np.linalg.norm(source - mic) >= MARGIN:
            return source, mic


def reverberate(signal: np.ndarray, rir: np.ndarray) -> np.ndarray:
    """`signal` heard through `rir`: convolved, shifted so that the direct sound keeps its time,
    cut to the signal's length and scaled to its power (clipped to [-1, 1] as a wav is). A
    silent signal is returned as it is."""
    from scipy.signal import fftconvolve  # late: scipy comes with the backends' extras

    x = np.asarray(signal, np.float64)
    power = float(np.mean(x**2)) if len(x) else 0.0
    if power == 0.0:
        return np.asarray(signal, np.float32)
    delay = int(np.argmax(np.abs(rir)))
    wet = fftconvolve(x, np.asarray(rir, np.float64))[delay : delay + len(x)]
    wet_power = float(np.mean(wet**2))
    if wet_power > 0.0:
        wet *= np.sqrt(power / wet_power)
    return np.clip(wet, -1.0, 1.0).astype(np.float32)
