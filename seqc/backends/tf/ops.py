"""One TensorFlow function per primitive of the op graph (`seqc.compiler.graph.PRIMITIVES`), and
the hooks the shared interpreter (`seqc.backends.interpret`) needs of TF (`MACHINE`).

The mirror of `seqc.backends.jax.ops`, name for name: each takes the op's input tensors, its attrs
and a `Ctx` (symbol sizes, rng seed, training flag: `seqc.backends.tf.context`), and returns one
tensor. Where TF and JAX differ in a default, the JAX behaviour is the contract: integer constants
are int32 (JAX without x64), "same" convolution padding puts the odd step on the right (as XLA
does), gelu is the exact erf form, and mixed-dtype binary ops promote as `graph._result_dtype`
says instead of failing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from seqc.backends import interpret
from seqc.backends.primitives import registrar
from seqc.backends.tf.context import DTYPES, Ctx
from seqc.backends.tf.lazy_rows import LazyTable
from seqc.backends.tf.linear_ce import linear_cross_entropy
from seqc.backends.tf.scan import scan as run_scan
from seqc.backends.tf.scopes import SIGNAL_SCOPE, layer_scope
from seqc.compiler import sinusoid
from seqc.compiler.graph import Graph, Op
from seqc.compiler.lower import fused_loss

Fn = Callable[[list[tf.Tensor], dict[str, Any], Ctx], tf.Tensor]
OPS: dict[str, Fn] = {}
op = registrar(OPS)


def _dim(x: tf.Tensor, axis: int) -> Any:
    """A static size where TF knows it, else the dynamic one."""
    n = x.shape[axis]
    return n if n is not None else tf.shape(x)[axis]


def _promote(a: tf.Tensor, b: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """JAX promotes mixed operands; TF refuses them. Cast to the float one, else to `a`'s."""
    a, b = tf.convert_to_tensor(a), tf.convert_to_tensor(b)
    if a.dtype == b.dtype:
        return a, b
    if b.dtype.is_floating and not a.dtype.is_floating:
        return tf.cast(a, b.dtype), b
    return a, tf.cast(b, a.dtype)


def _unary(f: Callable[[tf.Tensor], tf.Tensor]) -> Fn:
    return lambda xs, attrs, ctx: f(xs[0])


def _binary(f: Callable[[tf.Tensor, tf.Tensor], tf.Tensor]) -> Fn:
    return lambda xs, attrs, ctx: f(*_promote(xs[0], xs[1]))


for _name, _f in {
    "neg": tf.negative,
    "exp": tf.exp,
    "log": tf.math.log,
    "tanh": tf.tanh,
    "sigmoid": tf.sigmoid,
    "relu": tf.nn.relu,
    "gelu": lambda x: tf.nn.gelu(x, approximate=False),
    "silu": tf.nn.silu,
    "rsqrt": tf.math.rsqrt,
    "sqrt": tf.sqrt,
    "square": tf.square,
    "sin": tf.sin,
    "cos": tf.cos,
    "logical_not": tf.logical_not,
    "identity": lambda x: x,
}.items():
    OPS[_name] = _unary(_f)

for _name, _g in {
    "add": tf.add,
    "sub": tf.subtract,
    "mul": tf.multiply,
    "div": tf.divide,
    "maximum": tf.maximum,
    "minimum": tf.minimum,
    "less": tf.less,
    "less_equal": tf.less_equal,
    "greater": tf.greater,
    "equal": tf.equal,
    "logical_and": tf.logical_and,
    "logical_or": tf.logical_or,
}.items():
    OPS[_name] = _binary(_g)


@op("constant")
def _constant(xs: list, attrs: dict, ctx: Ctx) -> tf.Tensor:
    """Float constants in the compute dtype, as params are (see the JAX table); integers as
    int32, as JAX gives them without x64 (numpy would make a Python int an int64)."""
    value = np.asarray(attrs["value"])
    if value.dtype.kind == "f":
        return tf.constant(value, ctx.compute_dtype)
    if value.dtype.kind in "iu":
        return tf.constant(value, tf.int32)
    return tf.constant(value)


@op("fill")
def _fill(xs: list, attrs: dict, ctx: Ctx) -> tf.Tensor:
    shape = ctx.shape(attrs["shape"], exact=True)
    return tf.fill(shape, tf.constant(attrs["value"], ctx.compute_dtype))


@op("cast")
def _cast(xs: list, attrs: dict, ctx: Ctx) -> tf.Tensor:
    dtype = DTYPES[attrs["dtype"]]
    if attrs["dtype"] == "float32":
        dtype = ctx.compute_dtype
    return tf.cast(xs[0], dtype)


MASKED = -1e8
"""A fill at or below this is attention's "minus infinity" (`lower.attention.NEG_INF`)."""


@op("where")
def _where(xs: list, attrs: dict, ctx: Ctx) -> tf.Tensor:
    cond, a, b = xs
    b = tf.cast(b, a.dtype)
    fill = tf.get_static_value(b) if ctx.portable and b.shape.rank == 0 else None
    if fill is not None and float(fill) <= MASKED:
        # For deployment: a masked score 30 below the row's smallest instead of -1e9. The
        # softmax weight it gets is under e^-30 of any real one (what -1e9 gives, to 1e-13),
        # and full-int8 calibration sees a range of real scores, not [-1e9, max], where
        # every real score would round into one or two int8 steps.
        b = tf.reduce_min(a, axis=-1, keepdims=True) - 30.0
    return tf.where(cond, a, b)


@op("matmul", "batched_matmul")
def _matmul(xs: list, attrs: dict, ctx: Ctx) -> tf.Tensor:
    """x[..., k] @ w[k, n] as one 2-D matmul over the flattened leading dims (`tf.tensordot`
    reshapes), as JAX's dot_general contracts it. `tf.matmul` would broadcast w as a batch
    matmul, whose gradient for w is one small product per batch row, then a sum: at the
    benchmark's size that made a [32, 256, 4000] temporary for the tied output layer alone."""
    x, w = xs[0], tf.cast(xs[1], xs[0].dtype)
    if w.shape.rank == 2 and x.shape.rank > 2:
        return tf.tensordot(x, w, axes=[[-1], [0]])
    return tf.matmul(x, w)


@op("einsum")
def _einsum(xs: list, attrs: dict, ctx: Ctx) -> tf.Tensor:
    return tf.einsum(attrs["equation"], xs[0], tf.cast(xs[1], xs[0].dtype))


def _reducer(f: Callable) -> Fn:
    return lambda xs, attrs, ctx: f(xs[0], axis=list(attrs["axes"]), keepdims=attrs["keepdims"])


OPS["reduce_sum"] = _reducer(tf.reduce_sum)
OPS["reduce_mean"] = _reducer(tf.reduce_mean)
OPS["reduce_max"] = _reducer(tf.reduce_max)


@op("softmax")
def _softmax(xs: list, attrs: dict, ctx: Ctx) -> tf.Tensor:
    y = tf.nn.softmax(tf.cast(xs[0], tf.float32), axis=attrs["axis"])
    return tf.cast(y, xs[0].dtype)


@op("log_softmax")
def _log_softmax(xs: list, attrs: dict, ctx: Ctx) -> tf.Tensor:
    return tf.nn.log_softmax(tf.cast(xs[0], tf.float32), axis=attrs["axis"])


@op("layer_norm")
def _layer_norm(xs: list, attrs: dict, ctx: Ctx) -> tf.Tensor:
    """Statistics in float32 even under a bfloat16 compute dtype. The variance reads the mean
    through a stop-gradient, as `tf.nn.moments` does: its derivative through the mean is zero
    (the deviations sum to zero), so the gradient is the same, and XLA's backward pass for the
    benchmark LM shrinks from 1,143 multiplies and 231 copies to 359 and 69."""
    x = tf.cast(xs[0], tf.float32)
    i = 1
    if attrs["rms"]:
        y = x * tf.math.rsqrt(tf.reduce_mean(tf.square(x), axis=-1, keepdims=True) + attrs["eps"])
    else:
        mean = tf.reduce_mean(x, axis=-1, keepdims=True)
        var = tf.reduce_mean(tf.square(x - tf.stop_gradient(mean)), axis=-1, keepdims=True)
        y = (x - mean) * tf.math.rsqrt(var + attrs["eps"])
    if attrs["scale"]:
        y = y * tf.cast(xs[i], tf.float32)
        i += 1
    if attrs["bias"]:
        y = y + tf.cast(xs[i], tf.float32)
    return tf.cast(y, xs[0].dtype)


@op("gather")
def _gather(xs: list, attrs: dict, ctx: Ctx) -> tf.Tensor:
    table, ids = xs
    if isinstance(table, LazyTable):  # a row-sparse table under adam(lazy_rows = true)
        return tf.cast(table.gather(ids, attrs.get("axis", 0)), ctx.compute_dtype)
    return tf.cast(tf.gather(table, ids, axis=attrs.get("axis", 0)), ctx.compute_dtype)


@op("sinusoid")
def _sinusoid(xs: list, attrs: dict, ctx: Ctx) -> tf.Tensor:
    """Rows of the float64-computed table, in the compute dtype (`seqc.compiler.sinusoid`).

    A portable graph (a SavedModel, the TFLite model converted from it) computes them from the
    positions instead, as the ONNX emitter does: gathered, the table is a constant the
    converter stores whole (max_length x d floats, 2 MB at 4096 x 128, more than a small
    model's weights). The ops run under `SIGNAL_SCOPE`, which full-int8 TFLite keeps float."""
    if not ctx.portable:
        return tf.gather(tf.constant(sinusoid.table(attrs), ctx.compute_dtype), xs[0])
    with tf.name_scope(SIGNAL_SCOPE):
        hi, lo = sinusoid.split_frequencies(attrs)
        t = tf.cast(xs[0], tf.float32)[:, None]
        a, b = t * tf.constant(hi[None, :]), t * tf.constant(lo[None, :])  # [n, d/2]
        sin_a, cos_a, sin_b, cos_b = tf.sin(a), tf.cos(a), tf.sin(b), tf.cos(b)
        sin = sin_a * cos_b + cos_a * sin_b  # sin(a + b), a exact: see split_frequencies
        cos = cos_a * cos_b - sin_a * sin_b
        return tf.cast(tf.concat([sin, cos], axis=1), ctx.compute_dtype)


@op("reshape")
def _reshape(xs: list, attrs: dict, ctx: Ctx) -> tf.Tensor:
    return tf.reshape(xs[0], ctx.shape(attrs["shape"]))


@op("transpose")
def _transpose(xs: list, attrs: dict, ctx: Ctx) -> tf.Tensor:
    return tf.transpose(xs[0], list(attrs["perm"]))


@op("concat")
def _concat(xs: list, attrs: dict, ctx: Ctx) -> tf.Tensor:
    return tf.concat(xs, axis=attrs["axis"])


@op("slice")
def _slice(xs: list, attrs: dict, ctx: Ctx) -> tf.Tensor:
    index = (slice(None),) * attrs["axis"] + (slice(attrs["start"], attrs["end"]),)
    return xs[0][index]


def partition_slices(graph: Graph, op: Op, x: tf.Tensor, ctx: Ctx) -> tf.Tensor | None:
    """`op`'s part of `x` when the slices of `x` along one axis partition it (a fused
    product's results, `seqc.compiler.passes.fuse_matmul`): one `tf.split` for all of them,
    whose gradient is one concat. Sliced one by one, each part's gradient is a zero tensor of
    x's full size with the part written in, and their sum: three full-size temporaries for a
    fused q/k/v, which made the passes cost 6% of a step without XLA. None otherwise, under
    a placement (each slice runs on its own op's device there), and in a portable graph (a
    SavedModel): it has no gradient to save, and TFLite's int8 quantizer quantizes a split
    even where its layer is kept float, which put a front end's spectrum, split into its real
    and imaginary parts, through int8 (the robust recogniser's TFLite int8 artifact, 200 dev
    utterances: 1.29 WER with the split, 0.65 without, the model 0.48)."""
    if ctx.placed or ctx.portable:
        return None
    key = (id(graph), op.inputs[0])
    if key not in ctx.parts or ctx.parts[key][0] is not x:
        axis = op.attrs["axis"]
        siblings = sorted(
            (o for o in graph.ops if o.kind == "slice" and o.inputs == op.inputs),
            key=lambda o: o.attrs["start"],
        )
        size = graph.ops[op.inputs[0]].type.shape[axis]
        bounds = [0] + [o.attrs["end"] for o in siblings]
        if (
            len(siblings) < 2
            or any(o.attrs["axis"] != axis for o in siblings)
            or [o.attrs["start"] for o in siblings] != bounds[:-1]
            or bounds[-1] != size
        ):
            ctx.parts[key] = (x, {})
        else:
            sizes = [o.attrs["end"] - o.attrs["start"] for o in siblings]
            parts = tf.split(x, sizes, axis=axis)
            ctx.parts[key] = (x, dict(zip((o.id for o in siblings), parts, strict=True)))
    return ctx.parts[key][1].get(op.id)


@op("iota")
def _iota(xs: list, attrs: dict, ctx: Ctx) -> tf.Tensor:
    return tf.range(_dim(xs[0], attrs["axis"]), dtype=tf.int32)


@op("causal_mask")
def _causal(xs: list, attrs: dict, ctx: Ctx) -> tf.Tensor:
    t = tf.range(_dim(xs[0], attrs["axis"]))
    return t[:, None] >= t[None, :]


@op("attention")
def _attention(xs: list, attrs: dict, ctx: Ctx) -> tf.Tensor:
    """The fused attention of `seqc.compiler.passes.fuse_attention`. TensorFlow has no fused
    attention kernel to call (XLA fuses what it can of the chain itself): this is the chain
    the pass replaced, op for op, so that the pass changes no number."""
    q, k, v, *rest = xs
    allowed = rest[0] if rest else None
    if attrs["scale"] is not None:
        q = q * _constant([], {"value": attrs["scale"]}, ctx)
    scores = _einsum([q, k], {"equation": "bqhd,bkhd->bhqk"}, ctx)
    if attrs["causal"]:
        t = tf.range(_dim(q, 1))
        tri = t[:, None] >= t[None, :]
        allowed = tri if allowed is None else tf.logical_and(allowed, tri)
    if allowed is not None:
        scores = _where([allowed, scores, tf.constant(attrs["fill"], scores.dtype)], {}, ctx)
    probs = _softmax([scores], {"axis": -1}, ctx)
    return _einsum([probs, v], {"equation": "bhqk,bkhd->bqhd"}, ctx)


@op("linear_cross_entropy")
def _linear_cross_entropy(xs: list, attrs: dict, ctx: Ctx) -> tf.Tensor:
    """The output layer and cross-entropy fused by `seqc.compiler.lower.fused_loss`."""
    return fused_loss.call(linear_cross_entropy, xs, attrs)


@op("dropout")
def _dropout(xs: list, attrs: dict, ctx: Ctx) -> tf.Tensor:
    x = xs[0]
    if not ctx.training or attrs["rate"] <= 0.0:
        return x
    shape = [_dim(x, a) for a in range(x.shape.rank)]
    for a in attrs["broadcast_axes"]:
        shape[a] = 1
    keep = tf.random.stateless_uniform(shape, seed=ctx.next_key()) < 1.0 - attrs["rate"]
    return tf.where(keep, x / (1.0 - attrs["rate"]), tf.zeros((), x.dtype))


@op("conv1d")
def _conv1d(xs: list, attrs: dict, ctx: Ctx) -> tf.Tensor:
    """TF's "SAME" puts the odd padding step on the right, as XLA's does; causal pads
    `width - 1` steps on the left and runs "VALID".

    Groups: `tf.nn.conv1d` has no grouped kernel on CPU, so a depthwise convolution
    (groups == c_in) runs as `tf.nn.depthwise_conv2d` over a height-1 image (what TFLite
    converts to DEPTHWISE_CONV_2D; its strides must be equal, and a stride along a height
    of 1 changes nothing), and other group counts as one convolution per group,
    concatenated. Output channels come in contiguous blocks per group, as in XLA and ONNX.
    """
    x, w = xs
    w = tf.cast(w, x.dtype)
    width, stride, groups = int(w.shape[0]), attrs["stride"], attrs.get("groups", 1)
    padding = "SAME" if attrs["padding"] == "same" else "VALID"
    if attrs["padding"] == "causal":
        x = tf.pad(x, [[0, 0], [width - 1, 0], [0, 0]])
    if groups == 1:
        return tf.nn.conv1d(x, w, stride, padding)
    c_in, c_out = int(x.shape[-1]), int(w.shape[2])
    if groups == c_in:
        kernel = tf.reshape(w, [1, width, c_in, c_out // c_in])  # [.., g * mult + m] -> [g, m]
        y = tf.nn.depthwise_conv2d(x[:, None], kernel, [1, stride, stride, 1], padding)
        return y[:, 0]
    parts = zip(tf.split(x, groups, axis=-1), tf.split(w, groups, axis=-1), strict=True)
    return tf.concat([tf.nn.conv1d(a, k, stride, padding) for a, k in parts], axis=-1)


@op("conv2d")
def _conv2d(xs: list, attrs: dict, ctx: Ctx) -> tf.Tensor:
    x, w = xs
    sh, sw = attrs["strides"]
    return tf.nn.conv2d(x, tf.cast(w, x.dtype), [1, sh, sw, 1], attrs["padding"].upper())


def _bands(u: tf.Tensor, size: Any, max_width: int) -> tf.Tensor:
    """bool[rows, size]: the union of bands whose (width, start) come from uniform draws
    u[rows, n, 2] (the JAX table's `_bands`, with `size` possibly known only at run time)."""
    n = tf.cast(size, tf.float32)
    top = tf.minimum(float(max_width), n)
    width = tf.minimum(tf.floor(u[..., 0] * (top + 1.0)), top)
    start = tf.minimum(tf.floor(u[..., 1] * (n - width + 1.0)), n - width)
    pos = tf.cast(tf.range(size), tf.float32)[None, None, :]
    inside = (pos >= start[..., None]) & (pos < (start + width)[..., None])
    return tf.reduce_any(inside, axis=1)


@op("spec_augment")
def _spec_augment(xs: list, attrs: dict, ctx: Ctx) -> tf.Tensor:
    """Frequency bands and time spans set to 0 in training (`GraphBuilder.spec_augment`),
    drawn from a stateless seed as dropout's masks are; the identity otherwise."""
    x = xs[0]
    if not ctx.training:
        return x
    rows, frames, bins = (_dim(x, a) for a in range(3))
    n_f, n_t = attrs["freq_masks"], attrs["time_masks"]
    u = tf.random.stateless_uniform([rows, n_f + n_t, 2], seed=ctx.next_key())
    masked = tf.zeros([rows, 1, 1], tf.bool)
    if n_f and attrs["freq_width"]:
        masked = masked | _bands(u[:, :n_f], bins, attrs["freq_width"])[:, None, :]
    if n_t and attrs["time_width"]:
        masked = masked | _bands(u[:, n_f:], frames, attrs["time_width"])[:, :, None]
    return tf.where(masked, tf.zeros((), x.dtype), x)


@op("vtlp")
def _vtlp(xs: list, attrs: dict, ctx: Ctx) -> tf.Tensor:
    """Each row's frequency axis warped by its own factor in training (`GraphBuilder.vtlp`),
    the factors drawn from a stateless seed; the identity otherwise."""
    x = xs[0]
    if not ctx.training:
        return x
    rows, bins = _dim(x, 0), int(x.shape[-1])
    u = tf.random.stateless_uniform([rows], seed=ctx.next_key())
    factor = attrs["low"] + u * (attrs["high"] - attrs["low"])
    nyquist = float(bins - 1)
    f = tf.range(bins, dtype=tf.float32)[None, :]
    a = factor[:, None]
    knee = attrs["boundary"] * nyquist * tf.minimum(a, 1.0) / a
    source = tf.where(
        f <= a * knee, f / a, nyquist - (nyquist - f) * (nyquist - knee) / (nyquist - a * knee)
    )
    source = tf.clip_by_value(source, 0.0, nyquist)
    low = tf.cast(tf.minimum(tf.floor(source), nyquist - 1.0), tf.int32)
    w = tf.cast(source - tf.cast(low, tf.float32), x.dtype)[:, None, :]
    below = tf.gather(x, low, axis=2, batch_dims=1)
    above = tf.gather(x, low + 1, axis=2, batch_dims=1)
    return below + w * (above - below)


@op("ctc_loss")
def _ctc_loss(xs: list, attrs: dict, ctx: Ctx) -> tf.Tensor:
    """`tf.nn.ctc_loss` on dense labels, in float32. As in the JAX table, a row that no
    alignment fits runs with an empty label (TF's own value for it is about 700, optax's
    about 1e5) and gets a loss of 0, so it gives no gradient; padded labels are set to the
    blank id so that no out-of-range id reaches the library."""
    logits, frame_mask, labels, label_mask = xs
    frame_mask, label_mask = tf.cast(frame_mask, tf.bool), tf.cast(label_mask, tf.bool)
    blank = attrs["blank"]
    labels = tf.where(label_mask, tf.cast(labels, tf.int32), blank)
    frames = tf.reduce_sum(tf.cast(frame_mask, tf.int32), axis=1)
    both = label_mask[:, 1:] & label_mask[:, :-1]
    repeats = tf.reduce_sum(tf.cast((labels[:, 1:] == labels[:, :-1]) & both, tf.int32), axis=1)
    lengths = tf.reduce_sum(tf.cast(label_mask, tf.int32), axis=1)
    ok = frames >= lengths + repeats
    loss = tf.nn.ctc_loss(
        labels,
        tf.cast(logits, tf.float32),
        tf.where(ok, lengths, 0),
        frames,
        logits_time_major=False,
        blank_index=blank,
    )
    return tf.where(ok, loss, 0.0)


@op("take_along")
def _take_along(xs: list, attrs: dict, ctx: Ctx) -> tf.Tensor:
    x, ids = xs
    ids = tf.cast(ids, tf.int32)
    return tf.gather(x, ids[..., None], axis=-1, batch_dims=ids.shape.rank)[..., 0]


@op("argmax")
def _argmax(xs: list, attrs: dict, ctx: Ctx) -> tf.Tensor:
    return tf.argmax(xs[0], axis=-1, output_type=tf.int32)


# ------------------------------------------------------------------------------ the machine


class TfMachine(interpret.Machine):
    """TF's hooks: inputs as tensors (copied onto their device under a placement), float32
    params in the compute dtype, dims unknown at trace time read with `tf.shape`, ops pinned
    with `tf.device`, scans as `tf.while_loop`s (`seqc.backends.tf.scan`)."""

    name = "TensorFlow"
    table = OPS

    def rank(self, value: Any) -> int:
        return int(tf.convert_to_tensor(value).shape.rank)

    def dim(self, value: Any, axis: int) -> Any:
        return _dim(tf.convert_to_tensor(value), axis)

    def input(self, value: Any, op: Op, ctx: Ctx) -> tf.Tensor:
        x = tf.convert_to_tensor(value)
        return tf.identity(x) if ctx.placed else x

    def param(self, value: Any, op: Op, ctx: Ctx) -> tf.Tensor:
        if isinstance(value, LazyTable):
            return value  # its gathers cast the rows they read
        p = tf.convert_to_tensor(value)
        return tf.cast(p, ctx.compute_dtype) if p.dtype == tf.float32 else p

    def apply(self, graph: Graph, op: Op, args: list, ctx: Ctx) -> Any:
        if not op.layer:
            return self._apply(graph, op, args, ctx)
        # Absolute (the trailing /): every op of a layer under one scope, never `norm_in_1`,
        # the split that takes a layer's sibling slices at once included
        with tf.name_scope(f"{layer_scope(op.layer)}/"):
            return self._apply(graph, op, args, ctx)

    def _apply(self, graph: Graph, op: Op, args: list, ctx: Ctx) -> Any:
        # (no `:=` here: AutoGraph cannot convert it, and says so in a warning on every run)
        part = partition_slices(graph, op, args[0], ctx) if op.kind == "slice" else None
        if part is not None:
            return part
        return super().apply(graph, op, args, ctx)

    def scan(self, graph: Graph, op: Op, args: list, params: Any, ctx: Ctx) -> tf.Tensor:
        return run_scan(self, graph, op, args, params, ctx)

    def device(self, device: Any) -> Any:
        return tf.device(device) if device else super().device(device)


MACHINE = TfMachine()


def run_graph(
    graph: Graph,
    params: Any,
    inputs: dict[str, Any],
    ctx: Ctx | None = None,
    placement: dict[int, str] | None = None,
) -> list[tf.Tensor]:
    """The graph's outputs on TF (trace it inside `tf.function` to compile it); `placement`
    maps op ids to TF device names (`/device:CPU:1`)."""
    return interpret.run(MACHINE, graph, params, inputs, ctx or Ctx(), placement)
