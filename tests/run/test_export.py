"""`seqc export` and decoding from artifacts, end to end on small trained models.

A tiny character LM and a tiny encoder-decoder (it learns to reverse its source) are trained
for a few steps, then exported to every format and quantization. Each fp32 artifact must match
the trained model's logits on dev batches (the export refuses otherwise), quantized ones must
keep the dev perplexity close, and greedy decoding from the fp32 artifacts (onnxruntime,
LiteRT, SavedModel) must give the checkpoint's tokens exactly. Broken and mismatched artifacts
are clear errors.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from shared_runs import LmRuns
from tiny_specs import LM_SPEC, MT_SPEC, lm_corpus, mt_pairs
from typer.testing import CliRunner

from seqc.cli import app
from seqc.run.export.build import export_one
from seqc.run.export.context import prepare
from seqc.run.session import open_session
from seqc.run.weights.restore import checked_weights

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory: pytest.TempPathFactory, lm_runs: LmRuns) -> tuple[list[str], Path]:
    """The session's 20-step run of the tiny LM, copied: the tests export into it."""
    folder = tmp_path_factory.mktemp("lm")
    lm_corpus(folder)
    common = ROOT / "examples" / "common" / "transformer.seq"
    (folder / "lm.seq").write_text(LM_SPEC.format(common=common.as_posix()))
    base = [str(folder / "lm.seq"), "-e", "tiny", "--cache-dir", str(folder / "cache")]
    return base, lm_runs.copy(folder / "run")


@pytest.fixture(scope="module")
def mt_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Path]:
    folder = tmp_path_factory.mktemp("mt")
    mt_pairs(folder)
    common = ROOT / "examples" / "common" / "transformer.seq"
    (folder / "mt.seq").write_text(MT_SPEC.format(common=common.as_posix()))
    base = [str(folder / "mt.seq"), "-e", "mt", "--cache-dir", str(folder / "cache")]
    run = folder / "run"
    args = ["train", *base, "--run-dir", str(run), "--no-progress", "--backend", "tf"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return base, run


LSTM_MODEL = """model MT(vocab: int, d: int = 32) {{
  src_embed = Embedding(vocab, d)
  tgt_embed = Embedding(vocab, d)
  encoder = LSTM(d, d, bidirectional = true)
  bridge = Linear(2 * d, d)
  decoder = LSTM(d, d, layers = 2)
  attention = CrossAttention(d, 1)
  combine = Linear(d, d, activation = "tanh")
  out = Softmax(vocab, d)
  forward (src: int32[B, S], src_mask: bool[B, S], tgt: int32[B, T]) -> float32[B, T, vocab] {{
    memory = bridge(encoder(src_embed(src), mask = src_mask))
    h = decoder(tgt_embed(tgt))
    return out(combine(h + attention(h, memory, mask = src_mask)))
  }}
}}
"""


@pytest.fixture(scope="module")
def lstm_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Path]:
    """The LSTM-with-attention family: its decoder step carries recurrent state, not history."""
    folder = tmp_path_factory.mktemp("lstm")
    mt_pairs(folder)
    common = ROOT / "examples" / "common" / "transformer.seq"
    spec = MT_SPEC.format(common=common.as_posix())
    start = spec.index("model MT(")
    end = spec.index("task translate")
    spec = spec[:start] + LSTM_MODEL.format() + spec[end:]
    (folder / "mt.seq").write_text(spec.replace("steps = 60", "steps = 30"))
    base = [str(folder / "mt.seq"), "-e", "mt", "--cache-dir", str(folder / "cache")]
    run = folder / "run"
    result = runner.invoke(app, ["train", *base, "--run-dir", str(run), "--no-progress"])
    assert result.exit_code == 0, result.output
    return base, run


def _export(base: list[str], run: Path, *args: str) -> str:
    result = runner.invoke(app, ["export", *base, "--run-dir", str(run), *args])
    assert result.exit_code == 0, result.output
    return result.output


def _manifest(run: Path, name: str) -> dict:
    return json.loads((run / "export" / name / "manifest.json").read_text())


def _decoded(args: list[str], lines: str) -> list[str]:
    result = runner.invoke(app, ["decode", *args, "--input", "-"], input=lines)
    assert result.exit_code == 0, result.output
    return [
        line for line in result.output.splitlines() if not line.startswith(("decoding", "loaded"))
    ]


def test_lm_exports_pass_their_gates_and_decode_like_the_checkpoint(lm_run) -> None:
    base, run = lm_run
    output = _export(
        base,
        run,
        "--format",
        "onnx",
        "--format",
        "tflite",
        "--quantize",
        "none",
        "--quantize",
        "dynamic",
        "--quantize",
        "int8",
        "--sentences",
    )
    assert "onnx-int8" in output and "tflite-int8" in output
    # the artifacts only: the SavedModel the TFLite modes shared, and every work folder, gone
    assert sorted(p.name for p in (run / "export").iterdir()) == sorted(
        f"{f}-{q}" for f in ("onnx", "tflite") for q in ("none", "dynamic", "int8")
    )
    ref = _manifest(run, "onnx-none")["reference_quality"]["perplexity"]
    for name in ("onnx-none", "tflite-none"):
        m = _manifest(run, name)
        assert m["parity_max_abs_err"] <= 1e-4, name
        assert m["quality"]["perplexity"] == pytest.approx(ref, rel=1e-4)
    assert _manifest(run, "onnx-none")["reference_evaluator_err"] <= 1e-4
    import onnx

    props = {
        m.key: m.value
        for m in onnx.load(str(run / "export" / "onnx-none" / "step.onnx")).metadata_props
    }
    assert json.loads(props["seqc.manifest"])["parity_max_abs_err"] <= 1e-4
    assert "lm.seq" in json.loads(props["seqc.spec"])
    # the tokenizer beside the model, by hash (its bytes would outweigh a small int8 model)
    manifest = json.loads((run / "export" / "onnx-none" / "manifest.json").read_text())
    assert props["seqc.tokenizer_sha256"] == manifest["files"]["tokenizer"]
    # On this 20-step, 32-wide model: dynamic int8 within 1%, static ONNX QDQ and full-int8
    # TFLite (every activation and cache int8) within a few percent: bounds with some margin.
    bounds = {"onnx-dynamic": 0.03, "tflite-dynamic": 0.03, "onnx-int8": 0.1, "tflite-int8": 0.1}
    for name, bound in bounds.items():
        m = _manifest(run, name)
        assert m["quality"]["perplexity"] == pytest.approx(ref, rel=bound), name
    prompts = "abc\nd\nbcd efg\n"
    want = _decoded([*base, "--run-dir", str(run)], prompts)
    for name in ("onnx-none", "tflite-none"):
        assert _decoded(["--artifact", str(run / "export" / name)], prompts) == want, name
    # as a scorer of other tasks' hypotheses (rescoring, fusion), the artifacts score as the
    # checkpoint does, each sentence after the EOS a packed LM's lines follow
    from seqc.run.lm.language_model import LmSource, open_language_model
    from seqc.run.weights.restore import Source

    texts = ["abc abd", "cde", "efg def bcd"]
    spec, exp = Path(base[0]), base[2]
    checkpoint = open_language_model(
        LmSource(source=Source(spec=spec, experiment=exp, run_dir=run, cache_dir=Path(base[4])))
    )
    assert _manifest(run, "onnx-none")["packed"] is True
    for name in ("onnx-none", "tflite-none"):
        lm = open_language_model(LmSource(artifact=run / "export" / name))
        assert lm.start == checkpoint.start == lm.tokenizer.eos_id
        assert lm.sentences(texts) == pytest.approx(checkpoint.sentences(texts), abs=1e-3)
    # --sentences: ONNX carries the sentence scorer (whole sentences a call, what rescoring
    # runs), under the export's gate and scoring as its steps do; TFLite has none
    for quantize in ("none", "dynamic", "int8"):
        m = _manifest(run, f"onnx-{quantize}")
        assert "sequence.onnx" in m["files"] and m["step"]["sequence_inputs"] == {
            "ids": "inputs",
            "next": "targets",
        }
        assert m["sequence_parity"] <= (1e-4 if quantize == "none" else 0.5), quantize
    assert _manifest(run, "tflite-none")["step"]["sequence_inputs"] == {}
    assert "sequence_parity" not in _manifest(run, "tflite-none")
    whole = open_language_model(LmSource(artifact=run / "export" / "onnx-none"))
    steps = open_language_model(LmSource(artifact=run / "export" / "onnx-none"))
    assert whole.sequence is not None
    steps.sequence = None
    assert whole.sentences(texts) == pytest.approx(steps.sentences(texts), abs=1e-4)
    tflite = open_language_model(LmSource(artifact=run / "export" / "tflite-none"))
    assert tflite.sequence is None


def test_mt_exports_decode_translations_like_the_checkpoint(mt_run) -> None:
    base, run = mt_run
    output = _export(
        base,
        run,
        "--format",
        "onnx",
        "--format",
        "tflite",
        "--format",
        "savedmodel",
        "--bleu",
        "8",
    )
    assert "bleu" in output
    for name in ("onnx-none", "tflite-none", "savedmodel-none"):
        m = _manifest(run, name)
        assert m["parity_max_abs_err"] <= 1e-4, name
        assert m["quality"]["bleu"] == pytest.approx(m["reference_quality"]["bleu"], abs=1e-6)
    sources = "abcd\nhgf\nbad\ncafe\n"
    want = _decoded([*base, "--run-dir", str(run)], sources)
    assert any(want) and len(want) == 4  # one bare translation per source (not a terminal)
    for name in ("onnx-none", "tflite-none", "savedmodel-none"):
        got = _decoded(["--artifact", str(run / "export" / name)], sources)
        assert got == want, name


def test_broken_and_mismatched_artifacts_are_clear_errors(lm_run, mt_run) -> None:
    base, run = lm_run
    folder = run / "export" / "onnx-none"
    if not folder.exists():
        _export(base, run, "--format", "onnx")
    mt_base, _ = mt_run
    result = runner.invoke(
        app, ["decode", *mt_base, "--artifact", str(folder), "--input", "-"], input="x\n"
    )
    assert result.exit_code == 2 and "artifact-mismatch" in result.output
    step = folder / "step.onnx"
    data = bytearray(step.read_bytes())
    data[-10] ^= 0xFF
    step.write_bytes(bytes(data))
    result = runner.invoke(app, ["decode", "--artifact", str(folder), "--input", "-"], input="x\n")
    assert result.exit_code == 2 and "bad-artifact" in result.output
    assert "step.onnx" in result.output and "Traceback" not in result.output
    result = runner.invoke(app, ["decode", "--artifact", str(run / "nowhere")])
    assert result.exit_code == 2 and "no-artifact" in result.output
    bad = ["export", *base, "--run-dir", str(run), "--format", "tflite", "--quantize", "int4"]
    result = runner.invoke(app, bad)
    assert result.exit_code == 2 and "bad-quantize" in result.output
    # a translation model has no sentences of its own tokens to score
    result = runner.invoke(app, ["export", *mt_base, "--run-dir", str(run), "--sentences"])
    assert result.exit_code == 2 and "not-a-language-model" in result.output
    assert "task `translate`" in result.output or "not a language model" in result.output


def test_lstm_exports_decode_like_the_checkpoint(lstm_run) -> None:
    base, run = lstm_run
    _export(
        base,
        run,
        "--format",
        "onnx",
        "--format",
        "tflite",
        "--quantize",
        "none",
        "--quantize",
        "dynamic",
        "--bleu",
        "0",
    )
    for name in ("onnx-none", "tflite-none"):
        m = _manifest(run, name)
        assert m["parity_max_abs_err"] <= 1e-4, name
        assert {c[0][-1] for c in m["step"]["caches"].values()} == {32}  # recurrent state
    for name in ("onnx-dynamic", "tflite-dynamic"):
        m = _manifest(run, name)
        ref = m["reference_quality"]["perplexity"]
        assert m["quality"]["perplexity"] == pytest.approx(ref, rel=0.03), name
    sources = "abcd\nhgf\ncafe\n"
    want = _decoded([*base, "--run-dir", str(run)], sources)
    for name in ("onnx-none", "tflite-none"):
        assert _decoded(["--artifact", str(run / "export" / name)], sources) == want, name


def test_a_float_export_checks_one_real_step_without_drawing_the_calibration_set(
    lm_run, tmp_path: Path
) -> None:
    """The float artifact's check against onnx's reference evaluator needs one feed; drawing
    the int8 calibration set runs every dev batch through the step functions."""
    base, run = lm_run
    session = open_session(Path(base[0]), base[2], cache_dir=Path(base[4]))
    weights, params = checked_weights(session, run)
    ctx = prepare(session, params, weights)
    export_one(ctx, "onnx", "none", tmp_path / "onnx-none")
    assert ctx._calibration == {}  # what the float export drew
    manifest = json.loads((tmp_path / "onnx-none" / "manifest.json").read_text())
    assert manifest["reference_evaluator_err"] <= 1e-4
    # no sentence scorer unless asked (its file would hold the weights again)
    assert "sequence.onnx" not in manifest["files"] and manifest["step"]["sequence_inputs"] == {}
    probe = ctx.probe("step")
    assert sorted(probe) == sorted(ctx.sig.step_inputs)
    assert probe[ctx.sig.token_input].shape == (ctx.batches[0]["inputs"].shape[0], 1)
    # where the calibration set is drawn (an int8 export), the check reads one of its feeds
    drawn = ctx.calibration("step")
    assert any(ctx.probe("step") is f for f in drawn)
