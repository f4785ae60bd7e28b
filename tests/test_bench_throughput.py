"""The training-throughput benchmark's two models, at a tiny size: both build and train, and
they compute the same function (the timing itself is not tested)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax")
pytest.importorskip("optax")

BENCH = Path(__file__).resolve().parent.parent / "bench"
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
    # Both start near the uniform distribution's loss (logits have unit variance at init).
    for name in ("seqc", "reference"):
        assert abs(losses[name] - math.log(TINY.vocab)) < 1.5, losses
    assert math.isfinite(tt.seqc_steps(pair, 2))
    assert math.isfinite(tt.reference_steps(pair, 2))
    # Both trained on the first batch: their loss on it fell.
    first = pair.batches[0]
    seqc_after = float(pair.seqc.eval_step(pair.seqc_state["params"], tt.Batch(first))["loss"])
    reference_after = float(pair.reference.loss(pair.reference_state["params"], first))
    assert seqc_after < losses["seqc"], (seqc_after, losses)
    assert reference_after < losses["reference"], (reference_after, losses)


def test_spec_sizes_reach_the_graph(tmp_path: Path) -> None:
    _, graph = tt.build_seqc(TINY, tmp_path)
    assert graph.params["embed.table"].type.shape == (TINY.vocab, TINY.d)
    assert graph.params["blocks.0.mlp.w1.w"].type.shape == (TINY.d, TINY.ff)
    assert "out.w" not in graph.params  # tied to the embedding
    assert not any(op.kind == "dropout" for op in graph.ops)
    assert [op.kind for op in graph.ops].count("gelu") == TINY.layers
