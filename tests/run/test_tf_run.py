"""The run commands on the TF backend, and weights moving between backends.

Training on TF learns and resumes exactly; a checkpoint of either backend evaluates in the
other with the same figures; `seqc convert` round-trips weights; mismatched, corrupt and
wrong-backend checkpoints are clear errors naming the tensor, the shapes or the backend.

The tests that only read or break a trained TF run share one (`tf_run`, two steps, trained once
for the module) and take copies; those that read a JAX run take the session's (`lm_runs`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from shared_runs import LmRuns
from tiny_specs import LM_SPEC, lm_corpus
from typer.testing import CliRunner

from seqc.backends.weights import read_weights
from seqc.cli import app
from seqc.resolve.program import SEQC_PATH
from seqc.run.session import open_session
from seqc.run.train.loop import train

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.fixture
def lm(tmp_path: Path) -> Path:
    lm_corpus(tmp_path)
    common = ROOT / "examples" / "common" / "transformer.seq"
    spec = tmp_path / "lm.seq"
    spec.write_text(LM_SPEC.format(common=common.as_posix()))
    return spec


@pytest.fixture(scope="module")
def tf_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of `LM_SPEC` trained two steps on TF, once for the module: tests copy it (`_copy`),
    since most write into it. A run records its model and data by content, so a copy reads
    with each test's own spec."""
    folder = tmp_path_factory.mktemp("tf-run")
    lm_corpus(folder)
    spec = folder / "lm.seq"
    spec.write_text(LM_SPEC.format(common=(ROOT / "examples/common/transformer.seq").as_posix()))
    args = ["train", str(spec), "-e", "tiny", "--cache-dir", str(folder / "cache")]
    args += ["--run-dir", str(folder / "run"), "--no-progress", "--backend", "tf"]
    with pytest.MonkeyPatch.context() as mp:  # conftest's library root, for a module fixture
        mp.setenv(SEQC_PATH, str(folder.parent))
        result = runner.invoke(app, [*args, "--set", "train.steps=2"])
    assert result.exit_code == 0, result.output
    assert "backend: tf" in result.output
    return folder / "run"


def _copy(run: Path, dest: Path) -> Path:
    shutil.copytree(run, dest)
    return dest


def _base(lm: Path, tmp_path: Path) -> list[str]:
    return [str(lm), "-e", "tiny", "--cache-dir", str(tmp_path / "cache")]


def _figures(output: str) -> dict[str, float]:
    out = {}
    for line in output.splitlines():
        name, _, value = line.partition(":")
        if name.startswith("dev_") and value.strip():
            out[name] = float(value.split()[0])
    return out


def test_tf_training_learns_and_resumes_exactly(lm: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    straight = train(
        open_session(lm, "tiny", cache_dir=cache), tmp_path / "a", progress=False, backend="tf"
    )
    losses = [h["loss"] for h in straight.history]
    assert len(losses) == 20
    assert np.mean(losses[-5:]) < 0.8 * np.mean(losses[:3])  # it learns (see test_train)
    assert json.loads((tmp_path / "a" / "run.json").read_text())["backend"] == "tf"
    assert (tmp_path / "a" / "checkpoints" / "ckpt-20.index").is_file()

    half = open_session(lm, "tiny", ["train.steps=10"], cache_dir=cache)
    train(half, tmp_path / "b", progress=False, backend="tf")
    resumed = train(
        open_session(lm, "tiny", cache_dir=cache),
        tmp_path / "b",
        resume=True,
        progress=False,
        backend="tf",
    )
    want = {k: np.asarray(v) for k, v in straight.state["params"].items()}
    got = {k: np.asarray(v) for k, v in resumed.state["params"].items()}
    for name in want:
        np.testing.assert_array_equal(want[name], got[name], err_msg=name)
    curve = [
        json.loads(line)["loss"]
        for line in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()
        if json.loads(line)["split"] == "train"
    ]
    np.testing.assert_allclose(curve, losses, rtol=1e-6)


def test_checkpoints_evaluate_the_same_on_either_backend(
    lm: Path, tmp_path: Path, lm_runs: LmRuns, tf_run: Path
) -> None:
    base = _base(lm, tmp_path)
    lm_runs.copy(tmp_path / "jax", "train.steps=2")  # both trained two steps
    _copy(tf_run, tmp_path / "tf")
    figures = {}
    for written in ("jax", "tf"):
        for reader in ("jax", "tf"):
            args = ["eval", *base, "--run-dir", str(tmp_path / written), "--backend", reader]
            result = runner.invoke(app, args)
            assert result.exit_code == 0, result.output
            figures[written, reader] = _figures(result.output)
            if written != reader:
                assert "tensor by tensor by layer path" in " ".join(result.output.split())
    for written in ("jax", "tf"):
        a, b = figures[written, "jax"], figures[written, "tf"]
        assert a.keys() == b.keys() and "dev_perplexity" in a
        for k in a:
            assert b[k] == pytest.approx(a[k], rel=1e-4), k
    # a step is named the same way on both backends, though a TF checkpoint is files
    # (ckpt-2.index, ...), not a folder `2`
    for written in ("jax", "tf"):
        checkpoints = tmp_path / written / "checkpoints"
        for name in ("2", "ckpt-2"):
            args = ["eval", *base, "--checkpoint", str(checkpoints / name), "--backend", written]
            result = runner.invoke(app, args)
            assert result.exit_code == 0, result.output
            assert _figures(result.output) == figures[written, written]
            assert f"checkpoint: step 2 of {checkpoints}" in result.output  # what was scored
        args = ["eval", *base, "--checkpoint", str(checkpoints / "7"), "--backend", written]
        missing = runner.invoke(app, args)
        assert missing.exit_code == 2 and "no checkpoint of step 7" in missing.output
        assert "steps 2" in missing.output and "Traceback" not in missing.output


def test_convert_round_trips_weights_and_loads_with_checkpoint(
    lm: Path, tmp_path: Path, lm_runs: LmRuns
) -> None:
    base = _base(lm, tmp_path)
    run = lm_runs.copy(tmp_path / "run", "train.steps=2")
    result = runner.invoke(app, ["convert", str(run), "--to", "tf", "--out", str(tmp_path / "t")])
    assert result.exit_code == 0, result.output
    assert "from JAX to TensorFlow" in result.output
    back = tmp_path / "j"
    result = runner.invoke(app, ["convert", str(tmp_path / "t"), "--to", "jax", "--out", str(back)])
    assert result.exit_code == 0, result.output
    source, again = read_weights(run), read_weights(back)
    assert (again.backend, again.step, again.full_state) == ("jax", 2, False)
    assert source.params.keys() == again.params.keys()
    for name, v in source.params.items():
        np.testing.assert_array_equal(v, again.params[name], err_msg=name)
    evaluated = {}
    for where in (run, tmp_path / "t"):
        args = ["eval", *base, "--checkpoint", str(where), "--backend", "jax"]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        evaluated[where] = _figures(result.output)
    assert evaluated[run] == evaluated[tmp_path / "t"]
    result = runner.invoke(app, ["convert", str(run), "--to", "tf", "--out", str(tmp_path / "t")])
    assert result.exit_code == 2 and "exists" in result.output  # never overwrites


def test_wrong_shapes_name_the_tensor_and_both_shapes(
    lm: Path, tmp_path: Path, tf_run: Path
) -> None:
    base = _base(lm, tmp_path)
    run = str(_copy(tf_run, tmp_path / "run"))
    result = runner.invoke(app, ["eval", *base, "--run-dir", run, "--set", "lm.model.d=16"])
    assert result.exit_code == 2, result.output
    # the run's record names the model it trained: refused before a weight is read
    flat = " ".join(result.output.split())
    assert "run-mismatch" in flat and "lm.model.d: 32 when trained, 16 now" in flat
    # a run from before that record: the weights themselves are compared with the model
    info_path = Path(run) / "run.json"
    info = json.loads(info_path.read_text())
    del info["identity"]
    info_path.write_text(json.dumps(info))
    result = runner.invoke(app, ["eval", *base, "--run-dir", run, "--set", "lm.model.d=16"])
    assert result.exit_code == 2, result.output
    assert "checkpoint-mismatch" in result.output and "Traceback" not in result.output
    flat = " ".join(result.output.split())
    assert "TensorFlow checkpoint" in flat and "does not fit this model" in flat
    assert "tensor `blocks.0.attn.q.w` has shape [32, 32], the model expects [16, 16]" in flat


def test_broken_and_foreign_tf_checkpoints_are_clear_errors(
    lm: Path, tmp_path: Path, tf_run: Path
) -> None:
    base = _base(lm, tmp_path)
    run = _copy(tf_run, tmp_path / "run")
    resume = ["train", *base, "--run-dir", str(run), "--resume", "--backend", "jax"]
    result = runner.invoke(app, resume)
    assert result.exit_code == 2 and "backend-mismatch" in result.output
    assert "--backend tf" in result.output
    for f in (run / "checkpoints").glob("ckpt-2.*"):
        f.write_bytes(b"garbage")
    result = runner.invoke(app, ["eval", *base, "--run-dir", str(run)])
    assert result.exit_code == 2, result.output
    assert "bad-checkpoint" in result.output and "Traceback" not in result.output
    result = runner.invoke(app, ["eval", *base, "--backend", "torch", "--run-dir", str(run)])
    assert result.exit_code == 2 and "bad-backend" in result.output


def test_the_experiment_names_its_default_backend(lm: Path, tmp_path: Path) -> None:
    lm.write_text(lm.read_text().replace("tasks = [lm]", 'tasks = [lm]\n  backend = "tf"'))
    run = tmp_path / "run"
    args = ["train", *_base(lm, tmp_path), "--run-dir", str(run), "--no-progress"]
    result = runner.invoke(app, [*args, "--set", "train.steps=1"])
    assert result.exit_code == 0, result.output
    assert json.loads((run / "run.json").read_text())["backend"] == "tf"


def test_savedmodel_export_serves_the_trained_model(lm: Path, tmp_path: Path) -> None:
    import tensorflow as tf

    from seqc.backends.jax.train import JaxModel
    from seqc.backends.weights import match_params

    base = _base(lm, tmp_path)
    run = tmp_path / "run"
    args = ["train", *base, "--run-dir", str(run), "--no-progress", "--backend", "jax"]
    trained = runner.invoke(app, [*args, "--set", "train.steps=3"])
    assert trained.exit_code == 0, trained.output
    assert "backend: jax" in trained.output
    result = runner.invoke(app, ["export", *base, "--run-dir", str(run), "--format", "savedmodel"])
    assert result.exit_code == 0, result.output
    folder = run / "export" / "savedmodel-none"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["checkpoint"] == {"backend": "jax", "step": 3}
    assert manifest["parity_max_abs_err"] <= 1e-4
    path = folder / "saved_model"
    inner = json.loads((path / "assets.extra" / "seqc.json").read_text())
    assert inner["inputs"] == {"ids": {"dtype": "int32", "shape": ["B", "T"]}}
    assert set(inner["signatures"]) == {"serving_default", "logits", "log_probs", "step"}

    loaded = tf.saved_model.load(str(path))
    session = open_session(lm, "tiny", cache_dir=tmp_path / "cache")
    model = JaxModel(session.compiled, session.train_config)
    params = match_params(session.graph, read_weights(run))
    for b, t in ((1, 5), (3, 17)):  # any batch size and length
        ids = np.random.default_rng(b).integers(0, session.pipeline.vocab_size, (b, t), np.int32)
        want = np.asarray(model.logits(params, {"inputs": ids}), np.float64)
        logits = loaded.signatures["serving_default"](ids=tf.constant(ids))["logits"].numpy()
        np.testing.assert_allclose(logits, want, atol=1e-5)
        shifted = want - want.max(-1, keepdims=True)
        ref = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
        got = loaded.signatures["log_probs"](ids=tf.constant(ids))["log_probs"].numpy()
        np.testing.assert_allclose(got, ref, atol=1e-5)
    again = runner.invoke(app, ["export", *base, "--run-dir", str(run), "--format", "savedmodel"])
    assert again.exit_code == 2 and "exists" in again.output


def test_decoding_on_tf_matches_jax_token_for_token(
    lm: Path, tmp_path: Path, lm_runs: LmRuns
) -> None:
    base = _base(lm, tmp_path)
    run = str(lm_runs.copy(tmp_path / "run"))
    outputs = {}
    for backend in ("jax", "tf"):
        args = ["decode", *base, "--run-dir", run, "--input", "-", "--backend", backend]
        result = runner.invoke(app, args, input="abc\nde f\nb\n")
        assert result.exit_code == 0, result.output
        outputs[backend] = [line for line in result.output.splitlines() if "tensor by" not in line]
    assert len(outputs["jax"]) >= 3
    assert outputs["tf"][-3:] == outputs["jax"][-3:]
