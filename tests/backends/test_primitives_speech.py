"""The speech primitives (`conv1d` with valid padding and groups, `conv2d`, `spec_augment`,
`ctc_loss`) in every backend, against independent references.

Why: a speech model's front end (2-D subsampling, Conformer's depthwise convolution) and its
criterion are primitives of their own, so each backend's table must agree with the others and
with the textbook definition, or a model trained on one backend would not be the model exported
from another. Convolutions: JAX, TF and ONNX (onnxruntime) agree with a float64 numpy reference
to a normwise relative error of 1e-5, at symbolic and static lengths, and TFLite runs the
depthwise and 2-D convolutions as its own builtins. CTC: optax and TF agree with each other
and with a brute-force sum over every alignment to 1e-5, gradients too, and rows no alignment
fits are 0 with no gradient in both. SpecAugment: the identity outside training; in training,
per-row bands and spans within the stated widths, reproducible from the seed.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf

from seqc.backends.jax.ops import Ctx as JaxCtx
from seqc.backends.jax.ops import run_graph as jax_run_graph
from seqc.backends.onnx.emit import OnnxExportError, check, to_onnx
from seqc.backends.onnx.runtime import OnnxRunner
from seqc.backends.tf.ops import Ctx as TfCtx
from seqc.backends.tf.ops import run_graph as tf_run_graph
from seqc.compiler.cost import _eval, estimate
from seqc.compiler.graph import Graph, GraphBuilder, Init, TensorType
from seqc.spec.errors import CheckError

REL_TOLERANCE = 1e-5
"""Normwise relative error (max |got - want| / max |want|) allowed between float32 backends
and the float64 references, and between the JAX and TF CTC gradients. Measured: convolutions
at most 2e-7 in every backend, CTC losses 1e-7 (against brute force and each other), CTC
gradients TF against JAX 3e-6."""


def f32(*shape: int | str) -> TensorType:
    return TensorType("float32", tuple(shape))


def rel_error(got: np.ndarray, want: np.ndarray) -> float:
    assert got.shape == want.shape, (got.shape, want.shape)
    diff = np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)), initial=0.0)
    return float(diff / max(float(np.max(np.abs(want), initial=0.0)), 1e-6))


def run_jax(graph: Graph, params: dict, inputs: dict, ctx: JaxCtx | None = None) -> list:
    forward = jax.jit(lambda p, xs: jax_run_graph(graph, p, xs, ctx or JaxCtx()))
    return [np.asarray(y) for y in forward(params, inputs)]


def run_tf(graph: Graph, params: dict, inputs: dict, ctx: TfCtx | None = None) -> list:
    tf_params = {k: tf.constant(v) for k, v in params.items()}

    @tf.function(autograph=False)
    def forward(xs: dict) -> list[tf.Tensor]:
        return tf_run_graph(graph, tf_params, xs, ctx or TfCtx())

    return [y.numpy() for y in forward({k: tf.constant(v) for k, v in inputs.items()})]


def run_onnx(graph: Graph, params: dict, inputs: dict) -> list:
    return OnnxRunner(check(to_onnx(graph, params))).run(inputs)


# ---------------------------------------------------------------------------- references


def conv1d_ref(x: np.ndarray, w: np.ndarray, stride: int, padding: str, groups: int) -> np.ndarray:
    """Grouped 1-D cross-correlation in float64: output channel o of group o // (c_out / groups)
    reads that group's block of input channels; "same" puts the odd padding step on the right."""
    width, per_group, c_out = w.shape
    t = x.shape[1]
    if padding == "valid":
        left, out_len = 0, (t - width) // stride + 1
    elif padding == "causal":
        left, out_len = width - 1, -(-t // stride)
    else:
        out_len = -(-t // stride)
        left = max((out_len - 1) * stride + width - t, 0) // 2
    out = np.zeros((x.shape[0], out_len, c_out))
    outs_per_group = c_out // groups
    for o in range(c_out):
        block = slice((o // outs_per_group) * per_group, (o // outs_per_group + 1) * per_group)
        for i in range(out_len):
            for k in range(width):
                src = i * stride + k - left
                if 0 <= src < t:
                    out[:, i, o] += x[:, src, block] @ w[k, :, o]
    return out


def conv2d_ref(x: np.ndarray, w: np.ndarray, strides: tuple[int, int], padding: str) -> np.ndarray:
    """2-D cross-correlation, NHWC and HWIO, in float64."""
    kh, kw = w.shape[:2]
    outs, lefts = [], []
    for n, k, s in zip(x.shape[1:3], (kh, kw), strides, strict=True):
        m = (n - k) // s + 1 if padding == "valid" else -(-n // s)
        outs.append(m)
        lefts.append(0 if padding == "valid" else max((m - 1) * s + k - n, 0) // 2)
    padded = np.zeros((x.shape[0], x.shape[1] + kh * 2, x.shape[2] + kw * 2, x.shape[3]))
    padded[:, kh : kh + x.shape[1], kw : kw + x.shape[2]] = x
    out = np.zeros((x.shape[0], outs[0], outs[1], w.shape[3]))
    for i, j in itertools.product(range(outs[0]), range(outs[1])):
        top, left = i * strides[0] - lefts[0] + kh, j * strides[1] - lefts[1] + kw
        patch = padded[:, top : top + kh, left : left + kw]
        out[:, i, j] = np.einsum("bhwc,hwco->bo", patch, w)
    return out


def ctc_ref(logits: np.ndarray, frames: int, labels: list[int], blank: int) -> float:
    """-log of the total probability of every frame-level path whose collapse (merge repeats,
    drop blanks) is `labels`, by enumerating all V^frames paths."""
    z = logits[:frames].astype(np.float64)
    logp = (
        z
        - np.log(np.sum(np.exp(z - z.max(-1, keepdims=True)), -1, keepdims=True))
        - z.max(-1, keepdims=True)
    )
    total = 0.0
    for path in itertools.product(range(logits.shape[-1]), repeat=frames):
        merged = [p for i, p in enumerate(path) if i == 0 or p != path[i - 1]]
        if [p for p in merged if p != blank] == labels:
            total += np.exp(sum(logp[t, p] for t, p in enumerate(path)))
    return -np.log(total) if total > 0 else np.inf


# ---------------------------------------------------------------------------- convolutions

CONV1D = [  # (width, stride, padding, groups, c_in, c_out)
    (3, 1, "valid", 1, 4, 6),
    (3, 2, "valid", 1, 4, 6),
    (4, 3, "valid", 1, 4, 6),
    (3, 2, "same", 1, 4, 6),
    (4, 2, "same", 1, 4, 6),
    (3, 2, "causal", 1, 4, 6),
    (5, 1, "same", 4, 4, 4),  # depthwise, as in Conformer
    (3, 1, "causal", 4, 4, 4),
    (3, 2, "valid", 4, 4, 4),
    (3, 2, "same", 4, 4, 8),  # depthwise with a channel multiplier of 2
    (3, 1, "same", 2, 4, 6),  # two groups of two channels in, three out
    (3, 2, "valid", 2, 4, 6),
]


def conv1d_graph(
    t: int | str, width: int, stride: int, padding: str, groups: int, c_in: int, c_out: int
) -> Graph:
    g = GraphBuilder()
    g.layer = "conv"
    x = g.input("x", f32("B", t, c_in))
    w = g.param("w", (width, c_in // groups, c_out), Init("normal", 0.5))
    g.graph.outputs = [g.conv1d(x, w, stride, padding, groups=groups)]
    return g.graph


@pytest.mark.parametrize("case", CONV1D, ids=lambda c: "-".join(map(str, c)))
def test_conv1d_matches_reference_in_every_backend(case: tuple) -> None:
    width, stride, padding, groups, c_in, c_out = case
    rng = np.random.default_rng(sum(case[:2]) + groups)
    w = rng.standard_normal((width, c_in // groups, c_out)).astype(np.float32)
    for t_dim, t in (("T", 11), (10, 10)):
        graph = conv1d_graph(t_dim, *case)
        x = rng.standard_normal((2, t, c_in)).astype(np.float32)
        want = conv1d_ref(x.astype(np.float64), w.astype(np.float64), stride, padding, groups)
        out_t = graph.ops[graph.outputs[0]].type.shape[1]
        assert (out_t if isinstance(out_t, int) else _eval(out_t, {"T": t})) == want.shape[1]
        for name, run in (("jax", run_jax), ("tf", run_tf), ("onnx", run_onnx)):
            (got,) = run(graph, {"conv.w": w}, {"x": x})
            assert rel_error(got, want) <= REL_TOLERANCE, (name, t_dim, rel_error(got, want))


def test_conv1d_attrs_of_existing_graphs_are_unchanged() -> None:
    g = GraphBuilder()
    x = g.input("x", f32("B", "T", 4))
    w = g.param("w", (3, 4, 4), Init("normal"))
    plain = g.conv1d(x, w, 1, "same")
    assert g.graph.ops[plain].attrs == {"stride": 1, "padding": "same"}
    dw = g.conv1d(x, g.param("dw", (3, 1, 4), Init("normal")), 1, "same", groups=4)
    assert g.graph.ops[dw].attrs == {"stride": 1, "padding": "same", "groups": 4}
    assert g.type(g.conv1d(x, w, 2, "valid")).shape == ("B", "((T-3)//2+1)", 4)
    with pytest.raises(CheckError, match="input width"):
        g.conv1d(x, w, 1, "same", groups=2)  # a [3, 4, 4] weight with 2 groups wants c_in = 8
    with pytest.raises(CheckError, match="padding"):
        g.conv1d(x, w, 1, "full")


CONV2D = [  # (kh, kw, strides, padding)
    (3, 3, (2, 2), "valid"),
    (3, 3, (2, 2), "same"),
    (3, 3, (1, 1), "same"),
    (2, 3, (1, 2), "valid"),
    (3, 2, (2, 1), "same"),
]


@pytest.mark.parametrize("case", CONV2D, ids=lambda c: "-".join(map(str, c)))
def test_conv2d_matches_reference_in_every_backend(case: tuple) -> None:
    kh, kw, strides, padding = case
    rng = np.random.default_rng(kh * 10 + kw)
    w = rng.standard_normal((kh, kw, 2, 3)).astype(np.float32)
    for t_dim, t in (("T", 13), (12, 12)):
        g = GraphBuilder()
        g.layer = "sub"
        x_in = g.input("x", f32("B", t_dim, 9, 2))
        g.graph.outputs = [g.conv2d(x_in, g.param("w", w.shape, Init("glorot")), strides, padding)]
        x = rng.standard_normal((2, t, 9, 2)).astype(np.float32)
        want = conv2d_ref(x.astype(np.float64), w.astype(np.float64), strides, padding)
        shape = g.type(g.graph.outputs[0]).shape
        assert [d if isinstance(d, int) else _eval(d, {"T": t}) for d in shape[1:]] == list(
            want.shape[1:]
        )
        for name, run in (("jax", run_jax), ("tf", run_tf), ("onnx", run_onnx)):
            (got,) = run(g.graph, {"sub.w": w}, {"x": x})
            assert rel_error(got, want) <= REL_TOLERANCE, (name, t_dim, rel_error(got, want))


def test_convolution_costs() -> None:
    """FLOPs are 2 x output elements x the taps each reads: a depthwise convolution is c_in
    times cheaper than a full one of the same shape."""
    g = GraphBuilder()
    x = g.input("x", f32("B", "T", 8))
    full = g.conv1d(x, g.param("w", (3, 8, 8), Init("normal")), 1, "same")
    dw = g.conv1d(x, g.param("dw", (3, 1, 8), Init("normal")), 1, "same", groups=8)
    img = g.input("img", f32("B", "T", 20, 1))
    c2 = g.conv2d(img, g.param("k", (3, 3, 1, 4), Init("normal")), (2, 2), "valid")
    report = estimate(g.graph, {"B": 2, "T": 21})
    assert report.per_op[full] == 2 * (2 * 21 * 8) * 3 * 8
    assert report.per_op[dw] == report.per_op[full] // 8
    assert report.per_op[c2] == 2 * (2 * 10 * 9 * 4) * 9


@pytest.mark.parametrize(
    ("build", "kernel"),
    [("depthwise", "DEPTHWISE_CONV_2D"), ("conv2d", "CONV_2D")],
)
def test_tflite_runs_them_as_builtins(tmp_path: Path, build: str, kernel: str) -> None:
    from seqc.backends.tflite.convert import convert
    from seqc.backends.tflite.flatbuffer import ops
    from seqc.backends.tflite.runtime import TfliteRunner

    rng = np.random.default_rng(7)
    g = GraphBuilder()
    if build == "depthwise":
        x_in = g.input("x", f32("B", "T", 4))
        w = rng.standard_normal((5, 1, 4)).astype(np.float32)
        g.graph.outputs = [g.conv1d(x_in, g.param("w", w.shape, Init("normal")), 1, "same", 4)]
        x = rng.standard_normal((2, 9, 4)).astype(np.float32)
        spec = tf.TensorSpec([None, None, 4], tf.float32, name="x")
    else:
        x_in = g.input("x", f32("B", "T", 9, 1))
        w = rng.standard_normal((3, 3, 1, 4)).astype(np.float32)
        g.graph.outputs = [g.conv2d(x_in, g.param("w", w.shape, Init("normal")), (2, 2), "valid")]
        x = rng.standard_normal((2, 11, 9, 1)).astype(np.float32)
        spec = tf.TensorSpec([None, None, 9, 1], tf.float32, name="x")
    params = {"w": tf.constant(w)}

    def forward(x: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"y": tf_run_graph(g.graph, params, {"x": x}, TfCtx(portable=True))[0]}

    module = tf.Module()
    module.f = tf.function(forward, autograph=False, input_signature=[spec])
    tf.saved_model.save(module, str(tmp_path / "sm"), signatures={"serving_default": module.f})
    model = convert(tmp_path / "sm", "none")
    assert kernel in {o.name for o in ops(model)}
    got = TfliteRunner(model).run({"x": x})["y"]
    (want,) = run_jax(g.graph, {"w": w}, {"x": x})
    assert rel_error(got, want) <= REL_TOLERANCE


# ---------------------------------------------------------------------------- CTC


def ctc_graph(b: int | str, f: int | str, v: int, n: int | str, blank: int) -> Graph:
    g = GraphBuilder()
    g.layer = "ctc"
    logits = g.input("logits", f32(b, f, v))
    fm = g.input("frame_mask", TensorType("bool", (b, f)))
    labels = g.input("labels", TensorType("int32", (b, n)))
    lm = g.input("label_mask", TensorType("bool", (b, n)))
    g.graph.outputs = [g.ctc_loss(logits, fm, labels, lm, blank=blank)]
    return g.graph


def ctc_batch(lengths: list[tuple[int, list[int]]], f: int, v: int, n: int, seed: int) -> dict:
    """Inputs for rows of (frame count, labels), right-padded; padded labels are garbage
    (-1 or past the vocabulary) so a backend that reads them fails the test."""
    rng = np.random.default_rng(seed)
    b = len(lengths)
    labels = np.where(rng.random((b, n)) < 0.5, -1, v + 3).astype(np.int32)
    label_mask = np.zeros((b, n), bool)
    for i, (_, row) in enumerate(lengths):
        labels[i, : len(row)] = row
        label_mask[i, : len(row)] = True
    frames = np.array([fr for fr, _ in lengths])
    return {
        "logits": (2.0 * rng.standard_normal((b, f, v))).astype(np.float32),
        "frame_mask": np.arange(f)[None, :] < frames[:, None],
        "labels": labels,
        "label_mask": label_mask,
    }


def jax_loss_and_grad(graph: Graph, inputs: dict) -> tuple[np.ndarray, np.ndarray]:
    def total(logits: jax.Array) -> tuple[jax.Array, jax.Array]:
        (loss,) = jax_run_graph(graph, {}, inputs | {"logits": logits}, JaxCtx())
        return jnp.sum(loss * jnp.arange(1, loss.shape[0] + 1)), loss  # distinct row weights

    grad, loss = jax.jit(jax.grad(total, has_aux=True))(inputs["logits"])
    return np.asarray(loss), np.asarray(grad)


def tf_loss_and_grad(graph: Graph, inputs: dict) -> tuple[np.ndarray, np.ndarray]:
    @tf.function(autograph=False)
    def step(xs: dict) -> tuple[tf.Tensor, tf.Tensor]:
        with tf.GradientTape() as tape:
            tape.watch(xs["logits"])
            (loss,) = tf_run_graph(graph, {}, xs, TfCtx())
            total = tf.reduce_sum(loss * tf.range(1, tf.shape(loss)[0] + 1, dtype=tf.float32))
        return loss, tape.gradient(total, xs["logits"])

    loss, grad = step({k: tf.constant(v) for k, v in inputs.items()})
    return loss.numpy(), grad.numpy()


@pytest.mark.parametrize("blank", [0, 3])
def test_ctc_optax_and_tf_agree_with_brute_force(blank: int) -> None:
    """F = 4 frames, V = 3 + 1 ids, labels of two: all 256 paths enumerated per row."""
    vocab = [i for i in range(4) if i != blank]
    a, b = vocab[0], vocab[1]
    rows = [(4, [a, b]), (4, [a, a]), (3, [b, a]), (3, [a, a]), (2, [b]), (4, []), (1, [a])]
    inputs = ctc_batch(rows, 4, 4, 2, seed=blank)
    want = np.array(
        [ctc_ref(inputs["logits"][i], fr, lab, blank) for i, (fr, lab) in enumerate(rows)]
    )
    graph = ctc_graph("B", "F", 4, "L", blank)
    jax_loss, jax_grad = jax_loss_and_grad(graph, inputs)
    tf_loss, tf_grad = tf_loss_and_grad(graph, inputs)
    assert jax_loss.dtype == tf_loss.dtype == np.float32
    assert rel_error(jax_loss, want) <= REL_TOLERANCE, (jax_loss, want)
    assert rel_error(tf_loss, want) <= REL_TOLERANCE, (tf_loss, want)
    assert rel_error(tf_grad, jax_grad) <= REL_TOLERANCE
    # the gradient of -log p over a row's scores sums to 0 per real frame (softmax), is 0 on
    # padded frames
    assert np.allclose(jax_grad.sum(-1), 0.0, atol=1e-5)
    assert not np.any(jax_grad[~inputs["frame_mask"]])


def test_ctc_optax_and_tf_agree_on_random_batches() -> None:
    """Variable lengths, runs of repeated labels, a 40-frame row; statically and dynamically
    shaped graphs."""
    rng = np.random.default_rng(3)
    rows = []
    for _ in range(8):
        n = int(rng.integers(1, 9))
        labels = [int(v) for v in rng.integers(1, 4, n)]  # 3 labels: many repeats
        rows.append((int(rng.integers(2 * n, 41)), labels))
    inputs = ctc_batch(rows, 40, 6, 8, seed=4)
    for graph in (ctc_graph("B", "F", 6, "L", 0), ctc_graph(8, 40, 6, 8, 0)):
        jax_loss, jax_grad = jax_loss_and_grad(graph, inputs)
        tf_loss, tf_grad = tf_loss_and_grad(graph, inputs)
        assert np.all(np.isfinite(jax_loss)) and np.all(jax_loss > 0)
        assert rel_error(tf_loss, jax_loss) <= REL_TOLERANCE
        assert rel_error(tf_grad, jax_grad) <= REL_TOLERANCE


def test_ctc_rows_no_alignment_fits_are_zero_with_no_gradient() -> None:
    """Labels longer than the frames, or repeats with no frame left for the blank between
    them: 0 and no gradient in both backends (the libraries alone give about 1e5 and 700)."""
    rows = [(2, [1, 2, 1]), (3, [1, 1, 1]), (0, [2]), (5, [1, 1, 1]), (3, [1, 2])]
    inputs = ctc_batch(rows, 5, 3, 3, seed=5)
    graph = ctc_graph("B", "F", 3, "L", 0)
    for loss, grad in (jax_loss_and_grad(graph, inputs), tf_loss_and_grad(graph, inputs)):
        np.testing.assert_array_equal(loss[:3], 0.0)
        assert not np.any(grad[:3])
        assert np.all(loss[3:] > 0) and np.all(np.isfinite(grad))
        want = [ctc_ref(inputs["logits"][i], *rows[i], 0) for i in (3, 4)]
        assert rel_error(loss[3:], np.array(want)) <= REL_TOLERANCE


def test_ctc_is_not_exportable_to_onnx() -> None:
    graph = ctc_graph("B", "F", 5, "L", 0)
    with pytest.raises(OnnxExportError, match=r"ctc/ctc_loss.*cannot be exported to ONNX"):
        to_onnx(graph, {})


def test_ctc_shapes_are_checked_and_costed() -> None:
    g = GraphBuilder()
    logits = g.input("logits", f32("B", "F", 7))
    labels = g.input("labels", TensorType("int32", ("B", "L")))
    lm = g.input("label_mask", TensorType("bool", ("B", "L")))
    with pytest.raises(CheckError, match="frame mask"):
        g.ctc_loss(logits, g.input("fm", TensorType("bool", ("B", "T"))), labels, lm)
    fm = g.input("frame_mask", TensorType("bool", ("B", "F")))
    with pytest.raises(CheckError, match="blank id 7"):
        g.ctc_loss(logits, fm, labels, lm, blank=7)
    loss = g.ctc_loss(logits, fm, labels, lm)
    assert str(g.type(loss)) == "float32[B]"
    flops = estimate(g.graph, {"B": 2, "F": 50, "L": 10}).per_op[loss]
    assert flops == 5 * 2 * 50 * 7 + 10 * 2 * 50 * 21


# ---------------------------------------------------------------------------- SpecAugment

AUG = {"freq_masks": 2, "freq_width": 5, "time_masks": 2, "time_width": 8}


def aug_graph(**attrs: int) -> Graph:
    g = GraphBuilder()
    g.layer = "aug"
    x = g.input("x", f32("B", "T", "F"))
    g.graph.outputs = [g.spec_augment(x, **(AUG | attrs))]
    return g.graph


def features(b: int, t: int, f: int, seed: int = 0) -> np.ndarray:
    """Nowhere zero, so a zero is a mask."""
    rng = np.random.default_rng(seed)
    return (1.0 + np.abs(rng.standard_normal((b, t, f)))).astype(np.float32)


def runs(masked: np.ndarray) -> list[int]:
    """Lengths of the runs of True in a 1-D mask."""
    edges = np.diff(np.concatenate([[0], masked.astype(int), [0]]))
    return list(np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1))


def check_masks(x: np.ndarray, y: np.ndarray, attrs: dict[str, int]) -> list[tuple]:
    """Each row's zeros are whole frames plus whole bins, in at most `*_masks` runs whose total
    is at most masks x width; the rest of `y` is `x`. Returns each row's (frames, bins), bins
    empty when every frame is masked (and the other way round)."""
    out = []
    for xr, yr in zip(x, y, strict=True):
        zero = yr == 0.0
        frames, bins = zero.all(axis=1), zero.all(axis=0)
        if frames.all():  # every frame masked: which bins were is unknowable
            bins = np.zeros_like(bins)
        if bins.all():
            frames = np.zeros_like(frames)
        np.testing.assert_array_equal(zero, frames[:, None] | bins[None, :])
        np.testing.assert_array_equal(yr[~zero], xr[~zero])
        kinds = ((frames, "time_masks", "time_width"), (bins, "freq_masks", "freq_width"))
        for mask, n, width in kinds:
            limit = min(attrs[width], len(mask))
            assert len(runs(mask)) <= attrs[n] and sum(mask) <= attrs[n] * limit
        out.append((tuple(np.flatnonzero(frames)), tuple(np.flatnonzero(bins))))
    return out


def jax_train(graph: Graph, x: np.ndarray, seed: int, rows: tuple | None = None) -> np.ndarray:
    ctx = JaxCtx(training=True, rng=jax.random.PRNGKey(seed), rows=rows)
    return np.asarray(jax_run_graph(graph, {}, {"x": jnp.asarray(x)}, ctx)[0])


def tf_train(graph: Graph, x: np.ndarray, seed: int) -> np.ndarray:
    @tf.function(autograph=False)
    def forward(x: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
        return tf_run_graph(graph, {}, {"x": x}, TfCtx(training=True, rng=seed))[0]

    return forward(tf.constant(x), tf.constant([seed, 0], tf.int64)).numpy()


def test_spec_augment_is_the_identity_outside_training() -> None:
    graph, x = aug_graph(), features(3, 20, 12)
    for name, run in (("jax", run_jax), ("tf", run_tf), ("onnx", run_onnx)):
        (y,) = run(graph, {}, {"x": x})
        np.testing.assert_array_equal(y, x, err_msg=name)
    assert [n.op_type for n in to_onnx(graph, {}).graph.node] == ["Identity"]  # the output's
    g = GraphBuilder()
    x_in = g.input("x", f32("B", "T", 8))
    assert g.spec_augment(x_in, 0, 5, 2, 0) == x_in  # nothing to mask: no op


@pytest.mark.parametrize("backend", ["jax", "tf"])
def test_spec_augment_masks_bands_and_spans_per_row(backend: str) -> None:
    graph, x = aug_graph(), features(16, 40, 20)
    train = jax_train if backend == "jax" else tf_train
    y = train(graph, x, 1)
    masks = check_masks(x, y, AUG)
    assert len(set(masks)) > 8  # rows draw their own masks
    assert any(m[0] for m in masks) and any(m[1] for m in masks)
    np.testing.assert_array_equal(train(graph, x, 1), y)  # the seed decides
    assert not np.array_equal(train(graph, x, 2), y)


@pytest.mark.parametrize("backend", ["jax", "tf"])
def test_spec_augment_widths_are_uniform_up_to_the_maximum(backend: str) -> None:
    """One band per row: over 400 rows, every width 0..max occurs (the maximum included)
    and the bands reach both edges; a time width above T is clipped to T."""
    train = jax_train if backend == "jax" else tf_train
    attrs = {"freq_masks": 1, "freq_width": 4, "time_masks": 1, "time_width": 10}
    x = features(400, 6, 12)
    y = train(aug_graph(**attrs), x, 3)
    masks = check_masks(x, y, attrs)
    freq_widths = {len(bins) for frames, bins in masks if len(frames) < 6}
    time_widths = {len(frames) for frames, bins in masks if len(bins) < 12}
    assert freq_widths == set(range(5)) and time_widths == set(range(7)), (freq_widths, time_widths)
    bins_hit = {b for _, bins in masks for b in bins}
    assert {0, 11} <= bins_hit


def test_spec_augment_rows_do_not_depend_on_the_data_parallel_split() -> None:
    graph, x = aug_graph(), features(8, 30, 16)
    whole = jax_train(graph, x, 5)
    for index in range(2):
        part = jax_train(graph, x[4 * index : 4 * index + 4], 5, rows=(jnp.int32(index), 2))
        np.testing.assert_array_equal(part, whole[4 * index : 4 * index + 4])


def test_spec_augment_checks_its_input() -> None:
    g = GraphBuilder()
    with pytest.raises(CheckError, match=r"\[batch, frames, bins\]"):
        g.spec_augment(g.input("x", f32("B", "T")), 1, 2, 1, 2)
    with pytest.raises(CheckError, match="negative"):
        g.spec_augment(g.input("y", f32("B", "T", 8)), 1, -2, 1, 2)
