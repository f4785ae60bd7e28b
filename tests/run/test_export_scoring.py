"""Scoring exports (`normalize = false`): an artifact that returns the raw score of a given next
token, one output row per token, for a self-normalised model. Its scores equal the trained
model's logits at the labels (ONNX and TFLite, tied and untied output layers), the manifest says
what the output means, the spec's `export { }` block asks for it, and the refusals are located.

One 6-step NCE run (`nce_run`, tied) serves every test that exports a tied NCE model; each copies
it when it writes beside it. The refusal of a cross-entropy model reads a copy of the session's
run of the tiny LM (`lm_runs`), trained with cross-entropy, as a test of its own would be.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from shared_runs import LmRuns
from tiny_specs import spec_with
from typer.testing import CliRunner

from seqc.backends import registry
from seqc.backends.api import sentence_scorer
from seqc.backends.jax.ops import run_graph
from seqc.backends.weights import match_params, read_weights
from seqc.cli import app
from seqc.compiler.scoring import SCORE_INPUT, scoring_graph, sequence_graph
from seqc.compiler.step_signature import StepSignature
from seqc.run.decoding.forced import sequence_feeds, teacher_forced
from seqc.run.session import open_session

runner = CliRunner()


def _trained(folder: Path, loss: str, tied: bool = True) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    spec = spec_with(folder, loss)
    if not tied:
        spec.write_text(
            spec.read_text().replace("Softmax(vocab, d, tie = embed)", "Softmax(vocab, d)")
        )
    base = [str(spec), "-e", "tiny", "--cache-dir", str(folder / "cache")]
    args = ["train", *base, "--run-dir", str(folder / "run"), "--no-progress"]
    result = runner.invoke(app, [*args, "--set", "train.steps=6"])
    assert result.exit_code == 0, result.output
    return base


def _base(folder: Path) -> list[str]:
    """The arguments naming the spec in `folder` and its cache, as `_trained` gives them."""
    return [str(folder / "lm.seq"), "-e", "tiny", "--cache-dir", str(folder / "cache")]


@pytest.fixture(scope="module")
def nce_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Path]:
    """The tied LM trained 6 steps by `nce(16)`: its arguments and its folder (the spec, the
    corpus, the cache and `run`)."""
    folder = tmp_path_factory.mktemp("nce")
    return _trained(folder, "nce(16)"), folder


def _copied(nce_run: tuple[list[str], Path], folder: Path) -> list[str]:
    """`nce_run`'s folder copied to `folder` (its spec as trained, without the export block a
    test below adds): the arguments naming the copy."""
    _, source = nce_run
    shutil.copytree(source, folder, ignore=shutil.ignore_patterns("from-spec"))
    spec_with(folder, "nce(16)")  # the spec as trained, whatever a test wrote into the original
    return _base(folder)


def test_the_scoring_graph_scores_the_labels_as_the_logits_do(tmp_path: Path) -> None:
    for tied in (True, False):
        spec = spec_with(tmp_path, "snis(16)")
        if not tied:
            spec.write_text(spec.read_text().replace(", tie = embed", ""))
        session = open_session(spec, "tiny", cache_dir=tmp_path / "cache")
        graph = session.graph
        model = registry.backend("jax").model(session.compiled, session.train_config)
        params = model.init(0)["params"]
        batch = next(session.pipeline.batches("dev"))
        logits = np.asarray(model.logits(params, batch.arrays))
        scored = scoring_graph(graph)
        feeds = {"ids": batch.arrays["inputs"], SCORE_INPUT: batch.arrays["targets"]}
        (scores,) = run_graph(scored, params, feeds)
        expected = np.take_along_axis(logits, batch.arrays["targets"][..., None], -1)[..., 0]
        np.testing.assert_allclose(np.asarray(scores), expected, atol=1e-5)
        vocab = logits.shape[-1]  # no value of the scoring graph runs over the vocabulary
        assert all(vocab not in op.type.shape for op in scored.ops if op.kind != "param")


def test_the_label_scores_graph_is_the_log_softmax_at_the_labels(tmp_path: Path) -> None:
    """A normalised LM's sentence scorer: log p of each label, normalised inside the graph."""
    spec = spec_with(tmp_path, "cross_entropy()")
    session = open_session(spec, "tiny", cache_dir=tmp_path / "cache")
    model = registry.backend("jax").model(session.compiled, session.train_config)
    params = model.init(0)["params"]
    batch = next(session.pipeline.batches("dev"))
    z = np.asarray(model.logits(params, batch.arrays), np.float64)
    log_p = z - z.max(-1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(-1, keepdims=True))
    labels = batch.arrays["targets"]
    whole = sequence_graph(session.graph, normalize=True)
    (scores,) = run_graph(whole, params, {"ids": batch.arrays["inputs"], SCORE_INPUT: labels})
    expected = np.take_along_axis(log_p, labels[..., None], -1)[..., 0]
    np.testing.assert_allclose(np.asarray(scores), expected, atol=1e-5)
    assert len(session.graph.ops) < len(whole.ops)  # the model's own graph is left as it was


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_scoring_artifacts_match_the_model_and_say_what_they_score(
    tmp_path: Path, tied: bool, nce_run: tuple[list[str], Path]
) -> None:
    """The tied model is `nce_run`'s (copied); the untied one is trained here."""
    folder = tmp_path / "model"
    base = _copied(nce_run, folder) if tied else _trained(folder, "nce(16)", tied)
    out = tmp_path / "out"
    args = ["export", *base, "--run-dir", str(folder / "run"), "--out", str(out)]
    formats = ["--format", "onnx", "--format", "tflite", "--no-normalize", "--sentences"]
    result = runner.invoke(app, [*args, *formats])
    assert result.exit_code == 0, result.output
    assert "raw_perplexity" in result.output and "onnx score" in result.output
    session = open_session(Path(base[0]), "tiny", cache_dir=Path(base[-1]))
    model = registry.backend("jax").model(session.compiled, session.train_config)
    weights = read_weights(folder / "run")
    batch = {
        k: np.asarray(v)[:4, :20] for k, v in next(session.pipeline.batches("dev")).arrays.items()
    }
    params = match_params(session.graph, weights)
    logits = np.asarray(model.logits(model.with_params(params)["params"], batch))
    expected = np.take_along_axis(logits, batch["targets"][..., None], -1)[..., 0]
    for fmt in ("onnx", "tflite"):
        folder = out / f"{fmt}-none-score"
        manifest = json.loads((folder / "manifest.json").read_text())
        assert manifest["scoring"]["normalize"] is False
        assert manifest["scoring"]["input"] == SCORE_INPUT and manifest["outputs"][0] == "score"
        assert manifest["inputs"][SCORE_INPUT][0] == ["B", 1]
        sig = StepSignature.from_json(manifest["step"])
        fns = registry.artifact_format(fmt).runtime(folder, sig)
        np.testing.assert_allclose(teacher_forced(fns, sig, batch), expected, atol=1e-4)
        scorer = sentence_scorer(fns)  # ONNX's sentence scorer: the raw scores, in one call
        if fmt == "onnx":
            assert scorer is not None and manifest["sequence_parity"] <= 1e-4
            np.testing.assert_allclose(scorer(sequence_feeds(sig, batch)), expected, atol=1e-4)
        else:
            assert scorer is None and sig.sequence_inputs == {}
    result = runner.invoke(
        app, ["decode", *base, "--artifact", str(out / "onnx-none-score"), "--input", "-"],
        input="abc\n",
    )  # fmt: skip
    assert result.exit_code == 2 and "scoring-artifact" in result.output


def test_the_spec_export_block_asks_for_a_scoring_artifact(
    nce_run: tuple[list[str], Path],
) -> None:
    base, folder = nce_run
    spec = Path(base[0])
    text = spec.read_text().replace(
        "    checkpoint_every = 10\n  }",
        "    checkpoint_every = 10\n  }\n  export {\n"
        "    onnx(normalize = false, sentences = true)\n  }",
    )
    spec.write_text(text)
    out = folder / "from-spec"
    args = ["export", *base, "--run-dir", str(folder / "run"), "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert [p.name for p in out.iterdir() if not p.name.startswith(".")] == ["onnx-none-score"]
    assert (out / "onnx-none-score" / "sequence.onnx").is_file()  # sentences = true


def test_refusals_are_located(
    tmp_path: Path, nce_run: tuple[list[str], Path], lm_runs: LmRuns
) -> None:
    spec_with(tmp_path, "cross_entropy()")  # the loss the session's LM was trained with
    lm_runs.copy(tmp_path / "run")
    base = _base(tmp_path)
    out = tmp_path / "out"
    args = ["export", *base, "--run-dir", str(tmp_path / "run"), "--out", str(out)]
    result = runner.invoke(app, [*args, "--no-normalize"])
    assert result.exit_code == 2, result.output
    assert "not-self-normalised" in result.output and "lm.seq:" in result.output
    assert "loss = cross_entropy()" in result.output  # the line, shown
    assert not out.exists() or not any(out.iterdir())
    nce_base, folder = nce_run
    args = ["export", *nce_base, "--run-dir", str(folder / "run"), "--out", str(out)]
    result = runner.invoke(app, [*args, "--format", "savedmodel", "--no-normalize"])
    assert result.exit_code == 2 and "bad-normalize" in result.output
    # a sentence scorer: ONNX's, and a language model's
    result = runner.invoke(app, [*args, "--format", "tflite", "--sentences"])
    assert result.exit_code == 2 and "bad-sentences" in result.output


def test_seqc_serve_scores_text_with_the_raw_scores(
    tmp_path: Path, nce_run: tuple[list[str], Path]
) -> None:
    """A scoring artifact behind `seqc serve` only scores: a text's score is the sum of the
    raw scores of its tokens after BOS and of its EOS, as the trained model gives them."""
    import asyncio

    import httpx

    from seqc.serve.app import build_app
    from seqc.serve.models import load_model
    from seqc.serve.server import Server

    base, folder = nce_run
    out = tmp_path / "out"
    args = ["export", *base, "--run-dir", str(folder / "run"), "--out", str(out)]
    result = runner.invoke(app, [*args, "--format", "onnx", "--no-normalize"])
    assert result.exit_code == 0, result.output
    served = load_model(out / "onnx-none-score", "lm")
    assert served.actions == ("score",)
    session = open_session(Path(base[0]), "tiny", cache_dir=Path(base[-1]))
    model = registry.backend("jax").model(session.compiled, session.train_config)
    params = match_params(session.graph, read_weights(folder / "run"))
    tok = session.pipeline.tokenizer
    texts = ["the cat", "a dog sat"]
    want = []
    for text in texts:
        ids = [*tok.encode(text), tok.eos_id]
        batch = {"inputs": np.asarray([[tok.bos_id, *ids[:-1]]], np.int32)}
        z = np.asarray(model.logits(model.with_params(params)["params"], batch))[0]
        want.append(float(sum(z[i, t] for i, t in enumerate(ids))))

    async def main() -> None:
        server = Server({"lm": served})
        transport = httpx.ASGITransport(app=build_app(server))
        await server.start()
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://s") as c:
                r = await c.post("/v1/models/lm/score", json={"text": texts})
                assert r.json()["scores"] == pytest.approx(want, abs=1e-3), r.text
                r = await c.post("/v1/models/lm/generate", json={"text": texts})
                assert r.status_code == 400 and r.json()["code"] == "wrong-route"
                meta = (await c.get("/v2/models/lm")).json()
                assert meta["outputs"] == [{"name": "score", "datatype": "FP32", "shape": [-1]}]
        finally:
            await server.stop()

    asyncio.run(main())
