"""One ONNX emitter per primitive of the op graph (`seqc.compiler.graph.PRIMITIVES`).

The mirror of `seqc.backends.jax.ops`, name for name: each takes the ONNX value names of the op's
inputs, its attrs and a `Ctx`, appends one node or a few to the graph being built, and returns the
name of the value that holds the op's result. The JAX table is the contract, as it is for TF:
integer constants are int32, float constants float32, mixed-dtype binary ops promote to the float
operand, "same" convolution padding puts the odd step on the right, gelu is the exact erf form.

Symbolic dims (`B`, `T`) become `Shape` slices of the graph input they were bound from, computed
once in the outermost graph that can see them, so a scan body reads them from the outer scope.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from seqc.backends.primitives import registrar
from seqc.compiler import sinusoid
from seqc.compiler.graph import Op, Shape, TensorType

DTYPES = {
    "float32": TensorProto.FLOAT,
    "bfloat16": TensorProto.BFLOAT16,
    "float16": TensorProto.FLOAT16,
    "int32": TensorProto.INT32,
    "int64": TensorProto.INT64,
    "bool": TensorProto.BOOL,
}
LARGE_CONSTANT = 1024
"""Bytes above which a constant is an initializer rather than a Constant node."""
NUMPY = {"float32": np.float32, "int32": np.int32, "int64": np.int64, "bool": np.bool_}


@dataclass
class Ctx:
    """One (sub)graph under construction: its nodes, where its symbolic dims can be read, and
    the seqc op being emitted (it names every node, so a failure points back at the spec).

    `symbols` maps a dim name to (value, axis) of an input of this graph that has it; `parent` is
    the enclosing graph for a scan body, whose values a body may read (ONNX outer scope).
    """

    opset: int
    prefix: str = ""
    parent: Ctx | None = None
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    symbols: dict[str, tuple[str, int]] = field(default_factory=dict)
    dtypes: dict[str, str] = field(default_factory=dict)
    constants: dict[tuple, onnx.TensorProto] = field(default_factory=dict)
    op: Op | None = None
    in_types: list[TensorType] = field(default_factory=list)
    _dims: dict[str, str] = field(default_factory=dict)
    _count: int = 0

    # ------------------------------------------------------------------ building nodes
    def where(self) -> str:
        """The seqc location of the op being emitted: `layer/kind#value`."""
        if self.op is None:
            return f"{self.prefix}graph"
        return f"{self.op.layer or '(model)'}/{self.op.kind}#{self.prefix}v{self.op.id}"

    def node(self, op_type: str, inputs: Sequence[str], n_out: int = 1, **attrs: Any) -> Any:
        """Append a node; returns its output name (a list of names when `n_out` > 1)."""
        self._count += 1
        base = f"{self.prefix}v{self.op.id}" if self.op is not None else f"{self.prefix}g"
        outs = [f"{base}/{self._count}" + (f".{i}" if n_out > 1 else "") for i in range(n_out)]
        doc = ""
        if self.op is not None:
            span = f" at {self.op.span}" if self.op.span is not None else ""
            doc = f"seqc `{self.op.kind}` of layer `{self.op.layer or '(model)'}`{span}"
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(
            helper.make_node(
                op_type,
                list(inputs),
                outs,
                name=f"{self.where()}/{op_type}_{self._count}",
                doc_string=doc,
                **attrs,
            )
        )
        return outs[0] if n_out == 1 else outs

    def const(self, value: Any, dtype: str | None = None) -> str:
        """A Constant node; a large one (over `LARGE_CONSTANT` bytes) becomes an initializer of
        the outermost graph instead, named `const/<layer>#v<id>` and shared by every op with the
        same content (a scan body reads it from the outer scope), and tools that look for
        weights among initializers (quantizers) can tell it from a layer's."""
        array = np.asarray(value, NUMPY[dtype]) if dtype else np.asarray(value)
        seqc_dtype = {v: k for k, v in NUMPY.items()}.get(array.dtype.type, "float32")
        if array.nbytes <= LARGE_CONSTANT:
            name = self.node("Constant", [], value=numpy_helper.from_array(array))
            self.dtypes[name] = seqc_dtype
            return name
        root = self
        while root.parent is not None:
            root = root.parent
        key = (array.dtype.str, array.shape, hashlib.sha1(array.tobytes()).hexdigest())
        if key not in root.constants:
            name = f"const/{self.where()}"
            root.constants[key] = numpy_helper.from_array(array, name)
            root.dtypes[name] = seqc_dtype
        return root.constants[key].name

    def dtype(self, name: str) -> str:
        """The seqc dtype of a value of this graph or of an enclosing one."""
        ctx: Ctx | None = self
        while ctx is not None:
            if name in ctx.dtypes:
                return ctx.dtypes[name]
            ctx = ctx.parent
        raise KeyError(name)

    def cast(self, name: str, dtype: str) -> str:
        if self.dtype(name) == dtype:
            return name
        out = self.node("Cast", [name], to=DTYPES[dtype])
        self.dtypes[out] = dtype
        return out

    # ------------------------------------------------------------------ symbolic dims
    def symbol(self, s: str) -> str | None:
        """int64[1] holding the size of dim `s`, read in the outermost graph that binds it."""
        if s in self._dims:
            return self._dims[s]
        found = self.parent.symbol(s) if self.parent is not None else None
        if found is None and s in self.symbols:
            value, axis = self.symbols[s]
            found = self.node("Shape", [value], start=axis, end=axis + 1)
        if found is not None:
            self._dims[s] = found
        return found

    def shape(self, shape: Shape, what: str) -> str:
        """int64[rank] for a seqc shape. A dim no input binds (`T+S`) becomes -1, which
        Reshape infers (one such dim at most); any other use refuses it."""
        parts: list[str | int] = []
        unknown = 0
        for d in shape:
            if isinstance(d, int):
                parts.append(d)
                continue
            found = self.symbol(d)
            if found is None:
                unknown += 1
                parts.append(-1)
            else:
                parts.append(found)
        if unknown > (1 if what == "reshape" else 0):
            raise ValueError(
                f"the {what} shape {list(shape)} has {unknown} dims that no graph input binds"
                + ("; Reshape can infer only one" if what == "reshape" else "")
            )
        if all(isinstance(p, int) for p in parts):
            return self.const(np.array(parts, np.int64))
        pieces = [p if isinstance(p, str) else self.const(np.array([p], np.int64)) for p in parts]
        return pieces[0] if len(pieces) == 1 else self.node("Concat", pieces, axis=0)

    def size(self, x: str, axis: int) -> str:
        """int64 scalar: the size of `x` along `axis`, read at run time."""
        n = self.node("Shape", [x], start=axis, end=axis + 1 if axis != -1 else None)
        return self.node("Squeeze", [n, self.const(np.array([0], np.int64))])

    def reduce(self, op_type: str, x: str, axes: Sequence[int], keepdims: bool) -> str:
        """Reductions take `axes` as an input from opset 18 (ReduceSum from 13)."""
        axes_list = [int(a) for a in axes]
        if op_type == "ReduceSum" or self.opset >= 18:
            return self.node(
                op_type, [x, self.const(np.array(axes_list, np.int64))], keepdims=int(keepdims)
            )
        return self.node(op_type, [x], axes=axes_list, keepdims=int(keepdims))


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


@op("ctc_loss")
def _ctc_loss(xs: list, attrs: dict, ctx: Ctx) -> str:
    """A training criterion: ONNX has no CTC op, and an exported model needs none (it
    outputs the scores; decoding is greedy or beam search over them)."""
    from seqc.backends.onnx.emit import OnnxExportError  # emit imports this module

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
