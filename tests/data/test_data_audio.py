"""Speech inputs end to end on generated wavs: an audio manifest becomes the batches a speech
recogniser's training step receives, and every bad file is an error at its manifest line."""

from __future__ import annotations

import itertools
import json
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from wavs import RATE, tone, utterances

from seqc.data.audio import load_wav, read_wav, wav_info, write_wav
from seqc.data.batch import ASR_FIELDS
from seqc.data.bucketing import make_audio_buckets, make_buckets
from seqc.data.calls import make_call
from seqc.data.errors import DataError
from seqc.data.pipeline import InputPipeline, label_bound
from seqc.data.readers import read_examples
from seqc.data.tokenizers import BOS_ID, EOS_ID, PAD_ID
from seqc.resolve.experiment import resolve
from seqc.resolve.program import load_program

TRAIN = [0.3, 0.45, 0.8, 0.2, 1.9, 0.6, 0.5, 1.2, 2.5, 0.35, 0.9, 1.5]
"""Seconds per training utterance; 2.5 s is past every bucket and is dropped."""
DEV = [0.4, 1.1, 3.3]
"""3.3 s is past every bucket: dev keeps it in an extra, larger bucket."""


def speech_input(folder: Path, **fields: Any) -> dict[str, Any]:
    utterances(folder, "train.jsonl", TRAIN, seed=1)
    utterances(folder, "dev.jsonl", DEV, seed=2)
    return {
        "name": "speech",
        "train": make_call("reader", "audio_manifest", "train.jsonl"),
        "dev": make_call("reader", "audio_manifest", "dev.jsonl"),
        "tokenizer": make_call("tokenizer", "chars"),
        "buckets": {0.5: 4, 1.0: 2, 2.0: 2},
        "shuffle_buffer": 16,
        **fields,
    }


def test_speech_batches_have_the_fields_a_recogniser_trains_on(tmp_path: Path) -> None:
    pipe = InputPipeline(speech_input(tmp_path), base_dir=tmp_path)
    assert pipe.task == "asr" and pipe.sample_rate == RATE
    assert [b.bound for b in pipe.buckets] == [8000, 16000, 32000]  # seconds -> samples
    train = pipe.splits["train"]
    texts = [e.target or "" for e in train.examples]
    assert pipe.label_length == label_bound(max(len(t) for t in texts)) == train.label_length
    assert train.label_length % 8 == 0
    batches = list(itertools.islice(pipe.batches("train"), pipe.steps_per_epoch()))
    assert sorted(i for b in batches for i in b.indices) == [i for i in range(12) if i != 8]
    for b in batches:
        assert b.task == "asr" and tuple(b) == ASR_FIELDS
        rows, n = b.rows, b.bucket
        assert b["audio"].shape == b["audio_mask"].shape == (rows, n)
        assert b["audio"].dtype == np.float32 and b["audio_mask"].dtype == np.bool_
        for name in ("tgt_in", "tgt_out", "labels"):
            assert b[name].shape == (rows, train.label_length) and b[name].dtype == np.int32
        for name in ("tgt_mask", "label_mask"):
            assert b[name].shape == (rows, train.label_length) and b[name].dtype == np.bool_
        for r, i in enumerate(b.indices):
            example = train.examples[i]
            assert example.audio is not None
            frames = example.audio.frames
            assert b["audio_mask"][r].sum() == frames and b["audio_mask"][r, :frames].all()
            expected = read_wav(example.audio.path).astype(np.float32) / 32768
            np.testing.assert_array_equal(b["audio"][r, :frames], expected)
            assert not b["audio"][r, frames:].any()
            ids = pipe.tokenizer.encode(texts[i])
            k = len(ids)
            assert b["labels"][r, :k].tolist() == ids and b["label_mask"][r].sum() == k
            assert BOS_ID not in b["labels"][r] and EOS_ID not in b["labels"][r]
            assert (b["labels"][r, :k] != PAD_ID).all()  # pad doubles as CTC's blank
            assert b["tgt_in"][r, : k + 1].tolist() == [BOS_ID, *ids]
            assert b["tgt_out"][r, : k + 1].tolist() == [*ids, EOS_ID]
            assert b["tgt_mask"][r].sum() == k + 1
        for r in range(b.num_examples, rows):  # padding rows
            assert not b["audio_mask"][r].any() and not b["label_mask"][r].any()
            assert not b["tgt_mask"][r].any() and not b["audio"][r].any()
    assert pipe.drops["train"].counts == {"longer-than-buckets": 1}
    assert "train.jsonl:9" in str(pipe.drops["train"])


def test_each_utterance_goes_to_the_smallest_bucket_of_its_duration(tmp_path: Path) -> None:
    pipe = InputPipeline(speech_input(tmp_path), base_dir=tmp_path)
    train = pipe.splits["train"]
    for b in itertools.islice(pipe.batches("train"), 2 * pipe.steps_per_epoch()):
        for i in b.indices:
            seconds = TRAIN[i]
            bound = b.bucket / RATE
            assert seconds <= bound and (bound == 0.5 or seconds > bound / 2)
            assert b.rows == {8000: 4, 16000: 2, 32000: 2}[b.bucket]
    assert train.batcher.examples_per_bucket == (5, 3, 3)


def test_dev_keeps_every_utterance_and_may_have_longer_transcripts(tmp_path: Path) -> None:
    pipe = InputPipeline(speech_input(tmp_path), base_dir=tmp_path)
    dev = list(pipe.batches("dev"))
    assert sorted(i for b in dev for i in b.indices) == [0, 1, 2]
    assert max(b.bucket for b in dev) == 64000  # 3.3 s: an extra bucket of 4 s
    assert pipe.splits["dev"].label_length >= pipe.label_length
    assert {b["labels"].shape[1] for b in dev} == {pipe.splits["dev"].label_length}


def test_resuming_gives_the_same_batches(tmp_path: Path) -> None:
    pipe = InputPipeline(speech_input(tmp_path), base_dir=tmp_path)
    first = list(itertools.islice(pipe.batches("train"), 12))
    again = list(itertools.islice(pipe.batches("train", start_step=7), 5))
    for a, b in zip(first[7:], again, strict=True):
        assert a.indices == b.indices and a.bucket == b.bucket
        np.testing.assert_array_equal(a["audio"], b["audio"])


def test_max_length_is_in_seconds_and_no_buckets_is_the_longest_utterance(tmp_path: Path) -> None:
    pipe = InputPipeline(speech_input(tmp_path, buckets={}, max_length=1), base_dir=tmp_path)
    assert pipe.max_length == RATE
    assert [(b.bound, b.batch_size) for b in pipe.buckets] == [(RATE, 32)]  # 0.9 s -> 1 s
    assert pipe.drops["train"].counts == {"longer-than-max-length": 4}
    summary = pipe.summary()
    assert "asr" in summary and "1s x32" in summary and "16000 Hz" in summary
    assert "12 utterances (0.00 h)" in summary


def test_audio_buckets_from_seconds() -> None:
    buckets = make_audio_buckets({1.25: 8, 0.5: 16}, 16000, default_bound=1)
    assert [(b.bound, b.batch_size) for b in buckets] == [(8000, 16), (20000, 8)]
    with pytest.raises(DataError) as info:
        make_audio_buckets({0.0: 8}, 16000, default_bound=1)
    assert info.value.code == "bad-bucket"
    with pytest.raises(DataError) as info:  # token buckets stay whole numbers
        make_buckets({2.5: 8}, 64)
    assert info.value.code == "bad-bucket" and "seconds apply to audio" in info.value.render()
    assert [b.bound for b in make_buckets({16: 8, 32.0: 4}, 64)] == [16, 32]


def test_vocabulary_is_fitted_on_transcripts(tmp_path: Path) -> None:
    config = speech_input(tmp_path, tokenizer=make_call("tokenizer", "words"))
    pipe = InputPipeline(config, base_dir=tmp_path)
    train_words = {w for e in pipe.splits["train"].examples for w in (e.target or "").split()}
    assert pipe.vocab_size == 4 + len(train_words)  # no wav path became a token
    assert pipe.splits["train"].examples[0].source.endswith("train.jsonl-0.wav")


def test_a_spec_names_an_audio_manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec_dir = tmp_path / "spec"
    utterances(spec_dir, "train.jsonl", [0.3, 0.7, 1.4])
    (spec_dir / "asr.seq").write_text(
        'seqc 1\n\ninput speech {\n  train = audio_manifest("train.jsonl")\n'
        "  tokenizer = chars()\n  buckets = {1: 4, 2: 2}\n  max_length = 2\n}\n\n"
        "model Tiny(vocab: int, d: int = 8) {\n  embed = Embedding(vocab, d)\n"
        "  out = Softmax(vocab, d, tie = embed)\n"
        "  forward (ids: int32[B, T]) -> float32[B, T, vocab] {\n    return out(embed(ids))\n"
        "  }\n}\n\ntask asr {\n  input = speech\n  model = Tiny(vocab = input.vocab_size)\n}\n\n"
        "experiment speech.asr {\n  tasks = [asr]\n}\n"
    )
    monkeypatch.chdir(tmp_path)
    experiment = resolve(load_program(spec_dir / "asr.seq"), "speech.asr")
    pipe = InputPipeline.for_task(experiment, "asr")
    assert pipe.task == "asr" and pipe.sizes == {"train": 3}
    assert [b.bound for b in pipe.buckets] == [16000, 32000]
    assert {b.bucket for b in itertools.islice(pipe.batches("train"), 2)} == {16000, 32000}


def test_a_spec_writes_buckets_and_max_length_in_fractional_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec_dir = tmp_path / "spec"
    utterances(spec_dir, "train.jsonl", [0.3, 0.7, 1.4])
    (spec_dir / "asr.seq").write_text(
        'seqc 1\n\ninput speech {\n  train = audio_manifest("train.jsonl")\n'
        "  tokenizer = chars()\n  buckets = {0.5: 4, 1.5: 2}\n  max_length = 1.5\n}\n\n"
        "model Tiny(vocab: int, d: int = 8) {\n  embed = Embedding(vocab, d)\n"
        "  out = Softmax(vocab, d, tie = embed)\n"
        "  forward (ids: int32[B, T]) -> float32[B, T, vocab] {\n    return out(embed(ids))\n"
        "  }\n}\n\ntask asr {\n  input = speech\n  model = Tiny(vocab = input.vocab_size)\n}\n\n"
        "experiment speech.asr {\n  tasks = [asr]\n}\n"
    )
    monkeypatch.chdir(tmp_path)
    experiment = resolve(load_program(spec_dir / "asr.seq"), "speech.asr")
    pipe = InputPipeline.for_task(experiment, "asr")
    assert [b.bound for b in pipe.buckets] == [8000, 24000]
    assert pipe.sizes == {"train": 3}


# ------------------------------------------------------------------------------ bad files


def one_bad(folder: Path, write: Any, name: str = "bad.wav") -> DataError:
    """A manifest whose second line names a wav written by `write(path)`; the error reading it."""
    utterances(folder, "m.jsonl", [0.2])
    if write is not None:
        write(folder / "wavs" / name)
    with (folder / "m.jsonl").open("a") as f:
        f.write(json.dumps({"audio": f"wavs/{name}", "text": "two"}) + "\n")
    with pytest.raises(DataError) as info:
        read_examples(make_call("reader", "audio_manifest", "m.jsonl"), folder)
    return info.value


def raw_wav(path: Path, rate: int = RATE, channels: int = 1, width: int = 2) -> None:
    with wave.open(str(path), "wb") as f:
        f.setnchannels(channels)
        f.setsampwidth(width)
        f.setframerate(rate)
        f.writeframes(b"\x00" * (width * channels * 100))


def test_a_missing_wav_names_the_manifest_line(tmp_path: Path) -> None:
    err = one_bad(tmp_path, None, "gone.wav")
    assert err.code == "missing-audio"
    text = err.render()
    assert "m.jsonl:2" in text and "gone.wav" in text and "relative to the manifest" in text


def test_a_44k_wav_says_how_to_resample(tmp_path: Path) -> None:
    err = one_bad(tmp_path, lambda p: raw_wav(p, rate=44100))
    assert err.code == "wrong-sample-rate"
    text = err.render()
    assert "m.jsonl:2" in text and "bad.wav" in text and "44100 Hz" in text
    assert "sox -D in.wav -r 16000 -c 1 -b 16 out.wav" in text


def test_stereo_and_8_bit_wavs_are_refused(tmp_path: Path) -> None:
    err = one_bad(tmp_path / "a", lambda p: raw_wav(p, channels=2))
    assert err.code == "wrong-channels" and "m.jsonl:2" in err.render()
    err = one_bad(tmp_path / "b", lambda p: raw_wav(p, width=1))
    assert err.code == "wrong-sample-width" and "8-bit" in err.render()
    err = one_bad(tmp_path / "c", lambda p: p.write_bytes(b"not a wav at all"))
    assert err.code == "bad-audio" and "sox -D" in err.render()


def test_a_manifest_line_without_a_transcript(tmp_path: Path) -> None:
    utterances(tmp_path, "m.jsonl", [0.2])
    (tmp_path / "m.jsonl").write_text(json.dumps({"audio": "wavs/m.jsonl-0.wav", "txt": "x"}))
    with pytest.raises(DataError) as info:
        read_examples(make_call("reader", "audio_manifest", "m.jsonl"), tmp_path)
    text = info.value.render()
    assert info.value.code == "missing-field" and "m.jsonl:1" in text
    assert "did you mean `txt`" in text and "reader's `text`" in text


def test_splits_must_all_be_audio_at_one_rate(tmp_path: Path) -> None:
    (tmp_path / "dev.txt").write_text("one two\n")
    config = speech_input(tmp_path, dev=make_call("reader", "text", "dev.txt"))
    with pytest.raises(DataError) as info:
        InputPipeline(config, base_dir=tmp_path)
    assert info.value.code == "mixed-splits"
    config["dev"] = make_call("reader", "audio_manifest", "dev.jsonl", sample_rate=8000)
    with pytest.raises(DataError) as info:
        InputPipeline(config, base_dir=tmp_path)
    assert info.value.code == "mixed-splits" and "8000 Hz" in info.value.render()


def test_load_wav_for_a_single_file(tmp_path: Path) -> None:
    write_wav(tmp_path / "utt.wav", tone(0.25, 3))
    samples = load_wav(tmp_path / "utt.wav", 16000)
    assert samples.dtype == np.float32 and samples.shape == (4000,)
    assert samples.min() >= -1.0 and samples.max() < 1.0
    np.testing.assert_allclose(samples, tone(0.25, 3), atol=1 / 32768)
    assert wav_info(tmp_path / "utt.wav").duration == 0.25
    with pytest.raises(DataError) as info:
        load_wav(tmp_path / "utt.wav", 8000)
    assert info.value.code == "wrong-sample-rate" and "utt.wav" in info.value.render()


def test_augmented_training_batches_are_the_step_s_and_resume_exactly(tmp_path: Path) -> None:
    """`augment`: the train split's utterances are perturbed (their masks follow the new
    lengths, within the bucket), the same at a step however the run got there; dev is not."""
    augment = (
        make_call("augment", "speed", [0.8, 1.25]),
        make_call("augment", "noise", [20, 20], p=1.0),
    )
    plain = InputPipeline(speech_input(tmp_path), base_dir=tmp_path)
    pipe = InputPipeline(speech_input(tmp_path, augment=augment), base_dir=tmp_path)
    first = list(itertools.islice(pipe.batches("train"), 8))
    again = list(itertools.islice(pipe.batches("train", start_step=5), 3))
    for a, b in zip(first[5:], again, strict=True):
        np.testing.assert_array_equal(a["audio"], b["audio"])
        np.testing.assert_array_equal(a["audio_mask"], b["audio_mask"])
    aug = pipe.splits["train"].augment
    assert aug is not None and plain.splits["train"].augment is None
    frames = [e.audio.frames for e in pipe.splits["train"].audio]
    changed = 0
    for step, (batch, same) in enumerate(zip(first, plain.batches("train"), strict=False)):
        assert batch.indices == same.indices  # augmentation changes the audio, not the plan
        for r, i in enumerate(batch.indices):
            n = aug.length(step, i, frames[i], batch.bucket)
            assert batch["audio_mask"][r].sum() == n <= batch.bucket
            changed += n != frames[i]
    assert changed  # some utterances were slowed or sped up
    for a, b in zip(pipe.batches("dev"), plain.batches("dev"), strict=True):
        np.testing.assert_array_equal(a["audio"], b["audio"])  # dev is never augmented
