"""Each built-in layer's lowering, run on JAX, against an independent float64 numpy reference.

Why: a layer is lowered once, in the compiler, to primitives that every backend implements
(`seqc.compiler.graph`); a wrong lowering or a wrong JAX primitive is wrong everywhere at once
and silently so: a model still trains, only worse. So each layer kind is checked here against the
formula it claims, with the same params (`init_params`, biases and gains perturbed so they count),
to float32 precision. Also: gradients against finite differences, a tiny LM whose loss falls,
the cost model's counts, and that shape errors point at the user's line.

Recurrent layers are in `test_lowering_recurrent.py`.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from lowering_helpers import (
    ACT,
    assert_close,
    build,
    directional_check,
    f32,
    layer_args,
    p64,
    params_of,
    randn,
    run,
    softmax,
)

from seqc.backends.jax.ops import Ctx, run_graph
from seqc.backends.jax.train import JaxModel
from seqc.compiler import cost
from seqc.compiler.compile import compile_task
from seqc.compiler.graph import GraphBuilder, TensorType
from seqc.compiler.lower import LOWERINGS
from seqc.compiler.lower.call import LayerCall
from seqc.data.batch import Batch
from seqc.resolve.experiment import resolve
from seqc.resolve.program import load_program
from seqc.run.train.schedule import learning_rate
from seqc.spec.errors import CheckError

ROOT = Path(__file__).resolve().parents[2]
RNG = np.random.default_rng


# ---------------------------------------------------------------------------- embeddings


@pytest.mark.parametrize(
    ("scale_output", "padding_id"), [(False, None), (True, None), (True, 0), (False, 3)]
)
def test_embedding(scale_output: bool, padding_id: int | None) -> None:
    vocab, d = 7, 6
    g = build(
        "Embedding",
        [TensorType("int32", ("B", "T"))],
        vocab=vocab,
        d=d,
        scale_output=scale_output,
        padding_id=padding_id,
    )
    params = params_of(g)
    ids = np.array([[0, 1, 2, 3, 6], [3, 3, 5, 0, 4]], np.int32)
    out = run(g, params, {"x0": ids})
    table = p64(params)["l.table"]
    want = table[ids]
    if padding_id is not None:
        want = want * (ids != padding_id)[..., None]
        assert np.all(out[ids == padding_id] == 0.0)
    if scale_output:
        want = want * math.sqrt(d)
    assert_close(out, want)


def test_embedding_padding_row_gets_no_gradient() -> None:
    g = build("Embedding", [TensorType("int32", ("B", "T"))], vocab=5, d=4, padding_id=0)
    params = {k: jnp.asarray(v) for k, v in params_of(g).items()}
    ids = jnp.array([[0, 1, 2, 0]], jnp.int32)

    def f(p: dict) -> jax.Array:
        return jnp.sum(run_graph(g, p, {"x0": ids}, Ctx())[0] ** 2)

    grad = np.asarray(jax.jit(jax.grad(f))(params)["l.table"])
    assert np.all(grad[0] == 0.0)
    assert np.all(grad[1] != 0.0) and np.all(grad[3:] == 0.0)  # ids 3, 4 unused


def sinusoid_direct(length: int, d: int, lo: float, hi: float) -> np.ndarray:
    """The Vaswani signal from its definition: timescale_i = lo * (hi / lo) ** (i / (half - 1)),
    the first half sin(t / timescale_i), the second half cos(t / timescale_i)."""
    half = d // 2
    out = np.zeros((length, d))
    for t in range(length):
        for i in range(half):
            timescale = lo * (hi / lo) ** (i / (half - 1))
            out[t, i] = math.sin(t / timescale)
            out[t, half + i] = math.cos(t / timescale)
    return out


@pytest.mark.parametrize(("lo", "hi"), [(1.0, 10000.0), (2.0, 500.0)])
def test_sinusoidal_position(lo: float, hi: float) -> None:
    d, length = 16, 40
    g = build("SinusoidalPosition", [f32("B", "T", d)], d=d, min_timescale=lo, max_timescale=hi)
    assert not g.params
    x = randn(RNG(1), 2, length, d)
    out = run(g, {}, {"x0": x})
    signal = sinusoid_direct(length, d, lo, hi)
    assert_close(out, x.astype(np.float64) + signal)
    s = run(g, {}, {"x0": np.zeros((1, length, d), np.float32)})[0]
    t = np.arange(length)
    # the shortest wavelength is `lo` (first sin column), the longest `hi` (last sin column)
    assert_close(s[:, 0], np.sin(t / lo))
    assert_close(s[:, d // 2 - 1], np.sin(t / hi))
    assert_close(s[:, d // 2], np.cos(t / lo))
    assert_close(s[0], np.r_[np.zeros(d // 2), np.ones(d // 2)])  # position 0


def test_sinusoidal_position_in_bfloat16() -> None:
    """Regression: the signal was computed in the compute dtype, so under bfloat16 positions
    above 256 rounded to even numbers (300 and 301 got one encoding) and the float32 signal
    promoted the whole model back to float32. Now: a float64 table, gathered as bfloat16."""
    d, length = 8, 300
    g = build("SinusoidalPosition", [f32("B", "T", d)], d=d)
    x = jnp.zeros((1, length, d), jnp.bfloat16)
    out = run_graph(g, {}, {"x0": x}, Ctx(compute_dtype=jnp.bfloat16))[0]
    signal = sinusoid_direct(length, d, 1.0, 10000.0)
    np.testing.assert_allclose(np.asarray(out, np.float64)[0], signal, rtol=0, atol=4e-3)
    assert out.dtype == jnp.bfloat16


def test_sinusoidal_position_longer_than_its_table() -> None:
    with pytest.raises(CheckError) as err:
        build("SinusoidalPosition", [f32(1, 20, 4)], d=4, max_length=16)
    assert err.value.code == "shape-mismatch"


def test_bfloat16_compute_stays_bfloat16() -> None:
    """Regression: float constants (the attention scale, sqrt(d)) were float32 arrays, which
    promoted bfloat16 activations to float32 from the first constant on."""
    d = 8
    g = build("SelfAttention", [f32("B", "T", d)], d=d, heads=2, causal=True)
    params = params_of(g)
    x = randn(RNG(40), 2, 5, d)
    ctx = Ctx(compute_dtype=jnp.bfloat16)
    jaxpr = jax.make_jaxpr(lambda p, v: run_graph(g, p, {"x0": v}, ctx))(
        params, x.astype(jnp.bfloat16)
    )
    dots = [e for e in jaxpr.eqns if e.primitive.name == "dot_general"]
    assert len(dots) == 6  # q, k, v, scores, context, output
    assert all(e.outvars[0].aval.dtype == jnp.bfloat16 for e in dots)
    out = run_graph(g, params, {"x0": x.astype(jnp.bfloat16)}, ctx)[0]
    want = attention_ref(x.astype(np.float64), x, p64(params), 2, None, causal=True)
    assert_close(np.asarray(out, np.float64), want, rtol=5e-2)


def test_learned_position() -> None:
    d, max_length, length = 4, 10, 6
    g = build("LearnedPosition", [f32("B", "T", d)], max_length=max_length, d=d)
    params = params_of(g)
    x = randn(RNG(2), 3, length, d)
    out = run(g, params, {"x0": x})
    assert_close(out, x + p64(params)["l.table"][:length][None])


# ---------------------------------------------------------------------------- dense


@pytest.mark.parametrize("activation", ["none", "relu", "gelu", "silu", "tanh", "sigmoid"])
def test_linear(activation: str) -> None:
    g = build("Linear", [f32("B", "T", 5)], d_in=5, d_out=3, activation=activation)
    params = params_of(g)
    x = randn(RNG(3), 2, 4, 5, scale=2.0)
    p = p64(params)
    want = ACT[activation](x @ p["l.linear.w"] + p["l.linear.b"])
    assert_close(run(g, params, {"x0": x}), want)


def test_linear_without_bias_and_activation_layer() -> None:
    g = build("Linear", [f32("B", "T", 5)], d_in=5, d_out=3, bias=False)
    assert set(g.params) == {"l.linear.w"}
    params = params_of(g)
    x = randn(RNG(4), 2, 4, 5)
    assert_close(run(g, params, {"x0": x}), x @ p64(params)["l.linear.w"])
    g = build("Activation", [f32("B", "T", 5)], fn="gelu")
    assert_close(run(g, {}, {"x0": x}), ACT["gelu"](x.astype(np.float64)))


@pytest.mark.parametrize(
    ("activation", "gated"),
    [("relu", False), ("gelu", False), ("silu", False), ("gelu", True), ("silu", True)],
)
def test_feed_forward(activation: str, gated: bool) -> None:
    d, ff = 6, 10
    g = build("FeedForward", [f32("B", "T", d)], d=d, ff=ff, activation=activation, gated=gated)
    params = params_of(g)
    p = p64(params)
    x = randn(RNG(5), 2, 3, d, scale=2.0)
    h = ACT[activation](x @ p["l.w1.w"] + p["l.w1.b"])
    if gated:
        h = h * (x @ p["l.wg.w"] + p["l.wg.b"])
    assert_close(run(g, params, {"x0": x}), h @ p["l.w2.w"] + p["l.w2.b"])


def test_gelu_is_the_exact_erf_form() -> None:
    """At x = 1 the erf form is 0.841345; the tanh approximation gives 0.841192."""
    g = build("Activation", [f32("B", "T", 1)], fn="gelu")
    out = run(g, {}, {"x0": np.ones((1, 1, 1), np.float32)})
    assert abs(out.item() - 0.5 * (1 + math.erf(1 / math.sqrt(2)))) < 1e-6


@pytest.mark.parametrize(
    ("kind", "scale", "bias"),
    [("LayerNorm", True, True), ("LayerNorm", False, False), ("RMSNorm", True, True)],
)
def test_norms(kind: str, scale: bool, bias: bool) -> None:
    d, eps = 8, 1e-3
    args = {"scale": scale} | ({"bias": bias} if kind == "LayerNorm" else {})
    g = build(kind, [f32("B", "T", d)], d=d, eps=eps, **args)
    params = params_of(g)
    p = p64(params)
    x = randn(RNG(6), 2, 3, d, scale=3.0) + 1.5
    xd = x.astype(np.float64)
    if kind == "LayerNorm":
        mean = xd.mean(-1, keepdims=True)
        var = ((xd - mean) ** 2).mean(-1, keepdims=True)
        y = (xd - mean) / np.sqrt(var + eps)
    else:
        y = xd / np.sqrt((xd**2).mean(-1, keepdims=True) + eps)
    if scale:
        y = y * p["l.scale"]
    if kind == "LayerNorm" and bias:
        y = y + p["l.bias"]
    assert ("l.scale" in params) == scale
    assert ("l.bias" in params) == (bias and kind == "LayerNorm")  # RMSNorm never centres
    assert_close(run(g, params, {"x0": x}), y)


def test_dropout_identity_at_eval_and_rate_at_training() -> None:
    rate = 0.25
    g = build("Dropout", [f32("B", "T", "d")], rate=rate)
    x = randn(RNG(7), 4, 64, 32) + 5.0  # no zeros of its own
    np.testing.assert_array_equal(run(g, {}, {"x0": x}), x)
    out = run(g, {}, {"x0": x}, training=True, seed=3)
    dropped = out == 0.0
    assert abs(dropped.mean() - rate) < 0.03  # 8192 draws: the std of the fraction is 0.005
    np.testing.assert_allclose(out[~dropped], x[~dropped] / (1 - rate), rtol=1e-6)
    other = run(g, {}, {"x0": x}, training=True, seed=4)
    assert np.any((other == 0.0) != dropped)  # the mask comes from the rng

    g = build("Dropout", [f32("B", "T", "d")], rate=rate, broadcast_time=True)
    out = run(g, {}, {"x0": x}, training=True, seed=3)
    dropped = out == 0.0
    assert np.all(dropped == dropped[:, :1, :])  # one mask for every time step
    assert abs(dropped.mean() - rate) < 0.06


def test_softmax_own_weights() -> None:
    g = build("Softmax", [f32("B", "T", 4)], vocab=9, d=4)
    params = params_of(g)
    p = p64(params)
    x = randn(RNG(8), 2, 3, 4)
    assert_close(run(g, params, {"x0": x}), x @ p["l.w"] + p["l.b"])


def test_softmax_tied_to_embedding() -> None:
    vocab, d = 9, 4
    b = GraphBuilder()
    ids = b.input("ids", TensorType("int32", ("B", "T")))
    x = b.input("x", f32("B", "T", d))
    b.layer = "embed"
    emb = LOWERINGS["Embedding"](
        b, LayerCall("Embedding", "embed", layer_args("Embedding", vocab=vocab, d=d), [ids])
    )
    b.layer = "out"
    args = layer_args("Softmax", vocab=vocab, d=d, tie="embed")
    logits = LOWERINGS["Softmax"](
        b, LayerCall("Softmax", "out", args, [x], siblings={"embed": "embed"})
    )
    b.graph.outputs = [logits, emb]
    g = b.graph
    assert set(g.params) == {"embed.table", "out.b"}  # no output matrix of its own
    params = params_of(g)
    p = p64(params)
    xv = randn(RNG(9), 2, 3, d)
    idv = np.zeros((2, 3), np.int32)
    out = run(g, params, {"ids": idv, "x": xv})
    assert_close(out, xv @ p["embed.table"].T + p["out.b"])


def conv_ref(x: np.ndarray, w: np.ndarray, stride: int, causal: bool) -> np.ndarray:
    """x [B, T, c_in], w [k, c_in, c_out]. Causal pads k - 1 on the left; "same" pads as TF/XLA
    do: out = ceil(T / stride), total padding split with the extra step on the right."""
    bsz, length, _ = x.shape
    k = w.shape[0]
    n_out = -(-length // stride)
    left = k - 1 if causal else max((n_out - 1) * stride + k - length, 0) // 2
    out = np.zeros((bsz, n_out, w.shape[2]))
    for t in range(n_out):
        for j in range(k):
            src = t * stride + j - left
            if 0 <= src < length:
                out[:, t] += x[:, src] @ w[j]
    return out


@pytest.mark.parametrize(
    ("width", "stride", "causal"),
    [(3, 1, False), (4, 1, False), (3, 1, True), (3, 2, False), (2, 2, True)],
)
def test_conv1d(width: int, stride: int, causal: bool) -> None:
    g = build(
        "Conv1D",
        [f32("B", "T", 3)],
        d_in=3,
        d_out=5,
        width=width,
        stride=stride,
        causal=causal,
        activation="relu",
    )
    params = params_of(g)
    p = p64(params)
    x = randn(RNG(10), 2, 7, 3)
    want = ACT["relu"](conv_ref(x.astype(np.float64), p["l.w"], stride, causal) + p["l.b"])
    assert_close(run(g, params, {"x0": x}), want)


def test_causal_conv1d_does_not_see_the_future() -> None:
    g = build("Conv1D", [f32("B", "T", 2)], d_in=2, d_out=2, width=3, causal=True)
    params = params_of(g)
    x = randn(RNG(11), 1, 6, 2)
    y = x.copy()
    y[:, 4:] += 10.0
    before, after = run(g, params, {"x0": x}), run(g, params, {"x0": y})
    np.testing.assert_array_equal(after[:, :4], before[:, :4])
    assert not np.allclose(after[:, 4:], before[:, 4:])


# ---------------------------------------------------------------------------- attention


def attention_ref(
    x: np.ndarray,
    memory: np.ndarray,
    p: dict[str, np.ndarray],
    heads: int,
    key_mask: np.ndarray | None,
    causal: bool,
    bias: bool = True,
) -> np.ndarray:
    """Multi-head scaled dot-product attention; masked keys get exactly zero weight."""

    def proj(v: np.ndarray, name: str) -> np.ndarray:
        return v @ p[f"l.{name}.w"] + (p[f"l.{name}.b"] if bias else 0.0)

    bsz, t, _ = x.shape
    s = memory.shape[1]
    q, k, v = proj(x, "q"), proj(memory, "k"), proj(memory, "v")
    hd = q.shape[-1] // heads
    out = np.zeros((bsz, t, heads * hd))
    for bi in range(bsz):
        for h in range(heads):
            cols = slice(h * hd, (h + 1) * hd)
            scores = q[bi, :, cols] @ k[bi, :, cols].T / math.sqrt(hd)  # [T, S]
            allowed = np.ones((t, s), bool)
            if key_mask is not None:
                allowed &= key_mask[bi][None, :]
            if causal:
                allowed &= np.tril(np.ones((t, s), bool))
            scores = np.where(allowed, scores, -np.inf)
            weights = softmax(scores)
            assert np.all(weights[~allowed] == 0.0)
            out[bi, :, cols] = weights @ v[bi, :, cols]
    return proj(out, "o")


LENGTHS = np.array([5, 3])
PAD_MASK = np.arange(5)[None, :] < LENGTHS[:, None]  # right padding: [[T T T T T], [T T T F F]]


@pytest.mark.parametrize(
    ("causal", "masked", "head_dim", "bias"),
    [
        (False, False, None, True),
        (True, False, None, True),
        (False, True, None, True),
        (True, True, None, True),
        (False, True, 3, False),
    ],
)
def test_self_attention(causal: bool, masked: bool, head_dim: int | None, bias: bool) -> None:
    d, heads = 8, 2
    kw = {"mask": TensorType("bool", ("B", "T"))} if masked else {}
    g = build(
        "SelfAttention",
        [f32("B", "T", d)],
        kw,
        d=d,
        heads=heads,
        causal=causal,
        head_dim=head_dim,
        bias=bias,
    )
    params = params_of(g)
    x = randn(RNG(12), 2, 5, d)
    inputs = {"x0": x} | ({"mask": PAD_MASK} if masked else {})
    out = run(g, params, inputs)
    want = attention_ref(
        x.astype(np.float64), x, p64(params), heads, PAD_MASK if masked else None, causal, bias
    )
    assert_close(out, want)


def test_self_attention_masks_by_perturbation() -> None:
    """Causal: the output at t does not change when inputs after t do. Padding: real positions'
    outputs do not change when padded positions' inputs do."""
    d = 8
    mask_t = {"mask": TensorType("bool", ("B", "T"))}
    g = build("SelfAttention", [f32("B", "T", d)], mask_t, d=d, heads=2, causal=True)
    params = params_of(g)
    x = randn(RNG(13), 2, 5, d)
    full = np.ones((2, 5), bool)
    base = run(g, params, {"x0": x, "mask": full})
    for t in range(4):
        y = x.copy()
        y[:, t + 1 :] = randn(RNG(t), 2, 4 - t, d, scale=5.0)
        out = run(g, params, {"x0": y, "mask": full})
        np.testing.assert_allclose(out[:, : t + 1], base[:, : t + 1], rtol=0, atol=1e-6)
        assert not np.allclose(out[:, t + 1 :], base[:, t + 1 :])

    g = build("SelfAttention", [f32("B", "T", d)], mask_t, d=d, heads=2)
    params = params_of(g)
    base = run(g, params, {"x0": x, "mask": PAD_MASK})
    y = x.copy()
    y[~PAD_MASK] = 100.0
    out = run(g, params, {"x0": y, "mask": PAD_MASK})
    np.testing.assert_allclose(out[PAD_MASK], base[PAD_MASK], rtol=0, atol=1e-6)
    # an integer mask means the same as the bool one (nonzero = real)
    g_int = build(
        "SelfAttention",
        [f32("B", "T", d)],
        {"mask": TensorType("int32", ("B", "T"))},
        d=d,
        heads=2,
    )
    out_int = run(g_int, params, {"x0": x, "mask": PAD_MASK.astype(np.int32)})
    assert_close(out_int, base)


def test_cross_attention_with_memory_mask() -> None:
    d, d_mem, heads = 8, 6, 2
    x = randn(RNG(14), 2, 4, d)
    memory = randn(RNG(15), 2, 5, d_mem)
    mask = PAD_MASK
    inputs = [f32("B", "T", d), f32("B", "S", d_mem)]
    g = build(
        "CrossAttention",
        inputs,
        {"mask": TensorType("bool", ("B", "S"))},
        d=d,
        heads=heads,
        d_memory=d_mem,
    )
    params = params_of(g)
    out = run(g, params, {"x0": x, "x1": memory, "mask": mask})
    want = attention_ref(x.astype(np.float64), memory, p64(params), heads, mask, causal=False)
    assert_close(out, want)
    # masked memory steps get zero weight: changing them changes nothing
    other = memory.copy()
    other[~mask] = -50.0
    out2 = run(g, params, {"x0": x, "x1": other, "mask": mask})
    np.testing.assert_allclose(out2, out, rtol=0, atol=1e-6)
    # memory may be given by name
    g_kw = build(
        "CrossAttention",
        [inputs[0]],
        {"memory": inputs[1], "mask": TensorType("bool", ("B", "S"))},
        d=d,
        heads=heads,
        d_memory=d_mem,
    )
    assert_close(run(g_kw, params, {"x0": x, "memory": memory, "mask": mask}), want)


def test_cross_attention_without_memory_is_an_arity_error() -> None:
    with pytest.raises(CheckError) as err:
        build("CrossAttention", [f32("B", "T", 8)], d=8, heads=2)
    assert err.value.code == "arity"


# ---------------------------------------------------------------------------- gradients


def _grad_case(g, inputs: dict[str, np.ndarray], float_inputs: tuple[str, ...], seed: int):
    """f(params, float inputs) = sum(output * R), all in float64."""
    params = {k: v.astype(np.float64) for k, v in params_of(g).items()}
    floats = {k: inputs[k].astype(np.float64) for k in float_inputs}
    fixed = {k: v for k, v in inputs.items() if k not in float_inputs}

    def forward(p: dict, xs: dict) -> jax.Array:
        return run_graph(g, p, xs | fixed, Ctx(compute_dtype=jnp.float64))[0]

    with jax.enable_x64(True):
        shape = jax.eval_shape(forward, params, floats).shape
    r = RNG(seed).standard_normal(shape)

    def f(p: dict, xs: dict) -> jax.Array:
        return jnp.sum(forward(p, xs) * r)

    return f, (params, floats)


def test_gradients_linear() -> None:
    g = build("Linear", [f32("B", "T", 4)], d_in=4, d_out=3, activation="gelu")
    f, args = _grad_case(g, {"x0": randn(RNG(20), 2, 3, 4)}, ("x0",), 21)
    directional_check(f, args, RNG(22), eps=1e-5, rtol=1e-6)


def test_gradients_layer_norm() -> None:
    # the JAX layer_norm keeps its statistics in float32 (for bfloat16 training), so this
    # float64 check is only float32-accurate: a coarser eps and tolerance, and an absolute
    # floor, since a direction whose derivative nearly cancels (-0.058 where others are ~4)
    # leaves float32 rounding (~1e-4 here) as the whole difference.
    g = build("LayerNorm", [f32("B", "T", 6)], d=6)
    f, args = _grad_case(g, {"x0": randn(RNG(23), 2, 3, 6)}, ("x0",), 24)
    directional_check(f, args, RNG(25), eps=1e-3, rtol=2e-3, atol=5e-4)


def test_gradients_self_attention() -> None:
    # softmax also runs in float32 inside, hence the coarser tolerance
    g = build(
        "SelfAttention",
        [f32("B", "T", 4)],
        {"mask": TensorType("bool", ("B", "T"))},
        d=4,
        heads=2,
        causal=True,
    )
    inputs = {"x0": randn(RNG(26), 2, 5, 4), "mask": PAD_MASK}
    f, args = _grad_case(g, inputs, ("x0",), 27)
    directional_check(f, args, RNG(28), eps=1e-3, rtol=2e-3)


# The LSTM gradient check is in test_lowering_recurrent.py.


# ---------------------------------------------------------------------------- whole models

LM_SPEC = """\
seqc 1
input data { train = text("t.txt"); tokenizer = chars() }
model LM(vocab: int, d: int = 16) {
  embed = Embedding(vocab, d, scale_output = true)
  pos = SinusoidalPosition(d)
  norm1 = LayerNorm(d)
  attn = SelfAttention(d, 2, causal = true)
  norm2 = LayerNorm(d)
  mlp = FeedForward(d, 32, activation = "gelu")
  norm = LayerNorm(d)
  out = Softmax(vocab, d, tie = embed)
  forward (ids: int32[B, T]) -> float32[B, T, vocab] {
    x = pos(embed(ids))
    x = x + attn(norm1(x))
    x = x + mlp(norm2(x))
    return out(norm(x))
  }
}
task lm {
  input = data
  model = LM(vocab = 8)
}
experiment e {
  tasks = [lm]
  train { steps = 30; optimizer = adam(lr = 0.01) }
}
"""


def _compile_spec(tmp_path: Path, text: str, experiment: str = "e", task: str | None = None):
    spec = tmp_path / "main.seq"
    spec.write_text(text)
    program = load_program(spec)
    resolved = resolve(program, experiment)
    return resolved, compile_task(program, resolved, task or resolved.tasks[0])


def _lower_spec(tmp_path: Path, text: str, experiment: str = "e", task: str | None = None):
    resolved, compiled = _compile_spec(tmp_path, text, experiment, task)
    return resolved, compiled.name, compiled.graph


@pytest.mark.filterwarnings("ignore:Some donated buffers were not usable")
def test_tiny_lm_loss_falls(tmp_path: Path) -> None:
    _, compiled = _compile_spec(tmp_path, LM_SPEC)
    model = JaxModel(compiled, compiled.train)
    rate = learning_rate(compiled.train)
    state = model.init(seed=0)
    rng = RNG(30)
    rows, length, period = 8, 12, 5
    phase = rng.integers(0, period, rows)[:, None]
    seq = ((phase + np.arange(length + 1)[None, :]) % period + 1).astype(np.int32)
    arrays = {
        "inputs": seq[:, :-1],
        "targets": seq[:, 1:],
        "mask": np.ones((rows, length), bool),
    }
    batch = Batch("lm", arrays, bucket=length, num_examples=rows)
    losses = []
    for step in range(30):
        state, metrics = model.train_step(state, batch, rate(step))
        losses.append(float(metrics["loss"]))
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < 0.5 * losses[0], losses


def test_cost_linear_flops() -> None:
    d_in, d_out, bsz, t = 5, 7, 3, 11
    g = build("Linear", [f32("B", "T", d_in)], d_in=d_in, d_out=d_out, bias=False)
    report = cost.estimate(g, {"B": bsz, "T": t})
    assert report.flops == 2 * bsz * t * d_in * d_out
    assert report.param_count == d_in * d_out
    g = build("Linear", [f32("B", "T", d_in)], d_in=d_in, d_out=d_out)
    report = cost.estimate(g, {"B": bsz, "T": t})
    matmuls = [op for op in g.ops if op.kind == "matmul"]
    assert [report.per_op[op.id] for op in matmuls] == [2 * bsz * t * d_in * d_out]
    assert report.flops == 2 * bsz * t * d_in * d_out + bsz * t * d_out  # + the bias add
    assert report.param_count == d_in * d_out + d_out


def test_cost_shakespeare_param_count() -> None:
    program = load_program(ROOT / "examples" / "lm" / "shakespeare.seq")
    vocab = 4000
    resolved = resolve(program, "lm.shakespeare.tiny", symbols={"shakespeare.vocab_size": vocab})
    graph = compile_task(program, resolved, "lm").graph
    report = cost.estimate(graph, {"B": 2, "T": 16})
    assert report.param_count == sum(p.size for p in graph.params.values())
    assert report.param_bytes == 4 * report.param_count
    assert sum(lc.params for lc in report.per_layer.values()) == report.param_count
    d, layers, ff = 256, 4, 1024
    block = 2 * (2 * d) + 4 * (d * d + d) + (d * ff + ff) + (ff * d + d)
    # tied output: the embedding table once, plus the softmax bias and the final norm
    assert report.param_count == vocab * d + layers * block + 2 * d + vocab


def test_cost_scan_counts_its_body_per_step() -> None:
    hidden, d_in, bsz = 4, 3, 2
    g = build("LSTM", [f32("B", "T", d_in)], d_in=d_in, d_hidden=hidden)
    (scan,) = [op for op in g.ops if op.kind == "scan"]
    body = g.subgraphs[scan.attrs["body"]]
    per_step = cost.estimate(body, {"B": bsz}).flops
    assert per_step >= 2 * bsz * hidden * 4 * hidden  # at least the recurrent matmul
    for t in (4, 8):
        report = cost.estimate(g, {"B": bsz, "T": t})
        assert report.per_op[scan.id] == t * per_step


# ---------------------------------------------------------------------------- errors at spans

ERR_SPEC = """\
seqc 1
input data {{ train = text("t.txt"); tokenizer = chars() }}
model M(vocab: int, d: int = 8) {{
  embed = Embedding(vocab, d)
  lin = Linear(d, d)
  norm = LayerNorm(2 * d)
  cross = CrossAttention(d, 2)
  out = Softmax(vocab, d)
  forward ({inp}: int32[B, T]) -> float32[B, T, vocab] {{
    x = lin(embed({inp}))
    return out({body})
  }}
}}
task t {{
  input = data
  model = M(vocab = 11)
}}
experiment e {{
  tasks = [t]
  train {{ steps = 10; optimizer = adam(lr = 0.01) }}
}}
"""


@pytest.mark.parametrize(
    ("body", "code", "col"),
    [("norm(x)", "shape-mismatch", 16), ("cross(x)", "arity", 16), ("lin(x)", None, None)],
)
def test_lowering_errors_point_at_the_call(
    tmp_path: Path, body: str, code: str | None, col: int | None
) -> None:
    text = ERR_SPEC.format(inp="ids", body=body)
    if code is None:
        _lower_spec(tmp_path, text)  # the same spec with a well-shaped call lowers
        return
    with pytest.raises(CheckError) as err:
        _lower_spec(tmp_path, text)
    e = err.value
    assert e.code == code
    assert (Path(e.span.file).name, e.span.line, e.span.col) == ("main.seq", 11, col)
    if code == "shape-mismatch":
        assert e.expected == "[..., 16]" and e.found == "float32[B, T, 8]"


def test_unknown_forward_input_is_reported_at_its_param(tmp_path: Path) -> None:
    """Compiling matches forward inputs to batch fields (`compiler.signature`): a name the data
    does not provide is an error there, at the forward's param."""
    with pytest.raises(CheckError) as err:
        _compile_spec(tmp_path, ERR_SPEC.format(inp="words", body="lin(x)"))
    e = err.value
    assert e.code == "unknown-input"
    assert (e.span.line, e.span.col) == (9, 12)
    assert "ids" in (e.expected or "")


def test_user_layer_input_width_mismatch(tmp_path: Path) -> None:
    """A user layer called with the wrong width: reported at the call, with both shapes."""
    text = textwrap.dedent(
        """\
        seqc 1
        input data { train = text("t.txt"); tokenizer = chars() }
        layer Block(d: int) {
          lin = Linear(d, d)
          forward (x: float32[B, T, d]) -> float32[B, T, d] { return lin(x) }
        }
        model M(vocab: int, d: int = 8) {
          embed = Embedding(vocab, d)
          block = Block(2 * d)
          out = Softmax(vocab, d)
          forward (ids: int32[B, T]) -> float32[B, T, vocab] {
            return out(block(embed(ids)))
          }
        }
        task t { input = data; model = M(vocab = 11) }
        experiment e { tasks = [t]; train { steps = 1; optimizer = adam(lr = 0.01) } }
        """
    )
    with pytest.raises(CheckError) as err:
        _lower_spec(tmp_path, text)
    e = err.value
    assert e.code == "shape-mismatch"
    assert (e.span.line, e.span.col) == (12, 16)
    assert e.found == "float32[B, T, 8]" and "16" in (e.expected or "")
