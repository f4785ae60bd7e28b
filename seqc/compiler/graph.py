"""The op graph: typed, shaped primitive ops that every backend, the cost model and the placer read.

Layers are lowered once, here in the compiler, to a small fixed set of primitives (`PRIMITIVES`),
so a backend is a table from primitive to framework op and a new layer kind is written once.
Every op keeps the layer path it came from (`blocks.3.attn`) and the span of the user's line, so
a shape error found while lowering points at the spec, never at a backend.

Shapes are tuples of dims; a dim is an int or a symbolic name (`B`, `T`) bound when the graph
runs. Params are named by layer path (`blocks.3.attn.q.w`) and carry a named, seeded initializer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from seqc.spec import ir
from seqc.spec.errors import CheckError

Dim = int | str
Shape = tuple[Dim, ...]

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "int32": 4, "int64": 8, "bool": 1}

MAX_GRAPH_OPS = 100_000
"""Most ops one graph may hold (README, "Trust and limits"). A 2,000-block Transformer fits
(about 45 ops a block); a spec that asks for more (`repeat` inside `repeat`) is refused at the
layer where the graph grew past it, in about a second, instead of lowering, costing and printing
for minutes."""


@dataclass(frozen=True)
class TensorType:
    dtype: str
    shape: Shape

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(str(d) for d in self.shape)}]"

    @property
    def rank(self) -> int:
        return len(self.shape)


@dataclass(frozen=True)
class Init:
    """A named initializer: `normal(std)`, `uniform(limit)`, `zeros`, `ones`, `glorot`."""

    kind: str
    scale: float = 1.0


@dataclass
class Param:
    name: str
    type: TensorType
    init: Init
    layer: str
    span: ir.Span | None = None

    @property
    def size(self) -> int:
        n = 1
        for d in self.type.shape:
            assert isinstance(d, int)
            n *= d
        return n


@dataclass
class Op:
    """One primitive application. `inputs` are value ids; the op's own id names its output."""

    id: int
    kind: str
    inputs: tuple[int, ...]
    attrs: dict[str, Any]
    type: TensorType
    layer: str
    span: ir.Span | None = None
    flops: int = 0
    """FLOPs of this op with symbolic dims at the sizes last given to `cost.estimate`."""
    bytes: int = 0
    """Bytes of this op's output at those sizes (activation memory)."""


@dataclass(frozen=True)
class Head:
    """A model's output layer (a `Softmax`), as a sampled criterion needs it: the value the layer
    reads and its weights, so that a few candidate words are scored without the full
    [tokens, vocab] logits (`seqc.compiler.lower.sampled`)."""

    hidden: int
    """The layer's input, [..., d]."""
    logits: int
    """The layer's output, [..., vocab]."""
    weight: str
    """The output matrix's param: the layer's own [d, vocab], or a tied [vocab, d] table."""
    vocab_axis: int
    """The axis of `weight` that runs over the vocabulary: 1 for [d, vocab], 0 for a table."""
    bias: str | None
    layer: str
    span: ir.Span | None = None


@dataclass(frozen=True)
class ExpertTerms:
    """One `MoE` layer of a graph. In its training form (`GraphBuilder.training_form`) the
    layer also computes its weighted auxiliary loss (a scalar the task's loss adds), the
    fraction of its token-to-expert assignments dropped by capacity (a scalar) and each
    expert's share of the assignments ([experts]); in the inference form these are None."""

    layer: str
    experts: int
    aux_loss: int | None = None
    dropped: int | None = None
    load: int | None = None


@dataclass
class Graph:
    """A lowered model: named inputs, params by path, ops in topological order, outputs."""

    inputs: dict[str, int] = field(default_factory=dict)
    params: dict[str, Param] = field(default_factory=dict)
    ops: list[Op] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    subgraphs: dict[str, Graph] = field(default_factory=dict)
    head: Head | None = None
    """The last `Softmax` layer lowered into this graph, if any."""
    experts: list[ExpertTerms] = field(default_factory=list)
    """The mixture-of-experts layers lowered into this graph, in order, with the values their
    training form adds to the step (`seqc.compiler.lower.moe`)."""
    output_names: tuple[str, ...] = ()
    """Names of the outputs where a reader needs them (a criterion with experts' figures,
    `seqc.compiler.expert_terms`); empty: the reader knows them by position."""

    def upto(self, vid: int) -> Graph:
        """The graph that computes value `vid` and stops there: its ops up to `vid` (ops are in
        topological order, so none after it is needed; ids are kept), every param."""
        return Graph(
            inputs={k: v for k, v in self.inputs.items() if v <= vid},
            params=self.params,
            ops=self.ops[: vid + 1],
            outputs=[vid],
            subgraphs=self.subgraphs,
            experts=self.experts,
        )

    def op(self, vid: int) -> Op:
        return self.ops[vid]

    def type_of(self, vid: int) -> TensorType:
        return self.ops[vid].type


def too_large(ops: int, layer: str, span: ir.Span | None) -> CheckError:
    """The error of a graph past `MAX_GRAPH_OPS` ops (`ops` counted or foreseen) at `layer`."""
    return CheckError(
        f"the model's graph grows past {MAX_GRAPH_OPS:,} ops at `{layer or 'the model'}`",
        span=span,
        code="graph-too-large",
        expected=f"at most {MAX_GRAPH_OPS:,} ops in one graph",
        found=f"{ops:,} ops",
        hint="use fewer or smaller `repeat(n)` copies; a repeat inside a repeat multiplies",
    )


class GraphBuilder:
    """Appends ops with shape inference; the current layer path and span label each op."""

    def __init__(self, training_form: bool = False) -> None:
        self.graph = Graph()
        self.layer = ""
        self.span: ir.Span | None = None
        self.training_form = training_form
        """Lower layers as a training step runs them, where that differs from inference: a
        mixture of experts then bounds each expert's tokens by its capacity and computes its
        auxiliary losses (`seqc.compiler.lower.moe`). Dropout and augmentation do not need
        it: their ops are the identity outside training in every backend."""

    # ------------------------------------------------------------------ plumbing
    def typed_op(
        self, kind: str, inputs: tuple[int, ...], attrs: dict[str, Any], t: TensorType
    ) -> int:
        """An op whose result type is given, not inferred by a shape rule: how every op enters
        the graph, and how a lowering adds one whose type it knows (a loss's float32 cast, a
        fused loss's sums)."""
        vid = len(self.graph.ops)
        if vid >= MAX_GRAPH_OPS:
            raise too_large(vid + 1, self.layer, self.span)
        self.graph.ops.append(Op(vid, kind, inputs, attrs, t, self.layer, self.span))
        return vid

    def type(self, v: int) -> TensorType:
        return self.graph.ops[v].type

    def error(self, message: str, **kw: Any) -> CheckError:
        return CheckError(message, span=self.span, code=kw.pop("code", "shape-mismatch"), **kw)

    # ------------------------------------------------------------------ leaves
    def input(self, name: str, t: TensorType) -> int:
        vid = self.typed_op("input", (), {"name": name}, t)
        self.graph.inputs[name] = vid
        return vid

    def param(self, name: str, shape: Shape, init: Init, dtype: str = "float32") -> int:
        full = f"{self.layer}.{name}" if self.layer else name
        t = TensorType(dtype, shape)
        if full not in self.graph.params:
            self.graph.params[full] = Param(full, t, init, self.layer, self.span)
        return self.typed_op("param", (), {"name": full}, t)

    def shared_param(self, full: str) -> int:
        """A reference to a param created by another layer (weight tying)."""
        p = self.graph.params[full]
        return self.typed_op("param", (), {"name": full}, p.type)

    def constant(self, value: Any, dtype: str = "float32") -> int:
        """A scalar or an array (nested lists or numpy) known at compile time."""
        shape = tuple(getattr(value, "shape", ()))
        return self.typed_op("constant", (), {"value": value}, TensorType(dtype, shape))

    def fill(self, value: float, shape: Shape, dtype: str = "float32") -> int:
        """A tensor of one value whose shape may have symbolic dims (initial recurrent state)."""
        return self.typed_op("fill", (), {"value": value, "shape": shape}, TensorType(dtype, shape))

    # ------------------------------------------------------------------ elementwise
    def unary(self, kind: str, x: int) -> int:
        assert kind in UNARY, kind
        return self.typed_op(kind, (x,), {}, self.type(x))

    def binary(self, kind: str, a: int, b: int) -> int:
        assert kind in BINARY, kind
        ta, tb = self.type(a), self.type(b)
        shape = self.broadcast(ta.shape, tb.shape, kind)
        dtype = "bool" if kind in COMPARE else _result_dtype(ta.dtype, tb.dtype)
        if kind in COMPARE or kind in LOGICAL:
            dtype = "bool"
        return self.typed_op(kind, (a, b), {}, TensorType(dtype, shape))

    def broadcast(self, a: Shape, b: Shape, what: str = "op") -> Shape:
        out: list[Dim] = []
        for i in range(max(len(a), len(b))):
            da = a[len(a) - 1 - i] if i < len(a) else 1
            db = b[len(b) - 1 - i] if i < len(b) else 1
            if da == db or db == 1:
                out.append(da)
            elif da == 1:
                out.append(db)
            else:
                raise self.error(
                    f"shapes do not match in `{what}`",
                    expected=_shape_text(a),
                    found=_shape_text(b),
                )
        return tuple(reversed(out))

    def where(self, cond: int, a: int, b: int) -> int:
        shape = self.broadcast(
            self.broadcast(self.type(cond).shape, self.type(a).shape), self.type(b).shape
        )
        return self.typed_op("where", (cond, a, b), {}, TensorType(self.type(a).dtype, shape))

    def cast(self, x: int, dtype: str) -> int:
        if self.type(x).dtype == dtype:
            return x
        return self.typed_op("cast", (x,), {"dtype": dtype}, TensorType(dtype, self.type(x).shape))

    # ------------------------------------------------------------------ linear algebra
    def matmul(self, x: int, w: int) -> int:
        """x[..., k] @ w[k, n] -> [..., n]."""
        tx, tw = self.type(x), self.type(w)
        if tw.rank != 2 or tx.shape[-1] != tw.shape[0]:
            raise self.error(
                "the input width does not match the layer",
                expected=f"[..., {tw.shape[0]}]",
                found=_shape_text(tx.shape),
            )
        return self.typed_op(
            "matmul", (x, w), {}, TensorType(tx.dtype, (*tx.shape[:-1], tw.shape[1]))
        )

    def batched_matmul(self, a: int, b: int) -> int:
        """a[..., m, k] @ b[..., k, n] -> [..., m, n] (attention scores and contexts)."""
        ta, tb = self.type(a), self.type(b)
        if ta.shape[-1] != tb.shape[-2] or ta.shape[:-2] != tb.shape[:-2]:
            raise self.error(
                "batched matmul shapes do not match",
                expected=_shape_text((*ta.shape[:-2], ta.shape[-1], "n")),
                found=_shape_text(tb.shape),
            )
        shape = (*ta.shape[:-1], tb.shape[-1])
        return self.typed_op("batched_matmul", (a, b), {}, TensorType(ta.dtype, shape))

    def einsum(self, equation: str, a: int, b: int) -> int:
        """Two-operand einsum, e.g. "bqhd,bkhd->bhqk": attention without layout transposes."""
        lhs, out = equation.split("->")
        ins = lhs.split(",")
        sizes: dict[str, Dim] = {}
        for spec, v in zip(ins, (a, b), strict=True):
            shape = self.type(v).shape
            if len(spec) != len(shape):
                raise self.error(f"einsum `{equation}` does not fit {_shape_text(shape)}")
            for letter, d in zip(spec, shape, strict=True):
                if sizes.setdefault(letter, d) != d:
                    raise self.error(
                        f"einsum `{equation}`: axis `{letter}` is {sizes[letter]} and {d}",
                        expected=_shape_text(self.type(a).shape),
                        found=_shape_text(self.type(b).shape),
                    )
        shape = tuple(sizes[c] for c in out)
        attrs = {"equation": equation}
        return self.typed_op("einsum", (a, b), attrs, TensorType(self.type(a).dtype, shape))

    # ------------------------------------------------------------------ reductions and norms
    def reduce(self, kind: str, x: int, axes: tuple[int, ...], keepdims: bool = True) -> int:
        assert kind in REDUCE, kind
        t = self.type(x)
        axes = tuple(a % t.rank for a in axes)
        shape = tuple((1 if keepdims else None) if i in axes else d for i, d in enumerate(t.shape))
        shape = tuple(d for d in shape if d is not None)
        return self.typed_op(
            kind, (x,), {"axes": axes, "keepdims": keepdims}, TensorType(t.dtype, shape)
        )

    def softmax(self, x: int, axis: int = -1) -> int:
        return self.typed_op("softmax", (x,), {"axis": axis}, self.type(x))

    def log_softmax(self, x: int, axis: int = -1) -> int:
        return self.typed_op("log_softmax", (x,), {"axis": axis}, self.type(x))

    def layer_norm(self, x: int, scale: int | None, bias: int | None, eps: float, rms: bool) -> int:
        inputs = (
            (x,) + ((scale,) if scale is not None else ()) + ((bias,) if bias is not None else ())
        )
        attrs = {"eps": eps, "rms": rms, "scale": scale is not None, "bias": bias is not None}
        return self.typed_op("layer_norm", inputs, attrs, self.type(x))

    def argmax(self, x: int) -> int:
        """The index of the largest value along the last axis, int32 (first of equals)."""
        t = self.type(x)
        return self.typed_op("argmax", (x,), {}, TensorType("int32", t.shape[:-1]))

    # ------------------------------------------------------------------ indexing and layout
    def take_along(self, x: int, ids: int) -> int:
        """x[..., ids[...]]: for each position the entry of the last axis that `ids` names (a
        label's log-probability), without a one-hot product over the vocabulary."""
        tx, ti = self.type(x), self.type(ids)
        if not ti.dtype.startswith("int") or tuple(tx.shape[:-1]) != tuple(ti.shape):
            raise self.error(
                "labels must be integers shaped like the scores without their last axis",
                expected=f"int32{_shape_text(tx.shape[:-1])}",
                found=str(ti),
            )
        return self.typed_op("take_along", (x, ids), {}, TensorType(tx.dtype, ti.shape))

    def gather(self, table: int, ids: int, axis: int = 0) -> int:
        """Slices of `table` along `axis` by `ids` (numpy's `take`): rows of an embedding
        table, or columns of a [d, vocab] output matrix. The op's `axis` attr is set only when
        it is not 0, so graphs of row gathers stay as they were."""
        tt, ti = self.type(table), self.type(ids)
        if not ti.dtype.startswith("int"):
            raise self.error("token ids must be integers", expected="int32[...]", found=str(ti))
        axis %= tt.rank
        shape = (*tt.shape[:axis], *ti.shape, *tt.shape[axis + 1 :])
        attrs = {"axis": axis} if axis else {}
        return self.typed_op("gather", (table, ids), attrs, TensorType(tt.dtype, shape))

    def reshape(self, x: int, shape: Shape) -> int:
        return self.typed_op(
            "reshape", (x,), {"shape": shape}, TensorType(self.type(x).dtype, shape)
        )

    def transpose(self, x: int, perm: tuple[int, ...]) -> int:
        t = self.type(x)
        shape = tuple(t.shape[p] for p in perm)
        return self.typed_op("transpose", (x,), {"perm": perm}, TensorType(t.dtype, shape))

    def concat(self, xs: list[int], axis: int) -> int:
        ts = [self.type(x) for x in xs]
        axis = axis % ts[0].rank
        total: Dim = 0
        for t in ts:
            d = t.shape[axis]
            total = total + d if isinstance(total, int) and isinstance(d, int) else f"{total}+{d}"
        shape = (*ts[0].shape[:axis], total, *ts[0].shape[axis + 1 :])
        return self.typed_op("concat", tuple(xs), {"axis": axis}, TensorType(ts[0].dtype, shape))

    def slice(self, x: int, axis: int, start: int, end: int) -> int:
        t = self.type(x)
        axis = axis % t.rank
        shape = (*t.shape[:axis], end - start, *t.shape[axis + 1 :])
        attrs = {"axis": axis, "start": start, "end": end}
        return self.typed_op("slice", (x,), attrs, TensorType(t.dtype, shape))

    def positions(self, like: int, axis: int) -> int:
        """0, 1, ..., n-1 along `axis` of `like`, as int32[n]."""
        n = self.type(like).shape[axis]
        return self.typed_op("iota", (like,), {"axis": axis}, TensorType("int32", (n,)))

    def sinusoid(self, positions: int, d: int, timescales: tuple[float, float], length: int) -> int:
        """float32[n, d]: the sine/cosine signal of int32[n] positions below `length`, with
        timescales geometric in [min, max] (`seqc.compiler.sinusoid`)."""
        (n,) = self.type(positions).shape
        lo, hi = timescales
        attrs = {"d": d, "min_timescale": lo, "max_timescale": hi, "max_length": length}
        return self.typed_op("sinusoid", (positions,), attrs, TensorType("float32", (n, d)))

    def causal_mask(self, like: int, axis: int) -> int:
        """bool[T, T]: position i may attend to j <= i."""
        n = self.type(like).shape[axis]
        return self.typed_op("causal_mask", (like,), {"axis": axis}, TensorType("bool", (n, n)))

    def dropout(self, x: int, rate: float, broadcast_axes: tuple[int, ...] = ()) -> int:
        if rate <= 0.0:
            return x
        attrs = {"rate": rate, "broadcast_axes": broadcast_axes}
        return self.typed_op("dropout", (x,), attrs, self.type(x))

    def conv1d(self, x: int, w: int, stride: int, padding: str, groups: int = 1) -> int:
        """x[B, T, c_in] * w[width, c_in // groups, c_out] -> [B, T', c_out].

        `padding` is "same" (T' = ceil(T / stride), the odd step on the right as XLA pads),
        "causal" (width - 1 steps on the left: T' = ceil(T / stride), no output sees a later
        input) or "valid" (no padding: T' = (T - width) // stride + 1, what a subsampling
        front end wants). `groups` splits the channels into that many independent
        convolutions; groups == c_in is Conformer's depthwise convolution. It is an attr only
        when it is not 1, so the graphs (and their checksums) of existing models stay as they
        were.
        """
        tx, tw = self.type(x), self.type(w)
        if padding not in CONV1D_PADDINGS:
            raise self.error(
                f"unknown convolution padding `{padding}`",
                code="bad-padding",
                expected=" or ".join(f'"{p}"' for p in sorted(CONV1D_PADDINGS)),
                found=f'"{padding}"',
            )
        c_in, c_out = tx.shape[-1], tw.shape[2]
        if groups < 1 or (isinstance(c_out, int) and c_out % groups):
            raise self.error(
                f"{groups} convolution groups do not divide the {c_out} output channels",
                expected="a group count that divides both channel counts",
                found=f"groups = {groups}",
            )
        if tw.rank != 3 or c_in != _times(tw.shape[1], groups):
            raise self.error(
                "the input width does not match the convolution",
                expected=f"[B, T, {_times(tw.shape[1], groups)}]",
                found=_shape_text(tx.shape),
            )
        t = self._conv_length(tx.shape[1], int(tw.shape[0]), stride, padding)
        attrs: dict[str, Any] = {"stride": stride, "padding": padding}
        if groups != 1:
            attrs["groups"] = groups
        return self.typed_op("conv1d", (x, w), attrs, TensorType(tx.dtype, (tx.shape[0], t, c_out)))

    def conv2d(self, x: int, w: int, strides: tuple[int, int], padding: str) -> int:
        """x[B, H, W, c_in] * w[kh, kw, c_in, c_out] -> [B, H', W', c_out], channels last.

        For a speech front end's subsampling over (time, frequency). `padding` is "same"
        (H' = ceil(H / stride)) or "valid" (H' = (H - kh) // stride + 1), per axis.
        """
        tx, tw = self.type(x), self.type(w)
        if padding not in ("same", "valid"):
            raise self.error(
                f"unknown 2-D convolution padding `{padding}`",
                code="bad-padding",
                expected='"same" or "valid"',
                found=f'"{padding}"',
            )
        if tx.rank != 4 or tw.rank != 4 or tx.shape[-1] != tw.shape[2]:
            raise self.error(
                "the input does not match the 2-D convolution",
                expected=f"[B, H, W, {tw.shape[2] if tw.rank == 4 else 'c_in'}]",
                found=_shape_text(tx.shape),
            )
        sh, sw = (int(s) for s in strides)
        h = self._conv_length(tx.shape[1], int(tw.shape[0]), sh, padding)
        wd = self._conv_length(tx.shape[2], int(tw.shape[1]), sw, padding)
        attrs = {"strides": (sh, sw), "padding": padding}
        shape = (tx.shape[0], h, wd, tw.shape[3])
        return self.typed_op("conv2d", (x, w), attrs, TensorType(tx.dtype, shape))

    def _conv_length(self, n: Dim, width: int, stride: int, padding: str) -> Dim:
        """The output length of a convolution along one axis: an int where `n` is one, else a
        dim expression `cost._eval` can size ("ceil(T/2)", "((T-3)//2+1)")."""
        if stride < 1:
            raise self.error(f"a convolution stride must be at least 1, not {stride}")
        if padding != "valid":
            if stride == 1:
                return n
            return -(-n // stride) if isinstance(n, int) else f"ceil({n}/{stride})"
        if isinstance(n, int):
            if n < width:
                raise self.error(
                    f"a {width}-wide valid convolution needs at least {width} steps",
                    expected=f"a length of at least {width}",
                    found=str(n),
                )
            return (n - width) // stride + 1
        if width == 1 and stride == 1:
            return n
        return f"(({n}-{width})//{stride}+1)"

    def spec_augment(
        self, x: int, freq_masks: int, freq_width: int, time_masks: int, time_width: int
    ) -> int:
        """SpecAugment's masking of log-mel features x[B, T, F] (Park et al., 2019), in
        training only: each row gets `freq_masks` bands of 0 to `freq_width` consecutive bins
        and `time_masks` spans of 0 to `time_width` frames (clipped to T) set to 0, widths and
        starts uniform, drawn independently per row. Every backend is the identity outside
        training (eval, decoding, exported artifacts), as for dropout; no masks at all adds
        no op."""
        t = self.type(x)
        if t.rank != 3 or not t.dtype.startswith(("float", "bfloat")):
            raise self.error(
                "SpecAugment masks float features shaped [batch, frames, bins]",
                expected="float32[B, T, F]",
                found=str(t),
            )
        counts = {
            "freq_masks": freq_masks,
            "freq_width": freq_width,
            "time_masks": time_masks,
            "time_width": time_width,
        }
        negative = {k: v for k, v in counts.items() if v < 0}
        if negative:
            raise self.error(
                "SpecAugment's mask counts and widths cannot be negative",
                code="bad-argument",
                found=", ".join(f"{k} = {v}" for k, v in negative.items()),
            )
        if freq_masks * freq_width == 0 and time_masks * time_width == 0:
            return x
        return self.typed_op("spec_augment", (x,), {k: int(v) for k, v in counts.items()}, t)

    def vtlp(self, x: int, low: float, high: float, boundary: float = 0.6) -> int:
        """Vocal tract length perturbation of spectra x[B, T, K] (Jaitly and Hinton, 2013), in
        training only: each row's frequency axis warped by a factor drawn uniformly from
        [low, high], piecewise linearly: bin f reads bin f / a up to `boundary` of the Nyquist
        bin (times min(a, 1)), and the rest is stretched so that the Nyquist bin stays put;
        between bins, linear interpolation. A factor above 1 moves formants up, as a shorter
        vocal tract does. The identity outside training (eval, decoding, exports), as dropout;
        a range of [1, 1] adds no op."""
        t = self.type(x)
        if t.rank != 3 or not t.dtype.startswith(("float", "bfloat")):
            raise self.error(
                "VTLP warps float spectra shaped [batch, frames, bins]",
                expected="float32[B, T, K]",
                found=str(t),
            )
        if not 0.0 < low <= high or not 0.0 < boundary < 1.0:
            raise self.error(
                "VTLP's warp factors are a range [low, high] above 0, and its boundary a "
                "fraction of the Nyquist frequency",
                code="bad-argument",
                found=f"low = {low:g}, high = {high:g}, boundary = {boundary:g}",
            )
        if low == high == 1.0:
            return x
        return self.typed_op("vtlp", (x,), {"low": low, "high": high, "boundary": boundary}, t)

    def ctc_loss(
        self, logits: int, frame_mask: int, labels: int, label_mask: int, blank: int = 0
    ) -> int:
        """Per-sequence CTC negative log-likelihood (Graves et al., 2006), float32[B].

        `logits` [B, F, V] are unnormalised scores over the vocabulary, blank included (id
        `blank`); `frame_mask` [B, F] and `label_mask` [B, L] mark each row's real frames and
        labels (a prefix: right padding). Labels are the real tokens, repeats allowed (a repeat
        needs a blank frame between, so a row needs L + repeats frames). A row whose labels
        cannot be aligned to its frames gets a loss of 0 and no gradient in every backend (as
        PyTorch's `zero_infinity`): the libraries' own values for such rows differ (optax about
        1e5, TF about 700) and their gradients would only push the model at random. Training
        only; an exported model cannot compute it."""
        tl, tf_, ty, tm = (self.type(v) for v in (logits, frame_mask, labels, label_mask))
        if tl.rank != 3 or not tl.dtype.startswith(("float", "bfloat")):
            raise self.error(
                "CTC scores must be float [B, F, V]", expected="float32[B, F, V]", found=str(tl)
            )
        if tf_.shape != tl.shape[:2]:
            raise self.error(
                "the frame mask does not match the CTC scores",
                expected=f"bool{_shape_text(tl.shape[:2])}",
                found=str(tf_),
            )
        if ty.rank != 2 or not ty.dtype.startswith("int") or ty.shape[0] != tl.shape[0]:
            raise self.error(
                "CTC labels must be integers [B, L]",
                expected=f"int32[{tl.shape[0]}, L]",
                found=str(ty),
            )
        if tm.shape != ty.shape:
            raise self.error(
                "the label mask does not match the CTC labels",
                expected=f"bool{_shape_text(ty.shape)}",
                found=str(tm),
            )
        vocab = tl.shape[2]
        if isinstance(vocab, int) and not 0 <= blank < vocab:
            raise self.error(
                f"the CTC blank id {blank} is not in the vocabulary of {vocab}",
                code="bad-argument",
            )
        inputs = (logits, frame_mask, labels, label_mask)
        return self.typed_op(
            "ctc_loss", inputs, {"blank": blank}, TensorType("float32", tl.shape[:1])
        )

    def scan(self, name: str, body: Graph, xs: list[int], carries: list[int], reverse: bool) -> int:
        """Run `body` along axis 1 of each xs ([B, T, ...]); its outputs are (y, *new carries).

        The body's inputs are named `x0`, `x1`, ... (one time step of each xs, [B, ...]) and
        `c0`, `c1`, ... (the carries); its params are the enclosing graph's, by name. The result
        is the ys stacked along axis 1: [B, T, ...].
        """
        self.graph.subgraphs[name] = body
        y_type = body.ops[body.outputs[0]].type
        tx = self.type(xs[0])
        shape = (tx.shape[0], tx.shape[1], *y_type.shape[1:])
        attrs = {"body": name, "reverse": reverse, "n_xs": len(xs), "n_carries": len(carries)}
        return self.typed_op("scan", (*xs, *carries), attrs, TensorType(y_type.dtype, shape))


def _shape_text(shape: Shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _times(d: Dim, n: int) -> Dim:
    """d * n for an int or symbolic dim (a grouped convolution's input channels)."""
    if n == 1:
        return d
    return d * n if isinstance(d, int) else f"{d}*{n}"


def _result_dtype(a: str, b: str) -> str:
    if a == b:
        return a
    floats = [d for d in (a, b) if d.startswith(("float", "bfloat"))]
    return floats[0] if floats else a


UNARY = {
    "neg",
    "exp",
    "log",
    "tanh",
    "sigmoid",
    "relu",
    "gelu",
    "silu",
    "rsqrt",
    "sqrt",
    "square",
    "sin",
    "cos",
    "logical_not",
    "identity",
}
COMPARE = {"less", "less_equal", "greater", "equal"}
LOGICAL = {"logical_and", "logical_or"}
BINARY = {"add", "sub", "mul", "div", "maximum", "minimum"} | COMPARE | LOGICAL
REDUCE = {"reduce_sum", "reduce_mean", "reduce_max"}
CONV1D_PADDINGS = {"same", "causal", "valid"}
PRIMITIVES = (
    {
        "input",
        "param",
        "constant",
        "fill",
        "conv1d",
        "conv2d",
        "spec_augment",
        "vtlp",
        "ctc_loss",
        "einsum",
        "cast",
        "where",
        "matmul",
        "batched_matmul",
        "softmax",
        "log_softmax",
        "layer_norm",
        "gather",
        "reshape",
        "transpose",
        "concat",
        "slice",
        "take_along",
        "argmax",
        "iota",
        "causal_mask",
        "sinusoid",
        "dropout",
        "scan",
    }
    | UNARY
    | BINARY
    | REDUCE
)
"""Everything a backend implements. A new layer kind lowers to these; it adds none."""

FUSED = {"attention", "linear_cross_entropy"}
"""Ops that only a compiler pass makes (`seqc.compiler.passes`), on the training graph, which
only the training backends (JAX, TF) run: each stands for a chain of `PRIMITIVES` that a
backend may compute as one kernel. Lowering never emits them, so exports never see them."""
