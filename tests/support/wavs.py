"""Generated speech: wavs of tones and the JSON-lines manifests that name them.

`test_data_audio.py` reads them through the input pipeline; `test_speech_inputs.py` trains on them.
`needs_voices` skips a test that builds the spoken-numbers corpus where its synthesisers are
missing.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from seqc.data.audio import write_wav
from seqc.data.corpora import spoken_numbers

VOICES_MISSING = [tool for tool in spoken_numbers.TOOLS if shutil.which(tool) is None]
"""The speech corpus's synthesisers and resampler that this machine lacks."""

needs_voices = pytest.mark.skipif(
    bool(VOICES_MISSING),
    reason=f"{', '.join(VOICES_MISSING)} not installed ({spoken_numbers.INSTALL})",
)
"""For the tests that build a spoken-numbers corpus: skipped, with the install line, without the
voices."""

RATE = 16_000
WORDS = ["one", "two", "three", "four", "five", "hundred", "and", "thousand"]


def tone(seconds: float, seed: int) -> np.ndarray:
    """A sine with a little noise: distinct content per utterance, to check the samples."""
    rng = np.random.default_rng(seed)
    t = np.arange(round(seconds * RATE)) / RATE
    return 0.5 * np.sin(2 * np.pi * (200 + 50 * seed) * t) + 0.01 * rng.standard_normal(len(t))


def utterances(folder: Path, name: str, durations: list[float], seed: int = 0) -> Path:
    """Wavs under `folder/wavs/` and a manifest `folder/name` naming them relatively."""
    (folder / "wavs").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    lines = []
    for i, seconds in enumerate(durations):
        wav = f"wavs/{name}-{i}.wav"
        write_wav(folder / wav, tone(seconds, seed * 100 + i))
        text = " ".join(rng.choice(WORDS, size=int(rng.integers(1, 6))).tolist())
        lines.append(json.dumps({"audio": wav, "text": text, "duration": seconds}))
    (folder / name).write_text("\n".join(lines) + "\n")
    return folder / name
