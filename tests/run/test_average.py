"""`seqc average RUN --last N`: the mean of a run's newest checkpoints, as a checkpoint that eval,
decode and export load with --checkpoint, in the format of its sources, outside `checkpoints/`.

One tiny JAX run is trained for the module (checkpoints at steps 2, 4, 6 and 8: it keeps the
newest 4, `train.keep_checkpoints`; the newest 3 are averaged); TF checkpoints are the same
weights written in TF's format, which is what `average` reads and writes (training on TF as
well would only add its time). The refusals run on weights-only checkpoints written directly,
which is also how a checkpoint gets an integer tensor or another model's shapes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import Result
from tiny_specs import checkpointed_lm
from typer.testing import CliRunner

from seqc.backends import registry
from seqc.backends.api import Weights
from seqc.backends.weights import read_weights
from seqc.cli import app

runner = CliRunner()
STEPS = [4, 6, 8]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the spec, a JAX run directory with checkpoints at `STEPS`)."""
    library = tmp_path_factory.getbasetemp()
    spec, run = checkpointed_lm(tmp_path_factory.mktemp("avg"), library, keep=4)
    assert sorted(int(p.name) for p in (run / "checkpoints").iterdir()) == [2, *STEPS]
    return spec, run


def _base(spec: Path) -> list[str]:
    return [str(spec), "-e", "tiny", "--cache-dir", str(spec.parent / "cache")]


def _average(*args: str) -> Result:
    return runner.invoke(app, ["average", *args])


def _mean(source: Path, steps: list[int]) -> dict[str, np.ndarray]:
    """The numpy mean of the checkpoints' params, read through seqc's own loader."""
    each = [read_weights(source, s).params for s in steps]
    return {
        k: np.mean([w[k].astype(np.float64) for w in each], axis=0).astype(v.dtype)
        for k, v in each[0].items()
    }


def _assert_params(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert got.keys() == want.keys()
    for name, value in want.items():
        assert got[name].dtype == value.dtype, name
        np.testing.assert_allclose(got[name], value, rtol=1e-6, atol=1e-9, err_msg=name)


def _listing(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


def test_the_average_is_the_mean_of_the_newest_checkpoints_and_evaluates(
    trained: tuple[Path, Path],
) -> None:
    spec, run = trained
    before = _listing(run / "checkpoints")
    result = _average(str(run), "--last", "3")
    assert result.exit_code == 0, result.output
    averaged = run / "averaged" / "last-3-step-8"
    assert f"averaged steps 4, 6, 8 (3 JAX checkpoints, 20 tensors): {averaged}" in result.output
    weights = read_weights(averaged)
    assert (weights.backend, weights.step, weights.full_state) == ("jax", 8, False)
    _assert_params(weights.params, _mean(run, STEPS))
    record = json.loads((averaged / "averaged.json").read_text())
    assert record["steps"] == STEPS and record["backend"] == "jax"
    assert _listing(run / "checkpoints") == before  # training's own checkpoints untouched
    assert not list((run / "averaged").glob(".*"))  # no partial folder left behind

    result = runner.invoke(app, ["eval", *_base(spec), "--checkpoint", str(averaged)])
    assert result.exit_code == 0, result.output
    assert "dev_perplexity" in result.output

    again = _average(str(run / "checkpoints"), "--last", "3")  # the same average: refused
    assert again.exit_code == 2 and "[exists]" in again.output, again.output


def test_out_and_fewer_checkpoints_take_the_newest(
    trained: tuple[Path, Path], tmp_path: Path
) -> None:
    _, run = trained
    target = tmp_path / "two"
    result = _average(str(run), "--last", "2", "--out", str(target))
    assert result.exit_code == 0, result.output
    assert "averaged steps 6, 8 " in result.output
    _assert_params(read_weights(target).params, _mean(run, [6, 8]))
    result = _average(str(run), "--last", "1", "--out", str(tmp_path / "one"))
    assert result.exit_code == 0, result.output
    newest = read_weights(run, 8).params
    for name, value in read_weights(tmp_path / "one").params.items():
        np.testing.assert_array_equal(value, newest[name], err_msg=name)


def test_tf_checkpoints_average_into_a_tf_checkpoint(
    trained: tuple[Path, Path], tmp_path: Path
) -> None:
    spec, run = trained
    tf_run = tmp_path / "tf-run"
    for step in STEPS:  # each into a folder of its own (TF's manager keeps one), then together
        one = tmp_path / f"tf-{step}"
        registry.backend("tf").write_weights(read_weights(run, step), one)
        (tf_run / "checkpoints").mkdir(parents=True, exist_ok=True)
        for f in one.glob(f"ckpt-{step}.*"):
            f.rename(tf_run / "checkpoints" / f.name)
    result = _average(str(tf_run), "--last", "3")
    assert result.exit_code == 0, result.output
    averaged = tf_run / "averaged" / "last-3-step-8"
    assert "3 TensorFlow checkpoints" in result.output
    assert (averaged / "ckpt-8.index").is_file()
    weights = read_weights(averaged)
    assert (weights.backend, weights.step) == ("tf", 8)
    _assert_params(weights.params, _mean(run, STEPS))
    result = runner.invoke(app, ["eval", *_base(spec), "--checkpoint", str(averaged)])
    assert result.exit_code == 0, result.output
    assert "dev_perplexity" in result.output


# ---------------------------------------------------------------------------- exact arithmetic


def _weights_only_run(folder: Path, by_step: dict[int, dict[str, np.ndarray]]) -> Path:
    """A run directory whose checkpoints hold these params (JAX weights-only checkpoints)."""
    jax_backend = registry.backend("jax")
    for step, params in by_step.items():
        jax_backend.write_weights(
            Weights("jax", step, params, folder, False), folder / "checkpoints"
        )
    return folder


def _params(scale: float, ids: list[int] | None = None) -> dict[str, np.ndarray]:
    out = {
        "w": np.full((2, 3), scale, np.float32),
        "h": np.asarray([scale, -scale], np.float16),
    }
    if ids is not None:
        out["ids"] = np.asarray(ids, np.int32)
    return out


def test_floats_average_in_float64_and_integers_must_agree(tmp_path: Path) -> None:
    big = [1e8, 1.0, -1e8]  # float32 sums lose the 1 (1e8 + 1 == 1e8); float64 keeps it
    run = _weights_only_run(
        tmp_path / "run",
        {
            s: _params(scale, [3, 4]) | {"big": np.float32([b])}
            for s, scale, b in zip((1, 2, 3), (1.0, 2.0, 4.0), big, strict=True)
        },
    )
    result = _average(str(run), "--last", "3")
    assert result.exit_code == 0, result.output
    got = read_weights(run / "averaged" / "last-3-step-3").params
    np.testing.assert_array_equal(got["w"], np.full((2, 3), 7 / 3, np.float32))
    assert got["h"].dtype == np.float16 and got["h"][0] == np.float16(7 / 3)
    np.testing.assert_array_equal(got["ids"], [3, 4])
    assert got["big"].dtype == np.float32 and got["big"][0] == np.float32(1 / 3)

    differ = _weights_only_run(
        tmp_path / "differ", {1: _params(1.0, [3, 4]), 2: _params(2.0, [3, 5])}
    )
    _refused(
        _average(str(differ), "--last", "2"), "cannot-average", "tensor `ids`", "steps 1 and 2"
    )


# ---------------------------------------------------------------------------- refusals


def _refused(result: Result, code: str, *says: str) -> None:
    assert result.exit_code == 2, result.output
    flat = " ".join(result.output.split())
    assert f"[{code}]" in flat and "Traceback" not in result.output, result.output
    for text in says:
        assert text in flat, (text, flat)


def test_refusals_name_the_problem(tmp_path: Path) -> None:
    run = _weights_only_run(tmp_path / "run", {s: _params(float(s)) for s in (1, 2, 3)})
    _refused(_average(str(tmp_path / "nowhere"), "--last", "2"), "no-checkpoint", "nowhere")
    _refused(_average(str(run), "--last", "0"), "bad-count", "at least 1")
    _refused(
        _average(str(run), "--last", "5"),
        "too-few-checkpoints",
        "holds 3 (steps 1, 2, 3)",
        "--last 3",
    )
    inside = run / "checkpoints" / "99"
    _refused(_average(str(run), "--last", "2", "--out", str(inside)), "bad-out")
    assert not inside.exists()
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "x").write_text("x")
    _refused(_average(str(run), "--last", "2", "--out", str(taken)), "exists", str(taken))


def test_another_models_checkpoint_is_named(tmp_path: Path) -> None:
    other = {"w": np.zeros((3, 3), np.float32), "h": np.zeros(2, np.float16)}
    run = _weights_only_run(tmp_path / "run", {1: _params(1.0), 2: other, 3: _params(3.0)})
    _refused(
        _average(str(run), "--last", "3"),
        "checkpoint-mismatch",
        "checkpoints 1 and 2",
        "tensor `w` is float32[2, 3] in step 1, float32[3, 3] in step 2",
    )
    extra = _weights_only_run(
        tmp_path / "extra", {1: _params(1.0), 2: _params(2.0) | {"b": np.zeros(1, np.float32)}}
    )
    _refused(
        _average(str(extra), "--last", "2"), "checkpoint-mismatch", "tensor `b` is in step 2 only"
    )
    assert not (tmp_path / "run" / "averaged").exists()


def test_a_damaged_checkpoint_is_named_by_its_path(tmp_path: Path) -> None:
    run = _weights_only_run(tmp_path / "run", {s: _params(float(s)) for s in (1, 2, 3)})
    step = run / "checkpoints" / "2"
    damaged = max(
        (p for p in step.rglob("*") if p.is_file() and p.name != "seqc.sha256"),
        key=lambda p: p.stat().st_size,
    )
    damaged.write_bytes(b"garbage")
    _refused(
        _average(str(run), "--last", "3"), "bad-checkpoint", f"checkpoint 2 at {step.resolve()}"
    )
    result = _average(str(run), "--last", "1")  # the newer one alone still averages
    assert result.exit_code == 0, result.output
