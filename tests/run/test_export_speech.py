"""Deploying a speech model: `seqc export` of a Conformer-CTC that takes raw audio, and
`seqc decode --input utterance.wav` with the artifacts and with the trained model.

A tiny corpus (a dozen utterances, espeak-ng and flite) trains `asr.numbers.tiny` for a few
steps. A CTC model has nothing to decode step by step, so it is exported whole (audio and its
mask in, the log-mel front end inside, frame logits out) to ONNX (fp32, dynamic, static int8)
and TFLite (fp32, dynamic range, and full int8 with the front end left in float, as the spec's
export block says); each fp32 artifact must match the trained model's frame logits
on the real frames of dev batches, and every artifact transcribes a wav as the trained model
does. A wav that is missing or at another rate is the audio reader's error, not a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner
from wavs import needs_voices

from seqc.backends.tf.scopes import in_layers
from seqc.backends.tflite.flatbuffer import float_compute, ops
from seqc.cli import app
from seqc.data.audio import read_wav, write_wav
from seqc.data.corpora import spoken_numbers

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "examples" / "asr" / "spoken_numbers.seq"
TINY = {"train": 12, "dev": 4, "test": 4}
pytestmark = needs_voices
runner = CliRunner()


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Path, Path, str]:
    """The example spec pointed at a tiny corpus, `asr.numbers.tiny` trained on it, and the
    output of `seqc train`."""
    folder = tmp_path_factory.mktemp("asr")
    data = folder / "data"
    spoken_numbers.build(data, sizes=TINY, workers=1)
    text = SPEC.read_text().replace(".cache/data/spoken-numbers/", f"{data.as_posix()}/")
    (folder / "asr.seq").write_text(text)
    base = [str(folder / "asr.seq"), "-e", "asr.numbers.tiny", "--cache-dir", str(folder / "c")]
    run = folder / "run"
    result = runner.invoke(app, ["train", *base, "--run-dir", str(run), "--no-progress"])
    assert result.exit_code == 0, result.output
    return base, run, data, result.output


def _manifest(run: Path, name: str) -> dict:
    return json.loads((run / "export" / name / "manifest.json").read_text())


def _onnx_none(base: list[str], run: Path) -> Path:
    """The run's fp32 ONNX export, made here when the export test has not run before."""
    onnx = run / "export" / "onnx-none"
    if not onnx.is_dir():
        export = ["export", *base, "--run-dir", str(run), "--format", "onnx", "--quantize", "none"]
        done = runner.invoke(app, [*export, "--wer", "0", "--batches", "1"])
        assert done.exit_code == 0, done.output
    return onnx


def _transcript(args: list[str]) -> str:
    result = runner.invoke(app, ["decode", *args])
    assert result.exit_code == 0, result.output
    lines = [
        line
        for line in result.output.splitlines()
        if line.strip() and not line.startswith(("decoding", "loaded"))
    ]
    return lines[-1]


def test_train_prints_a_transcribed_sample(trained) -> None:
    _, _, data, output = trained
    sample = next(line for line in output.splitlines() if line.startswith("sample: "))
    first = json.loads((data / "dev.jsonl").read_text().splitlines()[0])["text"]
    assert sample.endswith(f"(reference: {first})")
    # a CTC model's figure is its criterion's loss: exp of it is no perplexity (1e21 here)
    assert "dev loss before training: " in output and "perplexity" not in output


def test_ctc_exports_take_audio_and_transcribe_like_the_model(trained, tmp_path: Path) -> None:
    base, run, data, _ = trained
    jobs = ["--format", "onnx", "--format", "tflite", "--quantize", "none"]
    args = ["export", *base, "--run-dir", str(run), "--wer", "4", "--batches", "1"]
    result = runner.invoke(app, [*args, *jobs, "--quantize", "dynamic"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, args)  # the spec's export block: ONNX and TFLite int8
    assert result.exit_code == 0, result.output
    for name in ("onnx-none", "tflite-none"):
        m = _manifest(run, name)
        # the log-mel front end is ill-conditioned in float32 (see export.SPEECH_PARITY_ATOL):
        # runtimes differ by ~1e-3 at quiet frames, by whole units when something is wrong
        assert m["parity_max_abs_err"] <= 5e-3, name
        assert m["step"]["encoder_only"] and m["step"]["caches"] == {}
        assert m["inputs"] == {"audio": [["B", "N"], "float32"], "audio_mask": [["B", "N"], "bool"]}
        assert m["outputs"] == ["logits"] and m["audio"]["sample_rate"] == 16000
        assert m["quality"]["wer"] == pytest.approx(m["reference_quality"]["wer"], abs=1e-6)
    assert _manifest(run, "onnx-none")["reference_evaluator_err"] <= 1e-4
    assert (run / "export" / "onnx-none" / "encoder.onnx").exists()
    assert not (run / "export" / "onnx-none" / "step.onnx").exists()
    kept = "tflite-int8-float-frontend-norm_in"
    artifacts = ("onnx-none", "tflite-none", "onnx-dynamic", "onnx-int8", "tflite-dynamic", kept)
    for name in artifacts:  # a CTC model's quality: its loss, WER and CER; no perplexity
        assert set(_manifest(run, name)["quality"]) == {"loss", "wer", "cer"}, name
        assert _manifest(run, name)["audio"]["min_samples"] == 1360, name  # 85 ms
    assert _manifest(run, kept)["keep_float"] == ["frontend", "norm_in"]
    model = (run / "export" / kept / "model.tflite").read_bytes()
    floats = float_compute(model, values_only=True)  # the front end and its norm, nothing else
    assert {n.split("/")[0] for op in floats for n in op.output_names} <= {"frontend", "norm_in"}
    assert {"LOG", "FULLY_CONNECTED"} <= {op.name for op in floats}
    # the front end feeds the float norm, so none of its tensors is quantized (its spectrum,
    # split into real and imaginary parts, once went through int8 on the way)
    quantized = [n for op in ops(model) if op.name == "QUANTIZE" for n in op.output_names]
    assert not [n for n in quantized if in_layers(n, ["frontend"])], quantized
    matmuls = [op for op in ops(model) if op.name == "FULLY_CONNECTED" and op not in floats]
    assert matmuls and all(op.inputs[0] == "INT8" for op in matmuls)
    result = runner.invoke(
        app,
        [
            *args,
            "--format",
            "tflite",
            "--quantize",
            "int8",
            "--keep-float",
            "front",
            "--out",
            str(tmp_path / "x"),
        ],
    )
    assert result.exit_code == 2 and "unknown-layer" in result.output, result.output
    assert "frontend" in result.output and "Traceback" not in result.output

    wav = data / "wavs" / "dev" / "000002.wav"
    want = _transcript([*base, "--run-dir", str(run), "--input", str(wav)])
    assert want
    for name in ("onnx-none", "tflite-none"):
        got = _transcript(["--artifact", str(run / "export" / name), "--input", str(wav)])
        assert got == want, name

    onnx = str(run / "export" / "onnx-none")
    result = runner.invoke(app, ["decode", "--artifact", onnx, "--input", str(tmp_path / "x.wav")])
    assert result.exit_code == 2 and "missing-audio" in result.output
    assert "Traceback" not in result.output
    fast = tmp_path / "fast.wav"
    write_wav(fast, read_wav(wav), sample_rate=44100)
    result = runner.invoke(app, ["decode", "--artifact", onnx, "--input", str(fast)])
    assert result.exit_code == 2 and "wrong-sample-rate" in result.output
    assert "44100 Hz" in result.output and "sox -D" in result.output
    result = runner.invoke(app, ["decode", "--artifact", onnx])  # no wav to hear
    assert result.exit_code == 2 and "--input" in result.output

    # a clip shorter than the front end's 85 ms: the same data error on the checkpoint and on
    # every artifact (each runtime failed its own way, exit 3; the checkpoint said nothing)
    short, just = tmp_path / "short.wav", tmp_path / "just.wav"
    write_wav(short, read_wav(wav)[:1000])
    write_wav(just, read_wav(wav)[:1360])
    checkpoint = [*base, "--run-dir", str(run)]
    for args in [checkpoint, *(["--artifact", str(run / "export" / a)] for a in artifacts)]:
        result = runner.invoke(app, ["decode", *args, "--input", str(short)])
        assert result.exit_code == 2 and "audio-too-short" in result.output, args
        assert "1,000 samples" in result.output and "1,360 samples (85 ms)" in result.output
    want = _transcript([*checkpoint, "--input", str(just)])
    for name in ("onnx-none", "tflite-none"):
        assert _transcript(["--artifact", str(run / "export" / name), "--input", str(just)]) == want


def test_eval_scores_an_exported_recogniser_as_it_scores_the_checkpoint(trained) -> None:
    """`seqc eval --artifact` on a speech artifact: WER and CER of the fp32 ONNX export (each
    utterance alone and unpadded, as deployed) on the test split are the checkpoint's, `--by`
    groups them, `--manifest` scores any manifest through it, and `scores.json` names the
    artifact it scored."""
    base, run, data, _ = trained
    onnx = _onnx_none(base, run)
    evaluate = ["eval", *base, "--run-dir", str(run), "--split", "test"]
    checkpoint = runner.invoke(app, evaluate)
    assert checkpoint.exit_code == 0, checkpoint.output
    artifact = runner.invoke(app, [*evaluate, "--artifact", str(onnx), "--by", "voice"])
    assert artifact.exit_code == 0, artifact.output
    figures = [line for line in checkpoint.stdout.splitlines() if line.startswith("test_")]
    wer = next(line for line in figures if line.startswith("test_wer: "))
    cer = next(line for line in figures if line.startswith("test_cer: "))
    assert wer in artifact.stdout and cer in artifact.stdout, (figures, artifact.stdout)
    assert "test by voice:" in artifact.stdout and "flite:slt" in artifact.stdout
    scores = json.loads((run / "eval" / "onnx-none-test" / "scores.json").read_text())
    assert scores["artifact"]["format"] == "onnx" and scores["artifact"]["quantize"] == "none"
    assert scores["utterances"] == TINY["test"] and set(scores["by"]["voice"]) == {"flite:slt"}
    manifest = [*evaluate, "--artifact", str(onnx), "--manifest", str(data / "test.jsonl")]
    own = runner.invoke(app, manifest)
    assert own.exit_code == 0, own.output
    assert wer in own.stdout
    # a manifest's transcripts have a folder of their own: the test split's are left as they were
    mine = json.loads((run / "eval" / "onnx-none-manifest-test" / "scores.json").read_text())
    assert mine["by"] == {} and scores["by"]
    again = json.loads((run / "eval" / "onnx-none-test" / "scores.json").read_text())
    assert again == scores


def test_decode_reads_a_wav_from_stdin_and_several_wavs_in_order(trained, tmp_path: Path) -> None:
    """`cat good.wav | seqc decode ... --input -` said "not UTF-8 text"; two --input flags
    transcribed only the last."""
    base, run, data, _ = trained
    checkpoint = ["decode", *base, "--run-dir", str(run)]
    one, two = data / "wavs" / "dev" / "000001.wav", data / "wavs" / "dev" / "000002.wav"
    want = [_transcript([*checkpoint[1:], "--input", str(w)]) for w in (one, two)]
    piped = runner.invoke(app, [*checkpoint, "--input", "-"], input=two.read_bytes())
    assert piped.exit_code == 0, piped.output
    assert piped.stdout.splitlines()[-1] == want[1]
    both = runner.invoke(app, [*checkpoint, "--input", str(one), "--input", str(two)])
    assert both.exit_code == 0, both.output
    assert both.stdout.splitlines()[-2:] == want  # a transcript per wav, in order
    renamed = tmp_path / "utterance.audio"  # a wav by another name is still a wav
    renamed.write_bytes(one.read_bytes())
    result = runner.invoke(app, [*checkpoint, "--input", str(renamed)])
    assert result.exit_code == 0 and result.stdout.splitlines()[-1] == want[0]
    text = tmp_path / "prompts.txt"
    text.write_text("seven\n")
    mixed = runner.invoke(app, [*checkpoint, "--input", str(one), "--input", str(text)])
    assert mixed.exit_code == 2 and "mixed-inputs" in mixed.output
    spoken = runner.invoke(app, [*checkpoint, "--input", str(text)])
    assert spoken.exit_code == 2 and "the input is text" in spoken.output
    twice = runner.invoke(app, [*checkpoint, "--input", "-", "--input", "-"], input=b"")
    assert twice.exit_code == 2 and "twice" in twice.output


def test_eval_scores_each_voice_and_a_manifest_of_your_own(trained, tmp_path: Path) -> None:
    """`seqc eval --by voice`: WER and CER per voice beside the overall figure, in the output
    and in scores.json, with every transcript written beside them; `--manifest FILE` scores
    any manifest of wavs (here two dev utterances, moved and given a field of their own)."""
    from seqc.run.scoring.wer import error_rates

    base, run, data, _ = trained
    args = ["eval", *base, "--run-dir", str(run), "--split", "dev"]
    result = runner.invoke(app, [*args, "--by", "voice", "--by", "form"])
    assert result.exit_code == 0, result.output
    assert "dev by voice:" in result.stdout and "dev by form:" in result.stdout
    (folder,) = (run / "eval").glob("*-dev")
    scores = json.loads((folder / "scores.json").read_text())
    hyps = (folder / "hypotheses.txt").read_text().splitlines()
    refs = (folder / "references.txt").read_text().splitlines()
    audio = (folder / "audio.txt").read_text().splitlines()
    assert len(hyps) == len(refs) == len(audio) == scores["utterances"] == TINY["dev"]
    assert f"dev_wer: {scores['wer']:.2f}" in result.stdout
    lines = [json.loads(x) for x in (data / "dev.jsonl").read_text().splitlines()]
    voice = {str(data / x["audio"]): x["voice"] for x in lines}
    for name, group in scores["by"]["voice"].items():
        rows = [i for i, a in enumerate(audio) if voice[str(Path(a).resolve())] == name]
        again = error_rates([hyps[i] for i in rows], [refs[i] for i in rows])
        assert group["utterances"] == len(rows) and group["wer"] == pytest.approx(again["wer"])
        assert f"  {name}" in result.stdout
    assert sum(g["words"] for g in scores["by"]["voice"].values()) == scores["words"]

    typo = runner.invoke(app, [*args, "--by", "voce"])
    assert typo.exit_code == 2 and "unknown-field" in typo.output and "voice" in typo.output
    assert "Traceback" not in typo.output

    mine = tmp_path / "mine"
    (mine / "clips").mkdir(parents=True)
    own = []
    for x in lines[:2]:
        (mine / "clips" / Path(x["audio"]).name).write_bytes((data / x["audio"]).read_bytes())
        own.append({"audio": f"clips/{Path(x['audio']).name}", "text": x["text"], "who": "me"})
    (mine / "m.jsonl").write_text("".join(json.dumps(x) + "\n" for x in own))
    base_eval = ["eval", *base, "--run-dir", str(run)]
    result = runner.invoke(app, [*base_eval, "--manifest", str(mine / "m.jsonl"), "--by", "who"])
    assert result.exit_code == 0, result.output
    assert "test_wer:" in result.stdout and "(2 utterances" in result.stdout
    assert "test by who:" in result.stdout
    (folder,) = (run / "eval").glob("*-manifest-m")  # not the test split's folder: its own
    assert json.loads((folder / "scores.json").read_text())["utterances"] == 2
    missing = runner.invoke(app, [*base_eval, "--manifest", str(mine / "gone.jsonl")])
    assert missing.exit_code == 2 and "no manifest at" in missing.output


def test_decode_writes_nbest_lists_of_a_manifest_with_its_transcripts(
    trained, tmp_path: Path
) -> None:
    base, run, data, _ = trained
    checkpoint = ["decode", *base, "--run-dir", str(run), "--manifest", str(data / "dev.jsonl")]
    best = runner.invoke(app, [*checkpoint, "--output", str(tmp_path / "best.txt")])
    assert best.exit_code == 0, best.output
    nbest = tmp_path / "dev.nbest.jsonl"
    result = runner.invoke(app, [*checkpoint, "--nbest", "3", "--output", str(nbest)])
    assert result.exit_code == 0, result.output
    lists = [json.loads(line) for line in nbest.read_text().splitlines()]
    manifest = [json.loads(line) for line in (data / "dev.jsonl").read_text().splitlines()]
    assert [n["reference"] for n in lists] == [m["text"] for m in manifest]
    for n, plain in zip(lists, (tmp_path / "best.txt").read_text().splitlines(), strict=True):
        scores = [h["score"] for h in n["hypotheses"]]
        assert 1 <= len(scores) <= 3 and scores == sorted(scores, reverse=True)
        assert len({h["text"] for h in n["hypotheses"]}) == len(scores)
        assert plain in {h["text"] for h in n["hypotheses"]}  # the 1-best is listed
    words = runner.invoke(app, [*checkpoint[:-2], "--nbest", "2"])  # no wavs to list
    assert words.exit_code == 2 and "--manifest" in words.output


def test_a_beam_that_names_an_lm_fuses_it(
    trained, tmp_path: Path, lm_runs, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """`decode = beam(lm = ...)` in the spec: every transcript of the task fuses that LM (here
    a run directory's checkpoint). At weight 0 and no bonus the ranking is the acoustic one, so
    the n-best lists are the plain beam's, texts and scores; a path that holds no LM is a
    located error. (The lists, not the plain 1-best: a fused search merges labellings that
    read the same text, as the n-best lists do, and this 4-step model's transcripts are mostly
    unknown tokens, several labellings to one text.)"""
    from tiny_specs import LM_SPEC, lm_corpus

    base, run, data, _ = trained
    folder = tmp_path_factory.mktemp("fusion-lm")
    lm_corpus(folder)
    common = ROOT / "examples" / "common" / "transformer.seq"
    (folder / "lm.seq").write_text(LM_SPEC.format(common=common.as_posix()))
    lm_run = lm_runs.copy(folder / "run")
    manifest = ["--manifest", str(data / "dev.jsonl"), "--nbest", "3"]
    plain = runner.invoke(app, ["decode", *base, "--run-dir", str(run), *manifest])
    assert plain.exit_code == 0, plain.output
    fused_beam = (
        f'asr_ctc.decode=beam(width = 8, lm = "{lm_run}", lm_weight = 0.0, length_bonus = 0.0)'
    )
    fused = runner.invoke(
        app, ["decode", *base, "--run-dir", str(run), *manifest, "--set", fused_beam]
    )
    assert fused.exit_code == 0, fused.output
    lists = [[json.loads(x) for x in r.stdout.splitlines()] for r in (plain, fused)]
    assert len(lists[0]) == len(lists[1]) == 4
    for a, b in zip(*lists, strict=True):
        assert [h["text"] for h in a["hypotheses"]] == [h["text"] for h in b["hypotheses"]]
        for x, y in zip(a["hypotheses"], b["hypotheses"], strict=True):
            assert abs(x["score"] - y["score"]) <= 1e-6 * abs(x["score"])
    missing = fused_beam.replace(str(lm_run), str(tmp_path / "nothing"))
    bad = runner.invoke(app, ["decode", *base, "--run-dir", str(run), *manifest, "--set", missing])
    assert (
        bad.exit_code != 0
        and "no language model at" in bad.output
        and "Traceback" not in bad.output
    )


def test_a_voice_warp_chooses_a_factor_per_voice_on_the_checkpoint_and_the_artifact(
    trained,
) -> None:
    """`decode = beam(..., warp = voice_warp(...))`: `seqc eval` prints each voice's factor
    and writes it to scores.json, for the checkpoint and for its ONNX export (each utterance
    run alone); `seqc decode` chooses a factor for the one wav it is given."""
    base, run, data, _ = trained
    onnx = _onnx_none(base, run)
    warp = "asr_ctc.decode = beam(width = 4, warp = voice_warp(factors = [0.9, 1.0, 1.1]))"
    evaluate = ["eval", *base, "--run-dir", str(run), "--split", "test", "--set", warp]
    for extra, folder in (([], None), (["--artifact", str(onnx)], "onnx-none-test")):
        result = runner.invoke(app, [*evaluate, *extra])
        assert result.exit_code == 0, result.output
        line = next(x for x in result.stdout.splitlines() if "voice warp: flite:slt" in x)
        assert line.endswith(f"(chosen on {TINY['test']} utterances)"), line
        where = run / "eval" / folder if folder else next((run / "eval").glob("*[0-9]-test"))
        scores = json.loads((where / "scores.json").read_text())
        chosen = scores["voice_warp"]["flite:slt"]
        assert chosen["factor"] in (0.9, 1.0, 1.1) and f"factor {chosen['factor']:g}" in line
        assert set(chosen["confidence"]) == {"0.9", "1", "1.1"}
        assert chosen["confidence"][f"{chosen['factor']:g}"] == max(chosen["confidence"].values())
    wav = data / "wavs" / "test" / "000001.wav"
    decode = ["decode", *base, "--run-dir", str(run), "--set", warp, "--input", str(wav)]
    result = runner.invoke(app, decode)
    assert result.exit_code == 0 and result.stdout.strip(), result.output


def test_nbest_lists_with_a_voice_warp_choose_as_eval_does(trained) -> None:
    """`nbest_ctc` (what `bench/lm_fusion.py` rescores) normalises each voice as `seqc eval`
    does: the same choices, the lists in split order with their references; and a warp whose
    only factor is 1 gives the lists of no warp."""
    from seqc.compiler.config import Beam, VoiceWarp
    from seqc.run.scoring.transcribe import nbest_ctc, transcribe_ctc
    from seqc.run.session import open_session
    from seqc.run.weights.restore import restore, run_backend

    base, run, _, _ = trained
    session = open_session(Path(base[0]), "asr.numbers.tiny", cache_dir=Path(base[-1]))
    restored = restore(session, run, run_backend(session, None))
    params = restored.state["params"]

    def logits(arrays: dict) -> object:
        return restored.model.logits(params, arrays)

    warp = VoiceWarp(factors=(0.9, 1.0, 1.1), by="voice", utterances=2)
    strategy = Beam(max_length=64, width=4, length_penalty=0.6, warp=warp)
    told: dict = {}
    _, refs, order = transcribe_ctc(logits, session.pipeline, "test", strategy, 0, told)
    listed: dict = {}
    found = nbest_ctc(logits, session.pipeline, "test", 4, 3, 0, None, warp, listed)
    assert [i for i, _, _ in found] == order and [r for *_, r in found] == refs
    assert all(
        h and [s for _, s in h] == sorted((s for _, s in h), reverse=True) for _, h, _ in found
    )
    assert listed == told and set(told) == {"flite:slt"} and told["flite:slt"].utterances == 2
    same = VoiceWarp(factors=(1.0,), by="voice", utterances=2)
    plain = nbest_ctc(logits, session.pipeline, "test", 4, 3)
    unwarped = nbest_ctc(logits, session.pipeline, "test", 4, 3, 0, None, same)
    for (i, a, _), (j, b, _) in zip(plain, unwarped, strict=True):
        assert i == j and a[0][1] == pytest.approx(b[0][1], abs=1e-3)
