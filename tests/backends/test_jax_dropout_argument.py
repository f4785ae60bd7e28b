"""Dropout rates are an argument of the JAX training step, not constants of its program: two
models that differ only in dropout compile the same step (so a sweep's trials share it through
the compilation cache, `seqc.run.sweep.compile_cache`), and the step computes exactly what the
rate as a constant computes."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest

from seqc.backends.jax.train import JaxModel, Noise
from seqc.compiler.compile import compile_task
from seqc.data.batch import Batch
from seqc.resolve.experiment import resolve
from seqc.resolve.program import load_program

SPEC = """\
seqc 1
input data { train = text("t.txt"); tokenizer = chars() }
model LM(vocab: int, d: int = 16, dropout: float = 0.1) {
  embed = Embedding(vocab, d)
  drop = Dropout(dropout)
  mlp = FeedForward(d, 32, dropout = dropout)
  out = Softmax(vocab, d)
  forward (ids: int32[B, T]) -> float32[B, T, vocab] {
    x = drop(embed(ids))
    return out(x + mlp(x))
  }
}
task lm {
  input = data
  model = LM(vocab = 8)
}
experiment low {
  tasks = [lm]
  train { steps = 3; optimizer = adam(lr = 0.01) }
}
experiment high extends low {
  lm.model.dropout = 0.4
}
"""


def _model(tmp_path: Path, experiment: str) -> JaxModel:
    spec = tmp_path / "main.seq"
    spec.write_text(SPEC)
    program = load_program(spec)
    resolved = resolve(program, experiment)
    compiled = compile_task(program, resolved, resolved.tasks[0])
    return JaxModel(compiled, compiled.train)


def _arrays() -> dict[str, np.ndarray]:
    ids = np.random.default_rng(0).integers(1, 8, (4, 10)).astype(np.int32)
    return {"inputs": ids, "targets": np.roll(ids, -1, 1), "mask": np.ones((4, 10), bool)}


@pytest.mark.filterwarnings("ignore:Some donated buffers were not usable")
def test_models_differing_in_dropout_compile_one_step(tmp_path: Path) -> None:
    low, high = _model(tmp_path, "low"), _model(tmp_path, "high")
    assert low.dropout_rates == (0.1,) and high.dropout_rates == (0.4,)
    texts = []
    for model in (low, high):
        state = model.init(seed=0)
        args = (state, _arrays(), np.float32(0.01), model._keeps)
        texts.append(model._train_step.lower(*args).as_text())
    assert texts[0] == texts[1]
    # the same program, fed each model's rate: the steps differ
    (a, _), (b, _) = (m.train_step(m.init(seed=0), _batch(), 0.01) for m in (low, high))
    assert not np.allclose(a["params"]["embed.table"], b["params"]["embed.table"])


def test_the_argument_computes_what_the_constant_did(tmp_path: Path) -> None:
    model = _model(tmp_path, "high")
    params = model.init(seed=0)["params"]
    key = jax.random.PRNGKey(5)
    given = model.forward(params, _arrays(), Noise(key, model._keeps), training=True)
    constant = model.forward(params, _arrays(), key, training=True)  # no keeps: the attrs'
    np.testing.assert_array_equal(np.asarray(given), np.asarray(constant))
    half = Noise(key, np.float32([0.5]))
    other = model.forward(params, _arrays(), half, training=True)
    assert not np.allclose(np.asarray(other), np.asarray(constant))


def _batch() -> Batch:
    return Batch("lm", _arrays(), bucket=10, num_examples=4)
