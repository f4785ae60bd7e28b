"""`adam(lazy_rows = true)`: which params update by rows, that a lazy step equals the dense
Adam step on the rows it touched and leaves the others alone (JAX and TF), that both backends
take the same lazy steps, and the located refusals where it is not implemented.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import jax
import numpy as np
import pytest
from tiny_specs import spec_with
from typer.testing import CliRunner

from seqc.backends.jax.train import JaxModel
from seqc.cli import app
from seqc.compiler.lazy_rows import row_sparse
from seqc.compiler.lower.sampled import CANDIDATES
from seqc.data.batch import Batch
from seqc.run.session import Session, open_session
from seqc.run.train.candidates import candidates_for
from seqc.run.train.loop import train
from seqc.spec.errors import CheckError

LAZY = "train.optimizer.lazy_rows=true"
VOCAB = "lm.model.vocab=64"  # more rows than the chars and 16 candidates can touch


def _spec(folder: Path, loss: str, tied: bool = True, dropout: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    spec = spec_with(folder, loss)
    text = spec.read_text()
    if not tied:
        text = text.replace("Softmax(vocab, d, tie = embed)", "Softmax(vocab, d)")
    if not dropout:
        text = text.replace("dropout = 0.1", "dropout = 0.0")
    spec.write_text(text)
    return spec


def _session(spec: Path, *overrides: str) -> Session:
    return open_session(spec, "tiny", [VOCAB, *overrides], cache_dir=spec.parent / "cache")


def _tables(session: Session) -> dict[str, int]:
    task = session.compiled
    return {n: s.axis for n, s in row_sparse([task.training_graph, task.train_criterion]).items()}


def test_the_tables_only_gathers_read_update_by_rows(tmp_path: Path) -> None:
    tied = _session(_spec(tmp_path / "a", "snis(16)"))
    assert _tables(tied) == {"embed.table": 0, "out.b": 0}
    untied = _session(_spec(tmp_path / "b", "snis(16)", tied=False))
    assert _tables(untied) == {"embed.table": 0, "out.w": 1, "out.b": 0}  # w is [d, vocab]
    full = _session(_spec(tmp_path / "c", "cross_entropy()", tied=False))
    assert _tables(full) == {"embed.table": 0}  # the full softmax reads out.w by a matmul
    tied_full = _session(_spec(tmp_path / "d", "cross_entropy()"))
    assert _tables(tied_full) == {}  # the tied table is also the output matmul's


def _batches(session: Session, n: int) -> tuple[list[Batch], dict[str, np.ndarray]]:
    cands = candidates_for(session.compiled, session.pipeline, 0)
    assert cands is not None
    raw = itertools.islice(session.pipeline.batches("train"), n)
    return [cands.attach(b, i) for i, b in enumerate(raw)], cands.initial(session.compiled)


def _touched(batch, table: str, tied: bool) -> np.ndarray:
    """The rows of `table` a step on `batch` gathers: the criterion's reads the targets' and
    candidates' rows of the output layer, the embedding reads the inputs' (one table if tied)."""
    arrays = batch.arrays
    output = [arrays["targets"].ravel(), arrays[CANDIDATES][0]]
    ids = {"embed.table": [arrays["inputs"].ravel(), *(output if tied else [])]}
    return np.unique(np.concatenate(ids.get(table, output)))


def _adam_state(state: dict) -> tuple[dict, dict]:
    """mu and nu of either optimizer's state."""
    opt = state["opt_state"]
    if isinstance(opt, dict):
        return opt["mu"], opt["nu"]
    adam = next(s for s in jax.tree.leaves(opt, is_leaf=lambda s: hasattr(s, "mu")))
    return adam.mu, adam.nu


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_a_lazy_step_is_the_dense_step_on_the_touched_rows(tmp_path: Path, tied: bool) -> None:
    spec = _spec(tmp_path, "nce(16, proposal = uniform())", tied=tied, dropout=False)
    dense_s, lazy_s = _session(spec), _session(spec, LAZY)
    (first, second), given = _batches(lazy_s, 2)
    dense = JaxModel(dense_s.compiled, dense_s.train_config)
    lazy = JaxModel(lazy_s.compiled, lazy_s.train_config)
    assert set(lazy.lazy) == set(_tables(lazy_s))
    d, z = dense.init(0, given), lazy.init(0, given)
    d, _ = dense.train_step(d, first, 1e-2)
    z, _ = lazy.train_step(z, first, 1e-2)
    before = {k: np.asarray(v) for k, v in z["params"].items()}
    before_mu = {k: np.asarray(v) for k, v in _adam_state(z)[0].items()}
    d, md = dense.train_step(d, second, 1e-2)
    z, mz = lazy.train_step(z, second, 1e-2)
    np.testing.assert_allclose(float(mz["loss"]), float(md["loss"]), rtol=1e-6)
    np.testing.assert_allclose(float(mz["grad_norm"]), float(md["grad_norm"]), rtol=1e-5)
    (d_mu, d_nu), (z_mu, z_nu) = _adam_state(d), _adam_state(z)
    for name, axis in _tables(lazy_s).items():
        rows = _touched(second, name, tied)
        other = np.setdiff1d(np.arange(64), rows)
        assert len(other) > 10, "the test needs rows the step does not touch"
        for x, y in ((d["params"], z["params"]), (d_mu, z_mu), (d_nu, z_nu)):
            a, b = np.asarray(x[name]), np.asarray(y[name])
            np.testing.assert_allclose(
                np.take(b, rows, axis), np.take(a, rows, axis), rtol=1e-5, atol=1e-7
            )
        # untouched rows keep their params and moments; the dense step moved them (momentum)
        kept = np.take(np.asarray(z["params"][name]), other, axis)
        np.testing.assert_array_equal(kept, np.take(before[name], other, axis))
        np.testing.assert_array_equal(
            np.take(np.asarray(z_mu[name]), other, axis), np.take(before_mu[name], other, axis)
        )
        earlier = np.setdiff1d(_touched(first, name, tied), rows)  # moved by momentum alone
        if name != "embed.table" or tied:
            assert len(earlier) > 0
        changed = np.take(np.asarray(d["params"][name]), earlier, axis) != np.take(
            before[name], earlier, axis
        )
        changed = np.moveaxis(changed, axis, 0)
        assert all(row.any() for row in changed)
    for name in set(dense_s.compiled.graph.params) - set(_tables(lazy_s)):
        if name.endswith("attn.k.b"):  # no gradient at all: Adam amplifies roundoff
            continue
        np.testing.assert_allclose(
            np.asarray(z["params"][name]), np.asarray(d["params"][name]), atol=1e-6
        )


def test_tf_takes_the_same_lazy_steps_as_jax(tmp_path: Path) -> None:
    from seqc.backends.tf.train import TfModel

    spec = _spec(tmp_path, "snis(16)", tied=False, dropout=False)  # a [d, vocab] table too
    session = _session(spec, LAZY, "train.optimizer.weight_decay=0.01", "train.clip_norm=0.5")
    batches, given = _batches(session, 3)
    jx = JaxModel(session.compiled, session.train_config)
    tfm = TfModel(session.compiled, session.train_config)
    assert set(tfm.lazy) == {"embed.table", "out.w", "out.b"}
    a, b = jx.init(0, given), tfm.init(0, given)
    for batch in batches:
        a, ma = jx.train_step(a, batch, 1e-2)
        b, mb = tfm.train_step(b, batch, 1e-2)
        np.testing.assert_allclose(float(mb["loss"]), float(ma["loss"]), rtol=1e-5)
        np.testing.assert_allclose(float(mb["grad_norm"]), float(ma["grad_norm"]), rtol=1e-5)
    for name in ("embed.table", "out.w", "out.b", "norm.scale"):
        np.testing.assert_allclose(
            b["params"][name].numpy(), np.asarray(a["params"][name]), atol=1e-5
        )
        np.testing.assert_allclose(
            b["opt"].slots["nu"][name].numpy(), np.asarray(a["opt_state"]["nu"][name]), atol=1e-7
        )


def test_lazy_rows_are_refused_where_not_implemented(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "snis(16)")
    session = _session(spec, LAZY, "distribution.mesh={data: 2}")
    with pytest.raises(CheckError) as e:
        train(session, tmp_path / "run", progress=False)
    assert e.value.code == "not-implemented"
    # at the `--set` that turned lazy rows on (the second: VOCAB is the first), a note at the mesh
    span = e.value.span
    assert span is not None and (span.file, span.line, span.col) == ("<command line>", 2, 7)
    assert [(n.span.file, n.span.line) for n in e.value.notes] == [("<command line>", 3)]
    assert "a mesh of devices" in str(e.value)


def test_train_says_which_params_update_by_rows(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "sampled_softmax(16)")
    args = ["-e", "tiny", "--set", LAZY, "--set", "train.steps=4", "--no-dev-eval"]
    for backend in ("jax", "tf"):  # the lazy optimizer's state checkpoints and resumes
        run = ["--run-dir", str(tmp_path / backend), "--cache-dir", str(tmp_path / "cache")]
        first = [*args, *run, "--backend", backend, "--set", "train.checkpoint_every=2"]
        result = CliRunner().invoke(app, ["train", str(spec), *first])
        assert result.exit_code == 0, result.output
        assert "lazy rows: embed.table (3 gathers), out.b (2 gathers)" in result.output
        again = ["train", str(spec), *first, "--set", "train.steps=6", "--resume"]
        result = CliRunner().invoke(app, again)
        assert result.exit_code == 0, result.output
        assert "resumed from step 4" in result.output
