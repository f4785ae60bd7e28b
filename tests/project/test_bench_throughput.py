"""The training-throughput benchmark's models, at a tiny size: each pair (seqc and plain JAX,
seqc-TF and Keras) builds and trains, and computes the same function (the timing itself is not
tested)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax")
pytest.importorskip("optax")

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import train_throughput as tt  # noqa: E402
from reference_lm import Config  # noqa: E402

TINY = Config(vocab=4000, d=32, layers=1, heads=2, ff=64)


@pytest.mark.filterwarnings("ignore:Some donated buffers were not usable")
def test_both_models_run_and_agree() -> None:
    # 32 tokens only, so each model's own random init moves its loss more than at full size;
    # the exact check (the reference on seqc's params) is inside `setup`.
    pair = tt.setup(TINY, batch=2, length=16, loss_rtol=0.1)
    losses = pair.losses
    assert math.isclose(losses["reference_on_seqc_params"], losses["seqc"], rel_tol=1e-4)
    assert math.isclose(losses["tight_jax_on_seqc_params"], losses["seqc"], rel_tol=1e-4)
    # Both start near the uniform distribution's loss (logits have unit variance at init).
    for name in ("seqc", "reference"):
        assert abs(losses[name] - math.log(TINY.vocab)) < 1.5, losses
    assert math.isfinite(tt.seqc_steps(pair, 2))
    assert math.isfinite(tt.reference_steps(pair, 2))
    assert math.isfinite(tt.tight_steps(pair, 2))
    # Both trained on the first batch: their loss on it fell.
    first = pair.batches[0]
    seqc_after = float(pair.seqc.eval_step(pair.seqc_state["params"], tt.Batch(first))["loss"])
    reference_after = float(pair.reference.loss(pair.reference_state["params"], first))
    assert seqc_after < losses["seqc"], (seqc_after, losses)
    assert reference_after < losses["reference"], (reference_after, losses)


def test_seqc_tf_and_keras_run_and_agree(tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    pytest.importorskip("keras")
    import tf_contenders as tfc

    c = tt.compile_spec(TINY, tmp_path)
    batches = tt.synthetic_batches(2, batch=2, length=16, vocab=TINY.vocab, seed=0)
    # The exact check (Keras on seqc-TF's params) is inside `setup_tf` too.
    pair = tfc.setup_tf(TINY, c.task, c.train, batches, jit_compile=False, loss_rtol=0.1)
    losses = pair.losses
    assert math.isclose(losses["keras_on_seqc_params"], losses["seqc_tf"], rel_tol=1e-4)
    for name in ("seqc_tf", "keras"):
        assert abs(losses[name] - math.log(TINY.vocab)) < 1.5, losses
    # One step each, on the first batch: the loss on it fell.
    assert math.isfinite(tfc.seqc_tf_steps(pair, 1))
    assert math.isfinite(tfc.keras_steps(pair, 1))
    assert tfc.seqc_tf_loss(pair) < losses["seqc_tf"], losses
    assert tfc.keras_loss(pair) < losses["keras"], losses


def test_spec_sizes_reach_the_graph(tmp_path: Path) -> None:
    _, graph = tt.build_seqc(TINY, tmp_path)
    assert graph.params["embed.table"].type.shape == (TINY.vocab, TINY.d)
    assert graph.params["blocks.0.mlp.w1.w"].type.shape == (TINY.d, TINY.ff)
    assert "out.w" not in graph.params  # tied to the embedding
    assert not any(op.kind == "dropout" for op in graph.ops)
    assert [op.kind for op in graph.ops].count("gelu") == TINY.layers
