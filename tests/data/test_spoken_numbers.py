"""The spoken-numbers speech corpus (`seqc.data.corpora.spoken_numbers`), built tiny: the same
bytes on every build, a test voice and test numbers that training never sees, and manifests a
speech input reads as they are."""

from __future__ import annotations

import hashlib
import json
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner
from wavs import VOICES_MISSING, needs_voices

from seqc.cli.data import APP as data_app
from seqc.data.audio import read_wav
from seqc.data.calls import make_call
from seqc.data.corpora import speech, spoken_numbers, voices
from seqc.data.pipeline import InputPipeline
from seqc.data.prepare import describe, prepare

TINY = {"train": 12, "dev": 4, "test": 4, "festival": 4}


def manifest_lines(folder: Path, split: str) -> list[dict[str, Any]]:
    text = (folder / f"{split}.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny corpus through `prepare`, as `seqc data prepare spoken-numbers` makes it."""
    if VOICES_MISSING:
        pytest.skip(f"{', '.join(VOICES_MISSING)} not installed")
    root = tmp_path_factory.mktemp("data")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(spoken_numbers, "SIZES", TINY)
        result = prepare("spoken-numbers", root)
    assert "h of audio" in describe(result)
    return result.folder


def test_phrases_are_normalised_words() -> None:
    assert spoken_numbers.phrase(3456, "cardinal") == "three thousand four hundred and fifty six"
    assert spoken_numbers.phrase(1905, "year") == "nineteen oh five"
    assert spoken_numbers.phrase(21, "ordinal") == "twenty first"
    assert spoken_numbers.normalise("One-Hundred,  and TWO") == "one hundred and two"


def test_held_out_numbers_never_reach_training() -> None:
    planned = spoken_numbers.plan()  # the full corpus's plan: no audio is made
    assert {k: len(v) for k, v in planned.items()} == spoken_numbers.SIZES
    numbers = {split: {u.number for u in us} for split, us in planned.items()}
    texts = {split: {u.text for u in us} for split, us in planned.items()}
    assert not numbers["test"] & (numbers["train"] | numbers["dev"])
    assert not numbers["dev"] & numbers["train"]
    assert not texts["test"] & (texts["train"] | texts["dev"])
    assert {u.speaker for u in planned["test"]} == {"flite:slt"}
    assert "slt" not in {u.voice for u in planned["train"] + planned["dev"]}
    # festival: test's numbers and words, in Festival's voices, which nothing else speaks
    assert [(u.number, u.text) for u in planned["festival"]] == [
        (u.number, u.text) for u in planned["test"]
    ]
    assert {u.speech.engine for u in planned["festival"]} == {"festival"}
    assert len({u.voice for u in planned["festival"]}) == 3
    assert "festival" not in {u.speech.engine for u in planned["train"] + planned["dev"]}
    speakers = {u.speaker for u in planned["train"]}
    assert len(speakers) > 500  # accents x variants, and flite's
    assert {s for s in speakers if "klatt" in s}
    assert {"flite:kal16", "flite:awb", "flite:rms", "flite:kal"} <= speakers
    pitches = {u.speech.pitch for u in planned["train"] if u.speech.engine == "flite"}
    assert min(pitches) < -200 and max(pitches) > 200  # flite's voices shifted both ways
    assert {u.form for u in planned["train"]} == {"cardinal", "ordinal", "year"}
    small = spoken_numbers.plan(TINY)  # a small corpus is a prefix of the full one
    assert all(small[s] == planned[s][: TINY[s]] for s in TINY)


@needs_voices
def test_manifests_describe_their_wavs(corpus: Path) -> None:
    meta = json.loads((corpus / "manifest.json").read_text())
    assert meta["corpus"] == "spoken-numbers" and meta["sample_rate"] == 16000
    for split, n in TINY.items():
        lines = manifest_lines(corpus, split)
        assert len(lines) == n == meta["splits"][split]["utterances"]
        for i, line in enumerate(lines, 1):
            assert line["audio"] == f"wavs/{split}/{i:06d}.wav"
            wav = corpus / line["audio"]
            assert hashlib.sha256(wav.read_bytes()).hexdigest() == line["sha256"]
            with wave.open(str(wav), "rb") as f:
                assert (f.getframerate(), f.getnchannels(), f.getsampwidth()) == (16000, 1, 2)
                assert line["duration"] == f.getnframes() / 16000
            assert 0.3 < line["duration"] < 8.0
            peak = int(np.abs(read_wav(wav).astype(np.int32)).max())
            assert 1000 < peak < 32767  # audible, and not clipped by resampling
            assert line["text"] == spoken_numbers.normalise(line["text"])
        seconds = sum(line["duration"] for line in lines)
        assert meta["splits"][split]["hours"] == round(seconds / 3600, 4)
    assert {line["voice"] for line in manifest_lines(corpus, "test")} == {"flite:slt"}
    festival = manifest_lines(corpus, "festival")
    assert {line["engine"] for line in festival} == {"festival"}
    assert [x["text"] for x in festival] == [x["text"] for x in manifest_lines(corpus, "test")]
    assert all("stretch" in line for line in festival)
    espeak = [x for s in ("train", "dev") for x in manifest_lines(corpus, s) if "rate" in x]
    assert espeak and all(x["engine"] == "espeak-ng" and "pitch" in x for x in espeak)
    heard = {line["voice"] for s in ("train", "dev") for line in manifest_lines(corpus, s)}
    assert "flite:slt" not in heard


@needs_voices
def test_two_builds_are_the_same_bytes(corpus: Path, tmp_path: Path) -> None:
    meta = spoken_numbers.build(tmp_path, sizes=TINY, workers=1)  # another worker count too
    for split in TINY:
        first, again = manifest_lines(corpus, split), manifest_lines(tmp_path, split)
        assert [x["sha256"] for x in again] == [x["sha256"] for x in first]
        data = (tmp_path / f"{split}.jsonl").read_bytes()
        assert data == (corpus / f"{split}.jsonl").read_bytes()
        assert meta["splits"][split]["sha256"] == hashlib.sha256(data).hexdigest()


@needs_voices
def test_a_speech_input_reads_the_corpus(corpus: Path) -> None:
    config = {
        "train": make_call("reader", "audio_manifest", str(corpus / "train.jsonl")),
        "test": make_call("reader", "audio_manifest", str(corpus / "test.jsonl")),
        "tokenizer": make_call("tokenizer", "chars"),
        "buckets": {2.0: 4, 4.0: 2},
    }
    pipe = InputPipeline(config)
    assert pipe.task == "asr" and pipe.sizes == {"train": 12, "test": 4}
    test = list(pipe.batches("test"))
    assert sum(b.num_examples for b in test) == 4  # a longer test utterance gets a bucket too
    assert all(b["audio_mask"].sum() > 0 for b in test)


def test_missing_programs_say_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(speech.shutil, "which", lambda name: None)
    result = CliRunner().invoke(
        data_app, ["prepare", "spoken-numbers", "--cache-dir", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert f"apt-get install -y {voices.PACKAGES}" in result.output
    assert "`espeak-ng`, `flite`, `festival`, `text2wave`, `sox` are not installed" in result.output
    assert "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == []  # nothing half-built is left behind


def test_engine_commands_speak_the_phrase_file(tmp_path: Path) -> None:
    tools = {t: f"/usr/bin/{t}" for t in voices.TOOLS}
    text, out = tmp_path / "t.txt", tmp_path / "o.wav"
    festival = voices.Voice("festival", "ked_diphone", stretch=1.1)
    assert festival.command(text, out, tools) == [
        *("/usr/bin/text2wave", "-eval", "(voice_ked_diphone)"),
        *("-eval", "(Parameter.set 'Duration_Stretch 1.1)", "-o", str(out), str(text)),
    ]
    flite = voices.Voice("flite", "awb", pitch=-120, stretch=0.9)
    assert flite.command(text, out, tools)[-4:] == ["-f", str(text), "-o", str(out)]
    assert flite.effects() == ["pitch", "-120"] and voices.TEST.effects() == []
    espeak = voices.Voice("espeak-ng", "en-gb+klatt3", rate=150, pitch=40)
    assert espeak.settings() == {"rate": 150, "pitch": 40} and espeak.effects() == []
    pitched = voices.Voice("flite", "kal", stretch=1.0, f0=210)
    assert pitched.command(text, out, tools)[-6:-4] == ["--setf", "int_f0_target_mean=210"]
    assert pitched.settings() == {"stretch": 1.0, "f0": 210}
    piper = voices.Voice("piper", "joe", pitch=-90, stretch=1.1)
    assert piper.effects() == ["pitch", "-90"]
    with pytest.raises(ValueError, match="no command line"):  # not Festival's by default
        piper.command(text, out, tools)


def test_the_training_pool_draws_every_engine_and_holds_the_test_voices_out() -> None:
    drawn = [voices.training_voice(np.random.default_rng([7, i])) for i in range(400)]
    engines = {v.engine: 0 for v in drawn}
    for v in drawn:
        engines[v.engine] += 1
    assert set(engines) == {"espeak-ng", "flite", "piper"} and engines["piper"] > 20
    flite = [v for v in drawn if v.engine == "flite"]
    assert all((v.f0 is None) == (v.voice not in voices.FLITE_F0_VOICES) for v in flite)
    f0s = [v.f0 for v in flite if v.f0 is not None]
    assert min(f0s) < 120 and max(f0s) > 200  # a man's pitch to a woman's
    assert all(v.voice != voices.TEST_VOICE and v.engine != "festival" for v in drawn)


def _f0(wav: Path) -> float:
    """The median pitch of an utterance's voiced frames, by autocorrelation."""
    x = read_wav(wav).astype(np.float64)
    frame, hop, pitches = 640, 160, []
    for start in range(0, len(x) - frame, hop):
        seg = x[start : start + frame] - x[start : start + frame].mean()
        if np.sqrt((seg**2).mean()) < 300:
            continue
        ac = np.correlate(seg, seg, "full")[frame - 1 :]
        lag = 40 + int(np.argmax(ac[40:267]))  # 60-400 Hz at 16 kHz
        if ac[lag] > 0.4 * ac[0]:
            pitches.append(16_000 / lag)
    return float(np.median(pitches))


@needs_voices
def test_flite_speaks_at_the_pitch_asked_and_piper_the_same_bytes_twice(tmp_path: Path) -> None:
    tools = speech.find_tools("spoken-numbers")
    text = "four thousand three hundred and twelve"
    low, high = voices.Voice("flite", "awb", f0=100), voices.Voice("flite", "awb", f0=220)
    said = {}
    for name, voice in {"low": low, "high": high}.items():
        said[name] = speech.synthesise(f"{name}.wav", text, voice, tmp_path, tools, {})
    assert abs(_f0(tmp_path / "low.wav") - 100) < 15 and abs(_f0(tmp_path / "high.wav") - 220) < 25
    assert said["high"]["f0"] == 220 and said["high"]["voice"] == "flite:awb"
    slow, fast = (voices.Voice("piper", "joe", stretch=s) for s in (1.2, 0.85))
    first = speech.synthesise("a.wav", text, slow, tmp_path, tools, {})
    again = speech.synthesise("b.wav", text, slow, tmp_path, tools, {})
    quick = speech.synthesise("c.wav", text, fast, tmp_path, tools, {})
    assert first["sha256"] == again["sha256"] and first["engine"] == "piper"
    assert quick["duration"] < first["duration"] * 0.95  # silences do not scale


def test_a_corpus_of_another_recipe_is_built_again(tmp_path: Path) -> None:
    from seqc.data.prepare import stale, state

    folder = tmp_path / "spoken-numbers"
    folder.mkdir()
    (folder / "train.jsonl").write_text("")
    sha = hashlib.sha256(b"").hexdigest()
    manifest = {
        "corpus": "spoken-numbers",
        "splits": {"train": {"file": "train.jsonl", "sha256": sha}},
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    why = stale("spoken-numbers", folder, manifest)  # no recipe recorded: the first
    assert why == f"recipe 1 built it, and this seqc builds recipe {spoken_numbers.RECIPE}"
    assert state("spoken-numbers", tmp_path).startswith("outdated in ")
    manifest["recipe"] = spoken_numbers.RECIPE
    assert stale("spoken-numbers", folder, manifest) is None
