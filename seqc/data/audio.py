"""Reading speech audio: 16-bit PCM mono wav files, with the stdlib `wave` module.

Why one narrow format: every speech corpus seqc builds or reads is resampled once, offline, to
16-bit PCM mono at the model's sample rate (`sox -D in.wav -r 16000 -c 1 -b 16 out.wav`), so
reading is a header check and one `frombuffer`, with no resampling library and nothing that can
differ between machines. Anything else (another rate, stereo, 8- or 24-bit, float samples, not a
wav at all) is a `DataError` that names the manifest line and the wav file and gives that sox
command, rather than a silent conversion whose quality nobody chose.

`wav_info` reads a header only (cheap enough to check every file of a manifest when a pipeline
is built); `read_wav` reads the samples as int16 (half the memory of float32, and what batches
are made from); `load_wav` gives float32 in [-1, 1) for a single file, as `seqc decode --input
utt.wav` needs.

What an utterance must be, beyond its format: at least as long as the model's shortest input
(`seqc.compiler.min_length.min_audio_samples`: below it the front end and the subsampling leave
no frame, and every runtime fails on it differently, or answers nothing). `too_short` is that
one rule's error, for a manifest's line (`InputPipeline.require_samples`) and for a clip given to
`seqc decode` (`load_wav`, `Transcriber`) alike: a data error (exit 2) that says how long the
audio is, how long it must be, and how to fix it.
"""

from __future__ import annotations

import io
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from seqc.data.errors import DataError, display_path

SAMPLE_RATE = 16_000
"""The sample rate seqc's speech corpora are made at, and the readers' default."""
SAMPLE_WIDTH = 2
"""Bytes per sample: 16-bit PCM."""
INT16_SCALE = 32768.0
"""int16 -> float: divide by 2**15, so samples lie in [-1, 1)."""


def resample_command(sample_rate: int = SAMPLE_RATE) -> str:
    """The sox command that converts any wav into what the readers take; `-D` turns dither off
    so the output is the same bytes on every run."""
    return f"sox -D in.wav -r {sample_rate} -c 1 -b 16 out.wav"


@dataclass(frozen=True, slots=True)
class AudioClip:
    """A checked wav file: where it is and how many samples it holds (from its header)."""

    path: str
    frames: int
    sample_rate: int

    @property
    def duration(self) -> float:
        """Seconds of audio."""
        return self.frames / self.sample_rate


@dataclass(frozen=True)
class WavBytes:
    """A wav file's bytes that came from elsewhere than a file (`seqc decode --input -` reads
    standard input), and the name its errors give it."""

    name: str
    data: bytes

    def __str__(self) -> str:
        return self.name


WavSource = str | Path | WavBytes
"""A wav file by its path, or its bytes."""

RIFF = b"RIFF"
"""How every wav file starts: what tells audio on standard input from text."""


def _open(wav: Path | WavBytes) -> wave.Wave_read:
    return wave.open(io.BytesIO(wav.data) if isinstance(wav, WavBytes) else str(wav), "rb")


def _source(path: WavSource) -> Path | WavBytes:
    return path if isinstance(path, WavBytes) else Path(path)


def _problem(
    message: str,
    code: str,
    wav: Path | WavBytes,
    location: str | None,
    *,
    expected: str | None = None,
    found: str | None = None,
    hint: str | None = None,
) -> DataError:
    """An error at the manifest line when there is one (that is the line to fix), naming the wav
    in the message either way."""
    shown = wav.name if isinstance(wav, WavBytes) else display_path(wav)
    return DataError(
        f"{shown}: {message}",
        code=code,
        path=location if location is not None else shown,
        expected=expected,
        found=found,
        hint=hint,
    )


def wav_info(
    path: WavSource, sample_rate: int = SAMPLE_RATE, *, location: str | None = None
) -> AudioClip:
    """The header of a 16-bit PCM mono wav at `sample_rate`; a DataError (at `location`, the
    manifest's `file:line`, if given) for anything else."""
    wav = _source(path)
    fix = f"convert it with `{resample_command(sample_rate)}`"
    if isinstance(wav, Path) and not wav.is_file():
        missing = "is a directory, not a wav file" if wav.is_dir() else "no such wav file"
        raise _problem(
            missing,
            "missing-audio",
            wav,
            location,
            hint="audio paths in a manifest are relative to the manifest's folder; "
            "re-run `seqc data prepare` if the corpus is one of seqc's"
            if location
            else "check the path",
        )
    try:
        with _open(wav) as f:
            rate, channels, width, frames = (
                f.getframerate(),
                f.getnchannels(),
                f.getsampwidth(),
                f.getnframes(),
            )
    except (wave.Error, EOFError) as e:
        raise _problem(
            "not a PCM wav file",
            "bad-audio",
            wav,
            location,
            expected="a RIFF/WAVE file of 16-bit PCM samples",
            found=str(e) or "a truncated header",
            hint=fix,
        ) from None
    except OSError as e:
        raise _problem(f"cannot be read: {e.strerror or e}", "bad-audio", wav, location) from None
    if rate != sample_rate:
        raise _problem(
            f"sampled at {rate} Hz, not {sample_rate} Hz",
            "wrong-sample-rate",
            wav,
            location,
            expected=f"{sample_rate} Hz (the reader's sample_rate)",
            found=f"{rate} Hz",
            hint=f"resample it with `{resample_command(sample_rate)}`, or set the reader's "
            "sample_rate if every file has this rate",
        )
    if channels != 1:
        raise _problem(
            f"has {channels} channels, not 1",
            "wrong-channels",
            wav,
            location,
            expected="mono",
            found=f"{channels} channels",
            hint=f"mix it down with `{resample_command(sample_rate)}`",
        )
    if width != SAMPLE_WIDTH:
        raise _problem(
            f"has {8 * width}-bit samples, not 16-bit",
            "wrong-sample-width",
            wav,
            location,
            expected="16-bit PCM",
            found=f"{8 * width}-bit PCM",
            hint=fix,
        )
    return AudioClip(str(wav), frames, rate)


def read_wav(
    path: WavSource, sample_rate: int = SAMPLE_RATE, *, location: str | None = None
) -> np.ndarray:
    """The samples of a checked wav as int16 [frames]."""
    wav = _source(path)
    clip = wav_info(wav, sample_rate, location=location)
    with _open(wav) as f:
        data = f.readframes(clip.frames)
    samples = np.frombuffer(data, dtype="<i2")
    if len(samples) != clip.frames:
        raise _problem(
            f"is truncated: its header says {clip.frames} samples, it holds {len(samples)}",
            "bad-audio",
            wav,
            location,
            hint=f"re-create the file (e.g. `{resample_command(sample_rate)}`)",
        )
    return samples.astype(np.int16, copy=False)


def milliseconds(samples: int, sample_rate: int) -> str:
    """A count of samples as a user reads a clip's length: `85 ms`, `62.5 ms`."""
    return f"{1000.0 * samples / sample_rate:g} ms"


def too_short(
    wav: str | Path,
    frames: int,
    min_samples: int,
    sample_rate: int,
    location: str | None = None,
    *,
    others: tuple[str, ...] = (),
) -> DataError:
    """The error for audio shorter than the model's shortest input: `frames` samples where it
    needs `min_samples` (at `location`, a manifest's `file:line`, if there is one); `others`:
    where else the same manifest has one (all are listed, so one edit fixes them all)."""
    need = f"{min_samples:,} samples ({milliseconds(min_samples, sample_rate)})"
    found = f"{frames:,} samples ({milliseconds(frames, sample_rate)})"
    if others:
        shown = ", ".join(others[:5]) + (", ..." if len(others) > 5 else "")
        found += f"; {len(others)} more too short: {shown}"
    if location is not None:
        hint = (
            "remove the line(s) from the manifest, or re-create the wav if it was cut short: "
            "an utterance this short has no frame to carry its transcript"
        )
    else:
        hint = (
            f"record a longer clip, or pad this one with silence "
            f"(`sox in.wav out.wav pad 0 {min_samples / sample_rate:g}`)"
        )
    return _problem(
        f"is {frames:,} samples long, shorter than the model's shortest input, {need}",
        "audio-too-short",
        Path(wav),
        location,
        expected=f"at least {need}: less leaves no frame after the model's front end",
        found=found,
        hint=hint,
    )


def check_length(clip: AudioClip, min_samples: int, location: str | None = None) -> AudioClip:
    """`clip` when it holds at least `min_samples` samples; else `too_short`'s error."""
    if clip.frames < min_samples:
        raise too_short(clip.path, clip.frames, min_samples, clip.sample_rate, location)
    return clip


def to_float(samples: np.ndarray) -> np.ndarray:
    """int16 samples as float32 in [-1, 1)."""
    return samples.astype(np.float32) / np.float32(INT16_SCALE)


def load_wav(path: WavSource, sample_rate: int = SAMPLE_RATE, min_samples: int = 0) -> np.ndarray:
    """One wav file as float32 [frames] in [-1, 1): what a model's audio input takes (`seqc
    decode --input utt.wav`). A DataError naming the file and the sox command for a wrong rate,
    channel count or sample width, and `too_short`'s for fewer than `min_samples` samples (the
    model's shortest input), checked from the header before the samples are read."""
    check_length(wav_info(path, sample_rate), min_samples)
    return to_float(read_wav(path, sample_rate))


def write_wav(path: str | Path, samples: np.ndarray, sample_rate: int = SAMPLE_RATE) -> None:
    """Write float samples in [-1, 1] (clipped) or int16 samples as a 16-bit PCM mono wav:
    for tests and for tools that make audio in numpy."""
    data = np.asarray(samples)
    if data.dtype != np.int16:
        data = np.round(np.clip(data, -1.0, 32767 / 32768) * INT16_SCALE).astype(np.int16)
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(SAMPLE_WIDTH)
        f.setframerate(sample_rate)
        f.writeframes(data.astype("<i2").tobytes())
