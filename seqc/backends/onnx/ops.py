"""One ONNX emitter per primitive of the op graph (`seqc.compiler.graph.PRIMITIVES`).

The mirror of `seqc.backends.jax.ops`, name for name: each takes the ONNX value names of the op's
inputs, its attrs and a `Ctx` (`seqc.backends.onnx.context`), appends one node or a few to the
graph being built, and returns the name of the value that holds the op's result. The JAX table
is the contract, as it is for TF: integer constants are int32, float constants float32,
mixed-dtype binary ops promote to the float operand, "same" convolution padding puts the odd
step on the right, gelu is the exact erf form.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import TensorProto, numpy_helper

from seqc.backends.onnx.context import DTYPES, Ctx
from seqc.backends.onnx.errors import OnnxExportError
from seqc.backends.primitives import registrar
from seqc.compiler import sinusoid

Fn = Callable[[list[str], dict[str, Any], Ctx], str]
OPS: dict[str, Fn] = {}
op = registrar(OPS)


def _promote(xs: list[str], ctx: Ctx) -> tuple[str, str]:
    """JAX promotes mixed operands; ONNX refuses them. Cast to the float one, else to `a`'s."""
    a, b = xs
    da, db = ctx.dtype(a), ctx.dtype(b)
    if da == db:
        return a, b
    if db.startswith("float") and not da.startswith("float"):
        return ctx.cast(a, db), b
    return a, ctx.cast(b, da)


def _simple_unary(op_type: str) -> Fn:
    return lambda xs, attrs, ctx: ctx.node(op_type, [xs[0]])


def _simple_binary(op_type: str) -> Fn:
    return lambda xs, attrs, ctx: ctx.node(op_type, list(_promote(xs, ctx)))


def _logical(op_type: str) -> Fn:
    return lambda xs, attrs, ctx: ctx.node(op_type, [ctx.cast(x, "bool") for x in xs])


for _name, _type in {
    "neg": "Neg",
    "exp": "Exp",
    "log": "Log",
    "tanh": "Tanh",
    "sigmoid": "Sigmoid",
    "relu": "Relu",
    "sqrt": "Sqrt",
    "sin": "Sin",
    "cos": "Cos",
    "identity": "Identity",
}.items():
    OPS[_name] = _simple_unary(_type)

for _name, _type in {
    "add": "Add",
    "sub": "Sub",
    "mul": "Mul",
    "div": "Div",
    "maximum": "Max",
    "minimum": "Min",
    "less": "Less",
    "less_equal": "LessOrEqual",
    "greater": "Greater",
    "equal": "Equal",
}.items():
    OPS[_name] = _simple_binary(_type)

OPS["logical_and"] = _logical("And")
OPS["logical_or"] = _logical("Or")
OPS["logical_not"] = lambda xs, attrs, ctx: ctx.node("Not", [ctx.cast(xs[0], "bool")])


@op("gelu")
def _gelu(xs: list, attrs: dict, ctx: Ctx) -> str:
    """The exact (erf) form, written as ORT's Gelu fusion expects it below opset 20."""
    x = xs[0]
    if ctx.opset >= 20:
        return ctx.node("Gelu", [x], approximate="none")
    erf = ctx.node("Erf", [ctx.node("Div", [x, ctx.const(np.sqrt(2.0), "float32")])])
    one_plus = ctx.node("Add", [erf, ctx.const(1.0, "float32")])
    return ctx.node("Mul", [ctx.node("Mul", [x, one_plus]), ctx.const(0.5, "float32")])


@op("silu")
def _silu(xs: list, attrs: dict, ctx: Ctx) -> str:
    return ctx.node("Mul", [xs[0], ctx.node("Sigmoid", [xs[0]])])


@op("rsqrt")
def _rsqrt(xs: list, attrs: dict, ctx: Ctx) -> str:
    return ctx.node("Reciprocal", [ctx.node("Sqrt", [xs[0]])])


@op("square")
def _square(xs: list, attrs: dict, ctx: Ctx) -> str:
    return ctx.node("Mul", [xs[0], xs[0]])


@op("constant")
def _constant(xs: list, attrs: dict, ctx: Ctx) -> str:
    """Floats as float32, integers as int32 (as JAX without x64 gives them), bools as bool."""
    return ctx.const(attrs["value"], constant_dtype(attrs["value"]))


def constant_dtype(value: Any) -> str:
    """The dtype JAX gives a constant (see `_constant`); the emitter records it per value,
    since ONNX refuses mixed-dtype operands that JAX would promote."""
    kind = np.asarray(value).dtype.kind
    return "float32" if kind == "f" else "bool" if kind == "b" else "int32"


@op("fill")
def _fill(xs: list, attrs: dict, ctx: Ctx) -> str:
    """The compute dtype whatever the op's dtype says, as JAX does."""
    value = numpy_helper.from_array(np.array([attrs["value"]], np.float32))
    return ctx.node("ConstantOfShape", [ctx.shape(attrs["shape"], "fill")], value=value)


@op("cast")
def _cast(xs: list, attrs: dict, ctx: Ctx) -> str:
    return ctx.node("Cast", [xs[0]], to=DTYPES[attrs["dtype"]])


@op("where")
def _where(xs: list, attrs: dict, ctx: Ctx) -> str:
    cond, a, b = xs
    return ctx.node("Where", [ctx.cast(cond, "bool"), a, ctx.cast(b, ctx.dtype(a))])


@op("matmul", "batched_matmul")
def _matmul(xs: list, attrs: dict, ctx: Ctx) -> str:
    """ONNX MatMul broadcasts batch dims like numpy, so x[B, T, k] @ w[k, n] needs no reshape;
    a weight that is an initializer is what the int8 quantizers look for."""
    return ctx.node("MatMul", [xs[0], ctx.cast(xs[1], ctx.dtype(xs[0]))])


@op("einsum")
def _einsum(xs: list, attrs: dict, ctx: Ctx) -> str:
    return ctx.node(
        "Einsum", [xs[0], ctx.cast(xs[1], ctx.dtype(xs[0]))], equation=attrs["equation"]
    )


@op("reduce_sum", "reduce_mean", "reduce_max")
def _reduce(xs: list, attrs: dict, ctx: Ctx) -> str:
    op_type = {"reduce_sum": "ReduceSum", "reduce_mean": "ReduceMean", "reduce_max": "ReduceMax"}
    assert ctx.op is not None
    return ctx.reduce(op_type[ctx.op.kind], xs[0], attrs["axes"], attrs["keepdims"])


@op("softmax")
def _softmax(xs: list, attrs: dict, ctx: Ctx) -> str:
    return ctx.node("Softmax", [xs[0]], axis=attrs["axis"])


@op("log_softmax")
def _log_softmax(xs: list, attrs: dict, ctx: Ctx) -> str:
    return ctx.node("LogSoftmax", [xs[0]], axis=attrs["axis"])


@op("layer_norm")
def _layer_norm(xs: list, attrs: dict, ctx: Ctx) -> str:
    """`LayerNormalization` (opset 17) where it fits; RMS norm written out in the form ORT fuses
    into its SimplifiedLayerNormalization kernel (Pow, ReduceMean, Add, Sqrt, Div)."""
    x, rest = xs[0], list(xs[1:])
    scale = rest.pop(0) if attrs["scale"] else None
    bias = rest.pop(0) if attrs["bias"] else None
    assert ctx.op is not None
    width = ctx.op.type.shape[-1]
    if not attrs["rms"] and (scale is not None or isinstance(width, int)):
        if scale is None:
            scale = ctx.const(np.ones(int(width), np.float32))
        inputs = [x, scale] + ([bias] if bias is not None else [])
        return ctx.node("LayerNormalization", inputs, axis=-1, epsilon=float(attrs["eps"]))
    centred = x
    if not attrs["rms"]:
        centred = ctx.node("Sub", [x, ctx.reduce("ReduceMean", x, [-1], True)])
    power = ctx.node("Pow", [centred, ctx.const(2.0, "float32")])
    var = ctx.reduce("ReduceMean", power, [-1], True)
    eps = ctx.const(attrs["eps"], "float32")
    y = ctx.node("Div", [centred, ctx.node("Sqrt", [ctx.node("Add", [var, eps])])])
    if scale is not None:
        y = ctx.node("Mul", [y, scale])
    if bias is not None:
        y = ctx.node("Add", [y, bias])
    return y


@op("gather")
def _gather(xs: list, attrs: dict, ctx: Ctx) -> str:
    y = ctx.node("Gather", xs, axis=attrs.get("axis", 0))
    if ctx.in_types[0].dtype != "float32":
        y = ctx.node("Cast", [y], to=DTYPES["float32"])
    return y


@op("sinusoid")
def _sinusoid(xs: list, attrs: dict, ctx: Ctx) -> str:
    """Computed from the positions, not gathered from a stored max_length x d table (which
    outweighs a small model's weights): sin and cos of t * f as A + B, A = t * hi exact in
    float32, so the signal is within about 1e-7 of the training backends' float64 table
    (`seqc.compiler.sinusoid.split_frequencies`)."""
    hi, lo = sinusoid.split_frequencies(attrs)
    t = ctx.node("Unsqueeze", [ctx.cast(xs[0], "float32"), ctx.const(np.array([1], np.int64))])
    a = ctx.node("Mul", [t, ctx.const(hi[None, :])])  # [n, d/2]
    b = ctx.node("Mul", [t, ctx.const(lo[None, :])])
    sin_a, cos_a = ctx.node("Sin", [a]), ctx.node("Cos", [a])
    sin_b, cos_b = ctx.node("Sin", [b]), ctx.node("Cos", [b])

    def product(x: str, y: str) -> str:
        return ctx.node("Mul", [x, y])

    sin = ctx.node("Add", [product(sin_a, cos_b), product(cos_a, sin_b)])
    cos = ctx.node("Sub", [product(cos_a, cos_b), product(sin_a, sin_b)])
    return ctx.node("Concat", [sin, cos], axis=1)


@op("reshape")
def _reshape(xs: list, attrs: dict, ctx: Ctx) -> str:
    return ctx.node("Reshape", [xs[0], ctx.shape(attrs["shape"], "reshape")])


@op("transpose")
def _transpose(xs: list, attrs: dict, ctx: Ctx) -> str:
    return ctx.node("Transpose", [xs[0]], perm=list(attrs["perm"]))


@op("concat")
def _concat(xs: list, attrs: dict, ctx: Ctx) -> str:
    return ctx.node("Concat", xs, axis=attrs["axis"])


@op("slice")
def _slice(xs: list, attrs: dict, ctx: Ctx) -> str:
    starts, ends, axes = ([attrs[k]] for k in ("start", "end", "axis"))
    bounds = [ctx.const(np.array(v, np.int64)) for v in (starts, ends, axes)]
    return ctx.node("Slice", [xs[0], *bounds])


@op("iota")
def _iota(xs: list, attrs: dict, ctx: Ctx) -> str:
    assert ctx.op is not None
    n = ctx.op.type.shape[0]
    if isinstance(n, int):
        return ctx.const(np.arange(n, dtype=np.int32))
    limit = ctx.node("Cast", [ctx.size(xs[0], attrs["axis"])], to=TensorProto.INT32)
    return ctx.node("Range", [ctx.const(0, "int32"), limit, ctx.const(1, "int32")])


@op("causal_mask")
def _causal(xs: list, attrs: dict, ctx: Ctx) -> str:
    """bool[n, n], i >= j; a constant when n is known."""
    assert ctx.op is not None
    n = ctx.op.type.shape[0]
    if isinstance(n, int):
        return ctx.const(np.tril(np.ones((n, n), np.bool_)))
    r = ctx.node(
        "Range", [ctx.const(0, "int64"), ctx.size(xs[0], attrs["axis"]), ctx.const(1, "int64")]
    )
    rows = ctx.node("Unsqueeze", [r, ctx.const(np.array([1], np.int64))])
    cols = ctx.node("Unsqueeze", [r, ctx.const(np.array([0], np.int64))])
    return ctx.node("GreaterOrEqual", [rows, cols])


@op("dropout")
def _dropout(xs: list, attrs: dict, ctx: Ctx) -> str:
    """Inference only: the identity, with no node at all."""
    return xs[0]


@op("conv1d")
def _conv1d(xs: list, attrs: dict, ctx: Ctx) -> str:
    """ONNX convolves NCW with weights [c_out, c_in / groups, width]; seqc keeps NWC and
    [width, c_in / groups, c_out], so the weight initializer keeps its seqc layout and name and
    a Transpose (folded by ORT at load) reorders it. SAME_UPPER is XLA's "SAME"; causal pads
    width - 1 on the left; valid pads nothing. ONNX's `group` splits channels in contiguous
    blocks, as XLA's feature groups do."""
    x, w = xs
    width = int(ctx.in_types[1].shape[0])
    kernel = ctx.node("Transpose", [ctx.cast(w, ctx.dtype(x))], perm=[2, 1, 0])
    padding, groups = attrs["padding"], attrs.get("groups", 1)
    y = ctx.node(
        "Conv",
        [ctx.node("Transpose", [x], perm=[0, 2, 1]), kernel],
        kernel_shape=[width],
        strides=[attrs["stride"]],
        pads=[width - 1, 0] if padding == "causal" else None,
        auto_pad="SAME_UPPER" if padding == "same" else None,
        group=groups if groups != 1 else None,
    )
    return ctx.node("Transpose", [y], perm=[0, 2, 1])


@op("conv2d")
def _conv2d(xs: list, attrs: dict, ctx: Ctx) -> str:
    """NHWC to ONNX's NCHW and back around one Conv; the HWIO weight is transposed to OIHW by
    a node (folded at load), so its initializer keeps the seqc layout and name."""
    x, w = xs
    kh, kw = (int(d) for d in ctx.in_types[1].shape[:2])
    kernel = ctx.node("Transpose", [ctx.cast(w, ctx.dtype(x))], perm=[3, 2, 0, 1])
    y = ctx.node(
        "Conv",
        [ctx.node("Transpose", [x], perm=[0, 3, 1, 2]), kernel],
        kernel_shape=[kh, kw],
        strides=list(attrs["strides"]),
        auto_pad="SAME_UPPER" if attrs["padding"] == "same" else None,
    )
    return ctx.node("Transpose", [y], perm=[0, 2, 3, 1])


@op("spec_augment")
def _spec_augment(xs: list, attrs: dict, ctx: Ctx) -> str:
    """Inference only: the identity, with no node at all (as dropout)."""
    return xs[0]


@op("vtlp")
def _vtlp(xs: list, attrs: dict, ctx: Ctx) -> str:
    """Inference only: the identity, with no node at all (as dropout)."""
    return xs[0]


@op("ctc_loss")
def _ctc_loss(xs: list, attrs: dict, ctx: Ctx) -> str:
    """A training criterion: ONNX has no CTC op, and an exported model needs none (it
    outputs the scores; decoding is greedy or beam search over them)."""
    op = ctx.op
    span = op.span if op is not None else None
    raise OnnxExportError(
        f"{ctx.where()}: the CTC loss cannot be exported to ONNX; export the graph of the "
        "model's scores (its logits), not of its training criterion",
        span=span,
    )


@op("take_along")
def _take_along(xs: list, attrs: dict, ctx: Ctx) -> str:
    """GatherElements over the last axis with the ids unsqueezed there, then squeezed back."""
    x, ids = xs
    axis = ctx.const(np.array([-1], np.int64))
    picked = ctx.node("GatherElements", [x, ctx.node("Unsqueeze", [ids, axis])], axis=-1)
    return ctx.node("Squeeze", [picked, axis])


@op("argmax")
def _argmax(xs: list, attrs: dict, ctx: Ctx) -> str:
    """ArgMax keeps the first of equal values, as JAX's does; ONNX gives int64."""
    y = ctx.node("ArgMax", [xs[0]], axis=-1, keepdims=0)
    return ctx.node("Cast", [y], to=DTYPES["int32"])
