"""LSTM and GRU lowerings, run on JAX, against step-by-step float64 numpy recurrences.

Why: a recurrence is lowered to a `scan` whose body holds only the recurrent product, with a
padding mask that freezes the state over padded steps (`seqc.compiler.lower.recurrent`). The
mask is what makes a backward direction over right-padded sequences start at each sequence's
real end; gotten wrong, the backward half of every bidirectional encoder reads padding first.
So the backward direction here must equal the reference run on the unpadded sequence, reversed.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from lowering_helpers import (
    assert_close,
    build,
    directional_check,
    f32,
    gru_ref,
    lstm_ref,
    p64,
    params_of,
    randn,
    run,
)

from seqc.backends.jax.ops import Ctx, run_graph
from seqc.compiler.graph import TensorType

RNG = np.random.default_rng
LENGTHS = (6, 4, 1)
T = 6
MASK = np.arange(T)[None, :] < np.array(LENGTHS)[:, None]  # right padding


def _ref(cell: str, x: np.ndarray, p: dict[str, np.ndarray], name: str) -> np.ndarray:
    w, b, u = p[f"{name}.w"], p[f"{name}.b"], p[f"{name}.u"]
    if cell == "LSTM":
        return lstm_ref(x, w, b, u)
    return gru_ref(x, w, b, u, p[f"{name}.bu"])


def _stack_ref(
    cell: str, x: np.ndarray, p: dict[str, np.ndarray], layers: int, bidirectional: bool
) -> np.ndarray:
    """One unpadded sequence x [L, d_in] through the stack: [L, H] or [L, 2H]."""
    for layer in range(layers):
        outs = [_ref(cell, x, p, f"l.l{layer}.fw")]
        if bidirectional:
            outs.append(_ref(cell, x[::-1], p, f"l.l{layer}.bw")[::-1])
        x = np.concatenate(outs, axis=-1)
    return x


@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_unidirectional_single_layer(cell: str) -> None:
    d_in, hidden = 3, 4
    g = build(cell, [f32("B", "T", d_in)], d_in=d_in, d_hidden=hidden)
    params = params_of(g)
    p = p64(params)
    x = randn(RNG(1), 2, T, d_in)
    out = run(g, params, {"x0": x})
    assert out.shape == (2, T, hidden)
    for i in range(2):
        assert_close(out[i], _ref(cell, x[i].astype(np.float64), p, "l.l0.fw"))


@pytest.mark.parametrize(("cell", "layers"), [("LSTM", 1), ("GRU", 1), ("LSTM", 2)])
def test_bidirectional_with_right_padding(cell: str, layers: int) -> None:
    """Each row's real steps equal the reference on that row alone, unpadded; the backward
    direction is the reference on the reversed sequence, reversed back."""
    d_in, hidden = 3, 4
    g = build(
        cell,
        [f32("B", "T", d_in)],
        {"mask": TensorType("bool", ("B", "T"))},
        d_in=d_in,
        d_hidden=hidden,
        bidirectional=True,
        layers=layers,
    )
    params = params_of(g)
    p = p64(params)
    x = randn(RNG(2), len(LENGTHS), T, d_in)
    x[~MASK] = 7.0  # padding that would show if it leaked in
    out = run(g, params, {"x0": x, "mask": MASK})
    assert out.shape == (len(LENGTHS), T, 2 * hidden)
    for i, n in enumerate(LENGTHS):
        want = _stack_ref(cell, x[i, :n].astype(np.float64), p, layers, bidirectional=True)
        assert_close(out[i, :n], want)
    # the forward half alone, for the first layer, is the unmasked forward run
    if layers == 1:
        g_uni = build(cell, [f32("B", "T", d_in)], d_in=d_in, d_hidden=hidden)
        fw_params = {k: v for k, v in params.items() if ".fw." in k}
        uni = run(g_uni, fw_params, {"x0": x})
        assert_close(out[0, :, :hidden], uni[0])


def test_lstm_gradient() -> None:
    """jax.grad through the scan against central finite differences, in float64."""
    d_in, hidden = 2, 3
    g = build(
        "LSTM",
        [f32("B", "T", d_in)],
        {"mask": TensorType("bool", ("B", "T"))},
        d_in=d_in,
        d_hidden=hidden,
        bidirectional=True,
    )
    params = {k: v.astype(np.float64) for k, v in params_of(g).items()}
    x = RNG(3).standard_normal((len(LENGTHS), T, d_in))
    r = RNG(4).standard_normal((len(LENGTHS), T, 2 * hidden))

    def f(p: dict, xs: jax.Array) -> jax.Array:
        out = run_graph(g, p, {"x0": xs, "mask": MASK}, Ctx(compute_dtype=jnp.float64))[0]
        assert out.dtype == jnp.float64
        return jnp.sum(out * r)

    grads = directional_check(f, (params, x), RNG(5), eps=1e-5, rtol=1e-6)
    # padded inputs get no gradient: they never reach the output
    assert np.all(np.asarray(grads[1])[~MASK] == 0.0)
