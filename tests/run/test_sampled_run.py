"""Sampled losses through a run: training on both backends, an exact resume (the candidates are
a function of seed and step), the log-uniform order warning, and what `seqc eval` reports for a
self-normalised model. A model without a Softmax: `test_backend_errors.py`.
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest
from tiny_specs import spec_with
from typer.testing import CliRunner

from seqc.cli import app
from seqc.compiler.lower.sampled import CANDIDATES, CANDIDATES_LOG_E, LABELS_LOG_E
from seqc.data.batch import Batch
from seqc.data.proposal import uniform
from seqc.run.session import open_session
from seqc.run.train.candidates import Candidates
from seqc.run.train.loop import train
from seqc.run.train.stepper import TaskSteps

runner = CliRunner()


def test_candidates_ride_with_the_rows_and_repeat_for_a_step() -> None:
    arrays = {"targets": np.arange(12, dtype=np.int32).reshape(3, 4) % 7}
    batch = Batch("lm", arrays | {"mask": arrays["targets"] > 0}, 4, 3)
    cands = Candidates(uniform(7), 5, seed=3, labels="targets")
    a, b, c = cands.attach(batch, 10), cands.attach(batch, 10), cands.attach(batch, 11)
    assert a.arrays[CANDIDATES].shape == (3, 5) and a.arrays[CANDIDATES].dtype == np.int32
    assert (a.arrays[CANDIDATES] == a.arrays[CANDIDATES][0]).all()  # one set for the batch
    np.testing.assert_array_equal(a.arrays[CANDIDATES], b.arrays[CANDIDATES])
    assert not np.array_equal(a.arrays[CANDIDATES], c.arrays[CANDIDATES])
    np.testing.assert_allclose(a.arrays[CANDIDATES_LOG_E], np.log(5 / 7), rtol=1e-6)
    assert a.arrays[LABELS_LOG_E].shape == (3, 4)


def _params(state: dict) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(state["params"])]


def test_a_sampled_run_trains_and_resumes_exactly(tmp_path: Path) -> None:
    spec = spec_with(tmp_path, "snis(16)")
    cache = tmp_path / "cache"
    straight = train(open_session(spec, "tiny", cache_dir=cache), tmp_path / "a", progress=False)
    losses = [h["loss"] for h in straight.history]
    assert np.isfinite(losses).all() and np.mean(losses[-5:]) < np.mean(losses[:3])
    half = open_session(spec, "tiny", ["train.steps=10"], cache_dir=cache)
    train(half, tmp_path / "b", progress=False)
    resumed = train(
        open_session(spec, "tiny", cache_dir=cache), tmp_path / "b", resume=True, progress=False
    )
    for x, y in zip(_params(straight.state), _params(resumed.state), strict=True):
        np.testing.assert_allclose(x, y, atol=1e-6)


@pytest.mark.parametrize("backend", ["jax", "tf"])
def test_train_and_eval_report_self_normalisation(tmp_path: Path, backend: str) -> None:
    spec = spec_with(tmp_path, "nce(16, proposal = log_uniform())")
    run = ["--run-dir", str(tmp_path / "run"), "--cache-dir", str(tmp_path / "cache")]
    args = ["-e", "tiny", "--backend", backend, "--set", "train.steps=8", *run]
    result = runner.invoke(app, ["train", str(spec), *args])
    assert result.exit_code == 0, result.output
    # chars are numbered by first sight, not frequency: log_uniform is a poor proposal here
    assert "warning: proposal = log_uniform assumes ids sorted" in result.output
    assert "dev perplexity of the raw scores exp(s)" in result.output
    result = runner.invoke(app, ["eval", str(spec), *args])
    assert result.exit_code == 0, result.output
    figures = dict(
        line.split(": ") for line in result.output.splitlines() if line.startswith("dev_")
    )
    assert {"dev_perplexity", "dev_log_z_mean", "dev_log_z_std", "dev_raw_perplexity"} <= set(
        figures
    )
    assert float(figures["dev_log_z_std"]) >= 0.0


class _Workers:
    """A model whose steps would run elsewhere: what it was told to read there."""

    def __init__(self) -> None:
        self.told: list[object] = []

    def read_on_workers(self, records: object) -> None:
        self.told.append(records)


@pytest.mark.parametrize(("loss", "told"), [("snis(16)", False), ("cross_entropy()", True)])
def test_a_sampled_loss_keeps_a_parameter_server_batch_on_the_chief(
    tmp_path: Path, loss: str, told: bool
) -> None:
    """A sampled step's candidates and its labels' expected counts come from the batch's ids on
    the chief, so a parameter-server model is not told to read batches on its workers."""
    session = open_session(spec_with(tmp_path, loss), "tiny", cache_dir=tmp_path / "cache")
    model = _Workers()
    TaskSteps(session, model, 0, lambda text: None)  # type: ignore[arg-type]
    assert bool(model.told) == told
