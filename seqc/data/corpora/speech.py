"""What seqc's synthesised speech corpora share: the transcript's normal form, the programs they
need, speaking one utterance into a wav, and writing a split's JSON Lines manifest.

Why one module: `spoken_numbers` and `spoken_verses` differ only in what is said (number phrases,
phrases of the KJV and Shakespeare); who says it (`seqc.data.corpora.voices`), how the audio is
made and how a split is written are the same, and must stay byte-for-byte the same, since a
change here changes every corpus's wavs (and then its `RECIPE` must change too).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
import wave
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from seqc.data.corpora import neural_voice, voices
from seqc.data.corpora.voices import Voice
from seqc.data.errors import DataError

SAMPLE_RATE = 16_000
PEAK_DB = -3
"""Every utterance's peak, in dB of full scale: some of espeak-ng's variants and Festival's
`ked` reach full scale, and resampling then clipped them."""
WORKERS = 2
"""Utterances synthesised at once: each is two short processes (an engine, then sox)."""

U = TypeVar("U")


def normalise(text: str) -> str:
    """Lowercase letters, apostrophes and single spaces: everything else (hyphens, commas,
    digits) becomes a space."""
    text = re.sub(r"[^a-z' ]", " ", text.lower())
    return " ".join(text.split())


def voice_for(split: str, rng: np.random.Generator) -> Voice:
    """Who speaks one utterance of `split`: slt for test, Festival's voices for `festival`, the
    training pool for train and dev."""
    if split == "test":
        return voices.TEST
    if split == "festival":
        return voices.festival_voice(rng)
    return voices.training_voice(rng)


def voice_pool() -> dict[str, list[str]]:
    """The voices of each split, for a manifest."""
    return {
        "train_dev": [f"espeak-ng:{v}" for v in voices.ESPEAK_ACCENTS]
        + [f"flite:{v}" for v in voices.FLITE_VOICES]
        + [f"piper:{neural_voice.VOICE}"],
        "espeak_variants": [v for v in voices.ESPEAK_VARIANTS if v],
        "test": [voices.TEST.speaker],
        "festival (evaluation only)": [f"festival:{v}" for v in voices.FESTIVAL_VOICES],
    }


def find_tools(corpus: str) -> dict[str, str]:
    """The path of each program a speech corpus needs; a DataError naming the missing ones and
    the command that installs them."""
    found = {tool: shutil.which(tool) for tool in voices.TOOLS}
    missing = [tool for tool, path in found.items() if path is None]
    if missing:
        listed = ", ".join(f"`{t}`" for t in missing)
        raise DataError(
            f"{listed} {'is' if len(missing) == 1 else 'are'} not installed: the {corpus} "
            "corpus is spoken by espeak-ng, flite, Festival and Piper and resampled by sox",
            code="source-unavailable",
            expected=f"the programs {', '.join(voices.TOOLS)} on the PATH",
            found=f"no {', '.join(missing)}",
            hint=f"install them with `{voices.INSTALL}` (Debian/Ubuntu; `make setup` does it as "
            "root)",
        )
    return {tool: str(path) for tool, path in found.items()}


def synthesise(
    audio: str,
    text: str,
    speech: Voice,
    folder: Path,
    tools: Mapping[str, str],
    fields: Mapping[str, Any],
) -> dict[str, Any]:
    """Speak `text` into `folder/audio` (16 kHz mono 16-bit, no dither, peak at `PEAK_DB`); its
    manifest line, with the corpus's own `fields` after the voice and the voice's settings
    last."""
    out = folder / audio
    with tempfile.TemporaryDirectory(prefix="seqc-tts-") as tmp:
        raw = Path(tmp) / "raw.wav"
        speech.speak(text, raw, tools)
        resample = [str(raw), "-r", str(SAMPLE_RATE), "-c", "1", "-b", "16", str(out)]
        level = ["gain", "-n", str(PEAK_DB)]
        voices.run([tools["sox"], "-D", *resample, *speech.effects(), *level], "sox")
    data = out.read_bytes()
    with wave.open(str(out), "rb") as f:
        frames = f.getnframes()
    line: dict[str, Any] = {
        "audio": audio,
        "text": text,
        "duration": frames / SAMPLE_RATE,
        "sha256": hashlib.sha256(data).hexdigest(),
        "engine": speech.engine,
        "voice": speech.speaker,
        **fields,
    }
    return line | speech.settings()


def build_splits(
    folder: Path,
    planned: Mapping[str, Sequence[U]],
    speak: Callable[[U], dict[str, Any]],
    workers: int = WORKERS,
) -> dict[str, Any]:
    """Speak every planned utterance (`speak` makes one wav and returns its manifest line) and
    write `SPLIT.jsonl` per split into `folder`; their manifest entries. The wavs go under
    `folder/wavs/SPLIT/`."""
    splits: dict[str, Any] = {}
    # Threads, not processes: the work is in the engines' and sox's processes, and a thread
    # waiting on one releases the GIL; two at a time keep two cores busy.
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for split, utterances in planned.items():
            (folder / "wavs" / split).mkdir(parents=True, exist_ok=True)
            lines = list(pool.map(speak, utterances))
            splits[split] = write_split(folder / f"{split}.jsonl", lines)
    return splits


def write_split(path: Path, lines: list[dict[str, Any]]) -> dict[str, Any]:
    """The split's JSON Lines manifest; its entry in manifest.json."""
    text = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    path.write_text(text, encoding="utf-8", newline="\n")
    seconds = sum(line["duration"] for line in lines)
    return {
        "file": path.name,
        "lines": len(lines),
        "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "utterances": len(lines),
        "hours": round(seconds / 3600, 4),
        "voices": sorted({line["voice"] for line in lines}),
    }
