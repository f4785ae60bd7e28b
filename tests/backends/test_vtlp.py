"""Vocal tract length perturbation (`vtlp`, `LogMelFilterbank(vtlp = [low, high])`): the
identity outside training on every backend and absent from exports; in training, JAX and TF
warp alike and as a float64 reference does, a warp of 1 is the identity, a peak moves by the
factor, and each row draws its own factor, reproducibly from the seed."""

from __future__ import annotations

import numpy as np
import pytest
from lowering_helpers import build, f32
from test_primitives_speech import jax_train, tf_train

from seqc.backends.jax.ops import Ctx as JaxCtx
from seqc.backends.jax.ops import run_graph as jax_run_graph
from seqc.backends.onnx.emit import check, to_onnx
from seqc.backends.onnx.runtime import OnnxRunner
from seqc.backends.tf.ops import Ctx as TfCtx
from seqc.backends.tf.ops import run_graph as tf_run_graph
from seqc.compiler.graph import Graph, GraphBuilder
from seqc.spec.errors import CheckError

BINS = 65  # a 128-point DFT's: the Nyquist bin is 64


def warp_graph(low: float, high: float) -> Graph:
    g = GraphBuilder()
    g.layer = "warp"
    x = g.input("x", f32("B", "T", BINS))
    g.graph.outputs = [g.vtlp(x, low, high)]
    return g.graph


def reference(x: np.ndarray, factor: float, boundary: float = 0.6) -> np.ndarray:
    """Bin f of the output reads the input at the source the piecewise-linear warp gives,
    interpolating linearly, in float64."""
    nyquist = BINS - 1
    knee = boundary * nyquist * min(factor, 1.0) / factor
    out = np.empty_like(x, dtype=np.float64)
    for f in range(BINS):
        if f <= factor * knee:
            source = f / factor
        else:
            source = nyquist - (nyquist - f) * (nyquist - knee) / (nyquist - factor * knee)
        lo = min(int(np.floor(source)), nyquist - 1)
        out[..., f] = x[..., lo] + (source - lo) * (x[..., lo + 1] - x[..., lo])
    return out


def spectra(rows: int, seed: int = 0) -> np.ndarray:
    return np.abs(np.random.default_rng(seed).standard_normal((rows, 6, BINS))).astype(np.float32)


def test_outside_training_it_is_the_identity_and_exports_nothing() -> None:
    graph, x = warp_graph(0.9, 1.1), spectra(3)
    np.testing.assert_array_equal(np.asarray(jax_run_graph(graph, {}, {"x": x}, JaxCtx())[0]), x)
    np.testing.assert_array_equal(tf_run_graph(graph, {}, {"x": x}, TfCtx())[0].numpy(), x)
    model = check(to_onnx(graph, {}))
    assert [n.op_type for n in model.graph.node] == ["Identity"]  # the output's
    np.testing.assert_array_equal(OnnxRunner(model).run({"x": x})[0], x)
    g = GraphBuilder()
    x_in = g.input("x", f32("B", "T", BINS))
    assert g.vtlp(x_in, 1.0, 1.0) == x_in  # no warp: no op
    with pytest.raises(CheckError, match="range"):
        g.vtlp(x_in, 1.1, 0.9)


@pytest.mark.parametrize("factor", [0.9, 1.0, 1.13])
def test_a_fixed_factor_warps_alike_on_both_backends(factor: float) -> None:
    graph, x = warp_graph(factor, factor), spectra(2, seed=1)
    want = reference(x.astype(np.float64), factor)
    # a source position near bin 64 is float32's to about 4e-6 of a bin: so is its blend
    for got in (jax_train(graph, x, 0), tf_train(graph, x, 0)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(x).max())
    if factor == 1.0:
        np.testing.assert_allclose(want, x, atol=1e-6)  # a warp of 1 is the identity


def test_a_peak_moves_by_the_factor_below_the_boundary() -> None:
    x = np.zeros((1, 1, BINS), np.float32)
    x[..., 20] = 1.0
    for factor in (0.9, 1.1):
        y = jax_train(warp_graph(factor, factor), x, 0)[0, 0]
        centre = float(np.sum(np.arange(BINS) * y) / np.sum(y))
        assert centre == pytest.approx(20 * factor, abs=0.3), factor
        assert y[-1] == 0.0 and y[0] == 0.0


def test_each_row_draws_its_factor_from_the_seed() -> None:
    graph, x = warp_graph(0.85, 1.15), np.repeat(spectra(1, seed=2), 4, axis=0)
    for train in (jax_train, tf_train):
        y = train(graph, x, 3)
        assert not np.allclose(y[0], y[1]) and not np.allclose(y[2], y[3])
        np.testing.assert_array_equal(train(graph, x, 3), y)
        assert not np.allclose(train(graph, x, 4), y)


def test_the_filterbank_declares_it_and_checks_it() -> None:
    plain = build("LogMelFilterbank", [f32("B", "N")], sample_rate=16000, bins=40)
    warped = build("LogMelFilterbank", [f32("B", "N")], sample_rate=16000, bins=40, vtlp=[0.9, 1.1])
    assert [op.kind for op in warped.ops if op.kind == "vtlp"] == ["vtlp"]
    assert not [op for op in plain.ops if op.kind == "vtlp"]
    exported = [n.op_type for n in to_onnx(warped, {}).graph.node]
    assert exported == [n.op_type for n in to_onnx(plain, {}).graph.node]  # export unchanged
