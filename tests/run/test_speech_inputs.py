"""What a speech model takes: audio at least as long as its shortest input, one rule for the
manifests it trains on and the clips it transcribes; and what a CTC model reports.

The shortest input is read from the compiled graph (`seqc.compiler.min_length`): the example's
front end (25 ms windows every 10 ms at 16 kHz: 400 samples, hop 160) and its 4x subsampling
(two valid 3x3 stride-2 convolutions: 7 frames make 1) need 400 + 6 x 160 = 1,360 samples
(85 ms). Below that every runtime fails its own way (onnxruntime "Invalid input shape: {0}",
LiteRT "XNNPack delegate failed to reshape", TF "Computed output size would be negative") or,
as XLA does, answers nothing; so a shorter utterance in a manifest is an error at its line, and a
shorter clip given to `seqc decode` is the same data error on a checkpoint and every artifact.
Nothing here trains: the end-to-end checks ride on `test_export_speech.py`'s trained model.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from wavs import tone, utterances

from seqc.compiler.config import Greedy
from seqc.compiler.min_length import dim_value, min_audio_samples, shortest
from seqc.data.audio import load_wav, write_wav
from seqc.data.errors import DataError
from seqc.run.scoring.evaluate import headline, summarize
from seqc.run.scoring.transcribe import Transcriber
from seqc.run.session import compile_experiment, open_session
from seqc.run.train.patience import score_of

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "examples" / "asr" / "spoken_numbers.seq"
SHORTEST = 400 + 6 * 160
"""The example's shortest input: a 400-sample window, then 6 hops for the 7 frames that the
two subsampling convolutions turn into one."""
TASKS = {"asr.numbers.tiny": "asr_ctc", "asr.numbers.las.tiny": "asr_las"}


@pytest.mark.parametrize("experiment", list(TASKS))
def test_the_shortest_input_follows_from_the_front_end(experiment: str, tmp_path: Path) -> None:
    vocab = [f"{TASKS[experiment]}.model.vocab=20"]  # set, so no data is read
    _, compiled = compile_experiment(SPEC, experiment, vocab)
    assert min_audio_samples(compiled.graph) == SHORTEST
    frames = "((((((N-400)//160+1)-3)//2+1)-3)//2+1)"  # the subsampled frames, as the graph has
    assert dim_value(frames, {"N": SHORTEST}) == 1
    assert dim_value(frames, {"N": SHORTEST - 1}) == 0
    # another front end, another minimum: 50 ms windows every 20 ms need 800 + 6 x 320 samples
    wider = tmp_path / "wider.seq"
    old = "LogMelFilterbank(16000, bins)"
    wider.write_text(SPEC.read_text().replace(old, "LogMelFilterbank(16000, bins, 50, 20)"))
    _, compiled = compile_experiment(wider, experiment, vocab)
    assert min_audio_samples(compiled.graph) == 800 + 6 * 320


def test_dim_values_are_exact_and_refuse_what_they_cannot_read() -> None:
    assert dim_value("ceil(N/2)", {"N": 5}) == 3 and dim_value("((N-3)//2+1)", {"N": 2}) == 0
    assert dim_value(7, {}) == 7 and dim_value("N*2", {"N": 4}) == 8
    with pytest.raises(ValueError, match="not a dim expression"):
        dim_value("__import__('os')", {"N": 1})
    _, compiled = compile_experiment(SPEC, "asr.numbers.tiny", ["asr_ctc.model.vocab=20"])
    assert shortest(compiled.graph, "B") == 1  # a batch of one utterance runs


def _spec_over(folder: Path, train: list[float], dev: list[float]) -> Path:
    """The example spec reading a corpus of tones with these durations (seconds)."""
    utterances(folder, "train.jsonl", train, seed=1)
    utterances(folder, "dev.jsonl", dev, seed=2)
    text = SPEC.read_text().replace(".cache/data/spoken-numbers/", f"{folder.as_posix()}/")
    text = text.replace(f'  test = audio_manifest("{folder.as_posix()}/test.jsonl")\n', "")
    (folder / "asr.seq").write_text(text)
    return folder / "asr.seq"


def _add(folder: Path, manifest: str, at: int, name: str, samples: int) -> None:
    """Insert a line naming a wav of `samples` samples as line `at` (1-based) of `manifest`."""
    write_wav(folder / "wavs" / name, tone(samples / 16000, 9)[:samples])
    lines = (folder / manifest).read_text().splitlines()
    lines.insert(at - 1, json.dumps({"audio": f"wavs/{name}", "text": "one two"}))
    (folder / manifest).write_text("\n".join(lines) + "\n")


def test_a_manifest_with_utterances_shorter_than_the_model_hears_is_refused(
    tmp_path: Path,
) -> None:
    spec = _spec_over(tmp_path, [0.3, 0.5, 0.8, 0.4], [0.6, 0.7])
    _add(tmp_path, "train.jsonl", 2, "empty.wav", 0)
    _add(tmp_path, "train.jsonl", 4, "click.wav", 400)
    _add(tmp_path, "dev.jsonl", 1, "cut.wav", SHORTEST - 1)
    with pytest.raises(DataError) as info:  # as `seqc train` and `seqc export` open it
        open_session(spec, "asr.numbers.tiny", cache_dir=tmp_path / "c")
    err = info.value
    assert err.code == "audio-too-short" and err.path is not None
    assert err.path.endswith("train.jsonl:2")  # the first short one's line, naming its wav
    text = err.render()
    assert "empty.wav" in text and "0 samples" in text and "1,360 samples (85 ms)" in text
    assert "2 more too short" in text  # every other one, so one edit fixes them all
    assert "train.jsonl:4" in text and "click.wav, 400 samples" in text
    assert "dev.jsonl:1" in text and "1,359 samples" in text
    assert "remove the line" in text
    # exactly the shortest input is an utterance like any other
    spec = _spec_over(tmp_path / "ok", [0.3, 0.5], [0.6])
    _add(tmp_path / "ok", "train.jsonl", 1, "just.wav", SHORTEST)
    session = open_session(spec, "asr.numbers.tiny", cache_dir=tmp_path / "c")
    assert min(e.audio.frames for e in session.pipeline.splits["train"].examples) == SHORTEST


class _Runtime:
    """Frame logits that fail as onnxruntime does on audio too short for its convolutions."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, arrays: dict) -> np.ndarray:
        self.calls += 1
        if arrays["audio"].shape[1] < SHORTEST:
            raise RuntimeError("Conv node: Invalid input shape: {0}")
        return np.zeros((1, 1, 4), np.float32)


class _Words:
    def decode(self, ids: list[int]) -> str:
        return " ".join(map(str, ids))


def test_decode_refuses_a_clip_shorter_than_the_model_hears(tmp_path: Path) -> None:
    greedy = Greedy(max_length=32)
    runtime = _Runtime()
    listen = Transcriber(_Words(), greedy, logits=runtime, min_samples=SHORTEST)
    for n in (0, 400, 1000, SHORTEST - 1):
        write_wav(tmp_path / f"{n}.wav", tone(1.0, 3)[:n])
        with pytest.raises(DataError) as info:
            listen.wav(tmp_path / f"{n}.wav")
        text = info.value.render()
        assert info.value.code == "audio-too-short" and f"{n}.wav" in text
        assert f"{n:,} samples" in text and "1,360 samples (85 ms)" in text
        assert "sox in.wav out.wav pad 0 0.085" in text  # how to make it long enough
    assert runtime.calls == 0  # refused before the runtime sees it
    with pytest.raises(DataError):
        listen(np.zeros(10, np.float32))  # samples given directly: the same rule
    write_wav(tmp_path / "ok.wav", tone(1.0, 3)[:SHORTEST])
    assert listen.wav(tmp_path / "ok.wav") == "" and runtime.calls == 1
    with pytest.raises(DataError) as info:
        load_wav(tmp_path / "400.wav", min_samples=SHORTEST)
    assert info.value.code == "audio-too-short"


def test_a_ctc_model_reports_its_loss_not_a_perplexity() -> None:
    sums = {"loss_sum": 400.0, "nll_sum": 400.0, "tokens": 8.0, "correct": 0.0}
    ctc = summarize(sums, ctc=True)
    assert ctc == {"loss": 50.0, "tokens": 8}  # no perplexity of e^50, no accuracy of 0
    assert headline(ctc) == ("loss", 50.0)
    decoder = summarize(sums | {"nll_sum": 16.0, "correct": 4.0})  # LAS, joint CTC's decoder
    assert headline(decoder)[0] == "perplexity" and decoder["accuracy"] == 0.5
    assert score_of(ctc) == ("loss", -50.0)  # early stopping without WER follows the loss
    assert score_of(ctc | {"wer": 12.0}) == ("wer", -12.0)
