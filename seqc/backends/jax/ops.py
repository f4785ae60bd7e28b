"""One JAX function per primitive of the op graph (`seqc.compiler.graph.PRIMITIVES`), and the
hooks the shared interpreter (`seqc.backends.interpret`) needs of JAX (`MACHINE`).

Each primitive takes the op's input arrays, its attrs, and a `Ctx` (symbol sizes, rng, training
flag: `seqc.backends.jax.context`), and returns one array. Keeping this a flat table, like Keras'
per-backend op modules, is what lets the TF and ONNX backends mirror it name for name. A scan
runs its body graph with `jax.lax.scan` over the time axis.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from seqc.backends import interpret
from seqc.backends.jax.context import DTYPES, Ctx
from seqc.backends.jax.lazy_rows import LazyTable
from seqc.backends.jax.linear_ce import linear_cross_entropy
from seqc.backends.primitives import registrar
from seqc.compiler import sinusoid
from seqc.compiler.graph import Graph, Op
from seqc.compiler.lower import fused_loss
from seqc.compiler.lower.fused_loss import rows_per_chunk

Fn = Callable[[list[jax.Array], dict[str, Any], Ctx], jax.Array]
OPS: dict[str, Fn] = {}
op = registrar(OPS)


def _unary(f: Callable[[jax.Array], jax.Array]) -> Fn:
    return lambda xs, attrs, ctx: f(xs[0])


def _binary(f: Callable[[jax.Array, jax.Array], jax.Array]) -> Fn:
    return lambda xs, attrs, ctx: f(xs[0], xs[1])


for _name, _f in {
    "neg": jnp.negative,
    "exp": jnp.exp,
    "log": jnp.log,
    "tanh": jnp.tanh,
    "sigmoid": jax.nn.sigmoid,
    "relu": jax.nn.relu,
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "silu": jax.nn.silu,
    "rsqrt": jax.lax.rsqrt,
    "sqrt": jnp.sqrt,
    "square": jnp.square,
    "sin": jnp.sin,
    "cos": jnp.cos,
    "logical_not": jnp.logical_not,
    "identity": lambda x: x,
}.items():
    OPS[_name] = _unary(_f)


@op("identity")
def _identity(xs: list, attrs: dict, ctx: Ctx) -> jax.Array:
    """The identity; with a `layout` attr (a mixture of experts' slots), the layout it asks
    for on the step's mesh (`Ctx.laid_out`)."""
    layout = attrs.get("layout")
    return xs[0] if layout is None else ctx.laid_out(xs[0], layout)


for _name, _g in {
    "add": jnp.add,
    "sub": jnp.subtract,
    "mul": jnp.multiply,
    "div": jnp.divide,
    "maximum": jnp.maximum,
    "minimum": jnp.minimum,
    "less": jnp.less,
    "less_equal": jnp.less_equal,
    "greater": jnp.greater,
    "equal": jnp.equal,
    "logical_and": jnp.logical_and,
    "logical_or": jnp.logical_or,
}.items():
    OPS[_name] = _binary(_g)


@op("constant")
def _constant(xs: list, attrs: dict, ctx: Ctx) -> jax.Array:
    """Float constants in the compute dtype, as params are: a float32 scalar would otherwise
    promote every bfloat16 activation it touches (an attention scale) back to float32."""
    value = np.asarray(attrs["value"])
    if value.dtype.kind == "f":
        return jnp.asarray(value, ctx.compute_dtype)
    return jnp.asarray(value)


@op("fill")
def _fill(xs: list, attrs: dict, ctx: Ctx) -> jax.Array:
    return jnp.full(ctx.shape(attrs["shape"], exact=True), attrs["value"], ctx.compute_dtype)


@op("cast")
def _cast(xs: list, attrs: dict, ctx: Ctx) -> jax.Array:
    dtype = DTYPES[attrs["dtype"]]
    if attrs["dtype"] == "float32":
        dtype = ctx.compute_dtype
    return xs[0].astype(dtype)


@op("where")
def _where(xs: list, attrs: dict, ctx: Ctx) -> jax.Array:
    cond, a, b = xs
    return jnp.where(cond, a, jnp.asarray(b, a.dtype))


@op("matmul", "batched_matmul")
def _matmul(xs: list, attrs: dict, ctx: Ctx) -> jax.Array:
    return jnp.matmul(xs[0], xs[1].astype(xs[0].dtype))


@op("einsum")
def _einsum(xs: list, attrs: dict, ctx: Ctx) -> jax.Array:
    return jnp.einsum(attrs["equation"], xs[0], xs[1].astype(xs[0].dtype))


def _reducer(f: Callable) -> Fn:
    return lambda xs, attrs, ctx: f(xs[0], axis=attrs["axes"], keepdims=attrs["keepdims"])


OPS["reduce_sum"] = _reducer(jnp.sum)
OPS["reduce_mean"] = _reducer(jnp.mean)
OPS["reduce_max"] = _reducer(jnp.max)


@op("softmax")
def _softmax(xs: list, attrs: dict, ctx: Ctx) -> jax.Array:
    return jax.nn.softmax(xs[0].astype(jnp.float32), axis=attrs["axis"]).astype(xs[0].dtype)


@op("log_softmax")
def _log_softmax(xs: list, attrs: dict, ctx: Ctx) -> jax.Array:
    return jax.nn.log_softmax(xs[0].astype(jnp.float32), axis=attrs["axis"])


@op("layer_norm")
def _layer_norm(xs: list, attrs: dict, ctx: Ctx) -> jax.Array:
    """Statistics in float32 even under a bfloat16 compute dtype. The variance reads the mean
    through a stop-gradient, as `tf.nn.moments` does: its derivative through the mean is zero
    (the deviations sum to zero), so the gradient is the same, without a path the compiler
    would otherwise carry through every layer's backward pass."""
    x = xs[0].astype(jnp.float32)
    i = 1
    if attrs["rms"]:
        y = x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + attrs["eps"])
    else:
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x - jax.lax.stop_gradient(mean)), axis=-1, keepdims=True)
        y = (x - mean) * jax.lax.rsqrt(var + attrs["eps"])
    if attrs["scale"]:
        y = y * xs[i]
        i += 1
    if attrs["bias"]:
        y = y + xs[i]
    return y.astype(xs[0].dtype)


@op("gather")
def _gather(xs: list, attrs: dict, ctx: Ctx) -> jax.Array:
    table, ids = xs
    if isinstance(table, LazyTable):  # a row-sparse table under adam(lazy_rows = true)
        return table.gather(ids, attrs.get("axis", 0)).astype(ctx.compute_dtype)
    return jnp.take(table, ids, axis=attrs.get("axis", 0)).astype(ctx.compute_dtype)


@op("sinusoid")
def _sinusoid(xs: list, attrs: dict, ctx: Ctx) -> jax.Array:
    """Rows of the float64-computed table, in the compute dtype (`seqc.compiler.sinusoid`)."""
    table = jnp.asarray(sinusoid.table(attrs), ctx.compute_dtype)
    return jnp.take(table, xs[0], axis=0)


@op("reshape")
def _reshape(xs: list, attrs: dict, ctx: Ctx) -> jax.Array:
    return jnp.reshape(xs[0], ctx.shape(attrs["shape"]))


@op("transpose")
def _transpose(xs: list, attrs: dict, ctx: Ctx) -> jax.Array:
    return jnp.transpose(xs[0], attrs["perm"])


@op("concat")
def _concat(xs: list, attrs: dict, ctx: Ctx) -> jax.Array:
    return jnp.concatenate(xs, axis=attrs["axis"])


@op("slice")
def _slice(xs: list, attrs: dict, ctx: Ctx) -> jax.Array:
    return jax.lax.slice_in_dim(xs[0], attrs["start"], attrs["end"], axis=attrs["axis"])


@op("iota")
def _iota(xs: list, attrs: dict, ctx: Ctx) -> jax.Array:
    return jnp.arange(xs[0].shape[attrs["axis"]], dtype=jnp.int32)


@op("causal_mask")
def _causal(xs: list, attrs: dict, ctx: Ctx) -> jax.Array:
    n = xs[0].shape[attrs["axis"]]
    return jnp.tril(jnp.ones((n, n), jnp.bool_))


@op("attention")
def _attention(xs: list, attrs: dict, ctx: Ctx) -> jax.Array:
    """The fused attention of `seqc.compiler.passes.fuse_attention`: cuDNN's flash attention
    through `jax.nn.dot_product_attention` on a GPU in half precision (what its kernel takes),
    else the chain the pass replaced, op for op, so that the pass changes no number."""
    q, k, v, *rest = xs
    allowed = rest[0] if rest else None
    if jax.default_backend() == "gpu" and q.dtype in (jnp.bfloat16, jnp.float16):
        try:
            return jax.nn.dot_product_attention(
                q,
                k.astype(q.dtype),
                v.astype(q.dtype),
                mask=allowed,
                scale=1.0 if attrs["scale"] is None else attrs["scale"],
                is_causal=attrs["causal"],
                implementation="cudnn",
            )
        except Exception:  # a shape, layout or cuDNN version the kernel does not take
            pass
    if attrs["scale"] is not None:
        q = q * _constant([], {"value": attrs["scale"]}, ctx)
    scores = _einsum([q, k], {"equation": "bqhd,bkhd->bhqk"}, ctx)
    if attrs["causal"]:
        tri = jnp.tril(jnp.ones((q.shape[1], k.shape[1]), jnp.bool_))
        allowed = tri if allowed is None else jnp.logical_and(allowed, tri)
    if allowed is not None:
        scores = _where([allowed, scores, attrs["fill"]], {}, ctx)
    probs = _softmax([scores], {"axis": -1}, ctx)
    return _einsum([probs, v], {"equation": "bhqk,bkhd->bqhd"}, ctx)


@op("linear_cross_entropy")
def _linear_cross_entropy(xs: list, attrs: dict, ctx: Ctx) -> jax.Array:
    """The output layer and cross-entropy fused by `seqc.compiler.lower.fused_loss`."""
    rows = None
    if jax.default_backend() != "cpu":  # no cache to fit: chunks that fill the device
        rows = rows_per_chunk(xs[1].shape[attrs["vocab_axis"]], accelerator=True)
    return fused_loss.call(linear_cross_entropy, xs, attrs, rows)


@op("dropout")
def _dropout(xs: list, attrs: dict, ctx: Ctx) -> jax.Array:
    x = xs[0]
    if not ctx.training or attrs["rate"] <= 0.0:
        return x
    shape = list(x.shape)
    for a in attrs["broadcast_axes"]:
        shape[a] = 1
    key, p = ctx.next_key(), ctx.keep(attrs["rate"])
    if ctx.rows is None or 0 in attrs["broadcast_axes"]:  # whole batch, or a mask for all rows
        keep = jax.random.bernoulli(key, p, tuple(shape))
    else:  # this device's rows of the whole batch's mask (axis 0 is the batch, row-major)
        index, count = ctx.rows
        whole = jax.random.bernoulli(key, p, (shape[0] * count, *shape[1:]))
        keep = jax.lax.dynamic_slice_in_dim(whole, index * shape[0], shape[0], axis=0)
    scale = jnp.asarray(p, x.dtype)  # the dtype a Python float's weak type would take
    return jnp.where(keep, x / scale, jnp.zeros((), x.dtype)).astype(x.dtype)


@op("conv1d")
def _conv1d(xs: list, attrs: dict, ctx: Ctx) -> jax.Array:
    """XLA's "SAME" puts the odd padding step on the right; causal pads `width - 1` steps on
    the left; groups are XLA's feature groups (output channels in contiguous blocks per group,
    the layout ONNX's and TF's grouped convolutions share)."""
    x, w = xs
    width = w.shape[0]
    pad = {"causal": [(width - 1, 0)], "same": "SAME", "valid": "VALID"}[attrs["padding"]]
    return jax.lax.conv_general_dilated(
        x,
        w.astype(x.dtype),
        (attrs["stride"],),
        pad,
        dimension_numbers=("NWC", "WIO", "NWC"),
        feature_group_count=attrs.get("groups", 1),
    )


@op("conv2d")
def _conv2d(xs: list, attrs: dict, ctx: Ctx) -> jax.Array:
    x, w = xs
    return jax.lax.conv_general_dilated(
        x,
        w.astype(x.dtype),
        tuple(attrs["strides"]),
        attrs["padding"].upper(),
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    )


def _bands(u: jax.Array, size: int, max_width: int) -> jax.Array:
    """bool[rows, size]: the union of bands whose (width, start) come from uniform draws
    u[rows, n, 2]: width uniform in [0, max_width], start uniform in [0, size - width]."""
    max_width = min(max_width, size)
    width = jnp.minimum(jnp.floor(u[..., 0] * (max_width + 1)), max_width)
    start = jnp.minimum(jnp.floor(u[..., 1] * (size - width + 1)), size - width)
    pos = jnp.arange(size, dtype=u.dtype)[None, None, :]
    inside = (pos >= start[..., None]) & (pos < (start + width)[..., None])
    return jnp.any(inside, axis=1)


@op("spec_augment")
def _spec_augment(xs: list, attrs: dict, ctx: Ctx) -> jax.Array:
    """Frequency bands and time spans set to 0 in training (`GraphBuilder.spec_augment`).
    The draws are per row, so under a data-parallel split (`ctx.rows`) this device draws the
    whole batch's and keeps its rows, as dropout does: the masks do not depend on the split."""
    x = xs[0]
    if not ctx.training:
        return x
    rows, frames, bins = x.shape
    n_f, n_t = attrs["freq_masks"], attrs["time_masks"]
    index, count = ctx.rows if ctx.rows is not None else (0, 1)
    u = jax.random.uniform(ctx.next_key(), (rows * count, n_f + n_t, 2), jnp.float32)
    if count != 1:
        u = jax.lax.dynamic_slice_in_dim(u, index * rows, rows, axis=0)
    masked = jnp.zeros((rows, frames, bins), jnp.bool_)
    if n_f and attrs["freq_width"]:
        masked = masked | _bands(u[:, :n_f], bins, attrs["freq_width"])[:, None, :]
    if n_t and attrs["time_width"]:
        masked = masked | _bands(u[:, n_f:], frames, attrs["time_width"])[:, :, None]
    return jnp.where(masked, jnp.zeros((), x.dtype), x)


@op("vtlp")
def _vtlp(xs: list, attrs: dict, ctx: Ctx) -> jax.Array:
    """Each row's frequency axis warped by its own factor in training (`GraphBuilder.vtlp`);
    per-row draws of the whole batch under a data-parallel split, as spec_augment's."""
    x = xs[0]
    if not ctx.training:
        return x
    rows, bins = x.shape[0], x.shape[-1]
    index, count = ctx.rows if ctx.rows is not None else (0, 1)
    u = jax.random.uniform(ctx.next_key(), (rows * count,), jnp.float32)
    if count != 1:
        u = jax.lax.dynamic_slice_in_dim(u, index * rows, rows, axis=0)
    factor = attrs["low"] + u * (attrs["high"] - attrs["low"])
    nyquist = jnp.float32(bins - 1)
    f = jnp.arange(bins, dtype=jnp.float32)[None, :]
    a = factor[:, None]
    knee = attrs["boundary"] * nyquist * jnp.minimum(a, 1.0) / a  # the source's bend
    source = jnp.where(
        f <= a * knee, f / a, nyquist - (nyquist - f) * (nyquist - knee) / (nyquist - a * knee)
    )
    source = jnp.clip(source, 0.0, nyquist)
    low = jnp.minimum(jnp.floor(source), nyquist - 1).astype(jnp.int32)
    w = (source - low)[:, None, :].astype(x.dtype)
    take = jnp.broadcast_to(low[:, None, :], x.shape)
    below = jnp.take_along_axis(x, take, axis=-1)
    above = jnp.take_along_axis(x, take + 1, axis=-1)
    return below + w * (above - below)


def _ctc_feasible(frame_mask: jax.Array, labels: jax.Array, label_mask: jax.Array) -> jax.Array:
    """bool[B]: whether each row's labels fit its frames: a CTC path needs one frame per
    label plus a blank between each pair of equal neighbours."""
    frames = jnp.sum(frame_mask.astype(jnp.int32), axis=1)
    both = label_mask[:, 1:] & label_mask[:, :-1]
    repeats = jnp.sum(((labels[:, 1:] == labels[:, :-1]) & both).astype(jnp.int32), axis=1)
    return frames >= jnp.sum(label_mask.astype(jnp.int32), axis=1) + repeats


@op("ctc_loss")
def _ctc_loss(xs: list, attrs: dict, ctx: Ctx) -> jax.Array:
    """optax's CTC in float32. A row that no alignment fits is given an empty label for the
    library call (so its value and gradient are finite) and a loss of 0 (see
    `GraphBuilder.ctc_loss`), so it contributes no gradient. Padded labels are set to the
    blank id, as in the TF table."""
    logits, frame_mask, labels, label_mask = xs
    frame_mask, label_mask = frame_mask.astype(jnp.bool_), label_mask.astype(jnp.bool_)
    labels = jnp.where(label_mask, labels.astype(jnp.int32), attrs["blank"])
    ok = _ctc_feasible(frame_mask, labels, label_mask)
    label_mask = label_mask & ok[:, None]
    loss = optax.ctc_loss(
        logits.astype(jnp.float32),
        1.0 - frame_mask.astype(jnp.float32),
        labels,
        1.0 - label_mask.astype(jnp.float32),
        blank_id=attrs["blank"],
    )
    return jnp.where(ok, loss, 0.0)


@op("take_along")
def _take_along(xs: list, attrs: dict, ctx: Ctx) -> jax.Array:
    x, ids = xs
    return jnp.take_along_axis(x, ids[..., None].astype(jnp.int32), axis=-1)[..., 0]


@op("argmax")
def _argmax(xs: list, attrs: dict, ctx: Ctx) -> jax.Array:
    return jnp.argmax(xs[0], axis=-1).astype(jnp.int32)


# ------------------------------------------------------------------------------ the machine


class JaxMachine(interpret.Machine):
    """JAX's hooks: float32 params in the compute dtype, scans with `jax.lax.scan`."""

    name = "JAX"
    table = OPS

    def param(self, value: Any, op: Op, ctx: Ctx) -> Any:
        if isinstance(value, LazyTable):
            return value  # its gathers cast the rows they read
        return value.astype(ctx.compute_dtype) if value.dtype == jnp.float32 else value

    def scan(self, graph: Graph, op: Op, args: list, params: Any, ctx: Ctx) -> jax.Array:
        body = graph.subgraphs[op.attrs["body"]]
        n_xs = op.attrs["n_xs"]
        xs = [jnp.swapaxes(x.astype(ctx.compute_dtype), 0, 1) for x in args[:n_xs]]  # time first
        carries = tuple(c.astype(ctx.compute_dtype) for c in args[n_xs:])

        def step(carry: tuple, x_t: tuple) -> tuple:
            named = {f"x{i}": x for i, x in enumerate(x_t)}
            named |= {f"c{i}": c for i, c in enumerate(carry)}
            outs = interpret.evaluate(self, body, params, named, ctx)
            return tuple(o.astype(ctx.compute_dtype) for o in outs[1:]), outs[0]

        _, ys = jax.lax.scan(step, carries, tuple(xs), reverse=op.attrs["reverse"])
        return jnp.swapaxes(ys, 0, 1)


MACHINE = JaxMachine()


def run_graph(
    graph: Graph, params: Any, inputs: dict[str, Any], ctx: Ctx | None = None
) -> list[jax.Array]:
    """The graph's outputs on JAX (trace it inside `jax.jit` to compile it)."""
    return interpret.run(MACHINE, graph, params, inputs, ctx or Ctx())
