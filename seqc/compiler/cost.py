"""Cost estimates of an op graph: FLOPs, parameter bytes and activation bytes, per op and layer.

Symbolic dims are bound to sizes (e.g. B = 32, T = 128) for the estimate. FLOPs count a
multiply-add as two; elementwise ops count one per output element; a scan counts its body once
per time step. The same figures feed `seqc show --graph`, the throughput benchmark's MFU and the
placement pass.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from seqc.compiler.graph import DTYPE_BYTES, Dim, Graph, Op

_EW_COST = {
    "softmax": 5,
    "log_softmax": 5,
    "layer_norm": 8,
    "gelu": 8,
    "silu": 4,
    "dropout": 2,
    "spec_augment": 2,  # a mask test and a select per element; the band draws are negligible
    "vtlp": 4,  # two gathers and a blend per element; the warp per row is negligible
}
CTC_STEP_FLOPS = 10
"""FLOPs per (frame, extended-label state) of CTC's forward recursion: a log-sum-exp of up to
three predecessors and the emission's log-probability (the backward pass is the gradient's)."""
FREE_KINDS = {"input", "param", "constant", "reshape", "transpose", "slice", "iota", "identity"}


@dataclass
class LayerCost:
    ops: int = 0
    flops: int = 0
    params: int = 0
    activation_bytes: int = 0


@dataclass
class CostReport:
    dims: dict[str, int]
    flops: int = 0
    param_count: int = 0
    param_bytes: int = 0
    activation_bytes: int = 0
    op_count: int = 0
    per_op: dict[int, int] = field(default_factory=dict)
    per_layer: dict[str, LayerCost] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return self.dims.get("B", 1) * self.dims.get("T", 1)

    @property
    def flops_per_token(self) -> float:
        return self.flops / max(self.tokens, 1)


def size(shape: tuple[Dim, ...], dims: dict[str, int]) -> int:
    n = 1
    for d in shape:
        n *= d if isinstance(d, int) else _eval(d, dims)
    return n


def _dim(d: Dim, dims: dict[str, int]) -> int:
    return d if isinstance(d, int) else _eval(d, dims)


def _eval(d: str, dims: dict[str, int]) -> int:
    if d in dims:
        return dims[d]
    try:  # composite dims such as "(T+1)" or "ceil(T/2)"
        return int(eval(d, {"__builtins__": {}, "ceil": lambda x: -(-x // 1)}, dict(dims)))
    except Exception:
        return 1


def op_flops(op: Op, graph: Graph, dims: dict[str, int]) -> int:
    out = size(op.type.shape, dims)
    if op.kind in FREE_KINDS or op.kind in ("gather", "fill", "causal_mask", "cast"):
        return 0
    if op.kind in ("matmul", "batched_matmul"):
        k = graph.ops[op.inputs[0]].type.shape[-1]
        return 2 * out * (k if isinstance(k, int) else _eval(k, dims))
    if op.kind == "einsum":  # 2 x the product of every index size (contracted ones too)
        sizes: dict[str, int] = {}
        for spec, v in zip(op.attrs["equation"].split("->")[0].split(","), op.inputs, strict=True):
            for c, d in zip(spec, graph.ops[v].type.shape, strict=True):
                sizes[c] = d if isinstance(d, int) else _eval(d, dims)
        n = 1
        for v in sizes.values():
            n *= v
        return 2 * n
    if op.kind == "attention":  # the chain it stands for (`passes.fuse_attention`)
        bsz, t, heads, d = (_dim(x, dims) for x in graph.ops[op.inputs[0]].type.shape)
        s = _dim(graph.ops[op.inputs[1]].type.shape[1], dims)
        scores = bsz * heads * t * s
        masked = int(op.attrs["causal"] or len(op.inputs) > 3)  # a select per score
        scaled = int(op.attrs["scale"] is not None) * bsz * t * heads * d  # q times the scale
        return 4 * scores * d + (_EW_COST["softmax"] + masked) * scores + scaled
    if op.kind == "linear_cross_entropy":  # the output layer and the log-softmax it replaces
        h = graph.ops[op.inputs[0]].type.shape
        w = graph.ops[op.inputs[1]].type.shape
        vocab = _dim(w[op.attrs["vocab_axis"]], dims)
        logits = size(h[:-1], dims) * vocab
        softmax = _EW_COST["log_softmax"] + int(op.attrs["bias"])
        return 2 * logits * _dim(h[-1], dims) + softmax * logits
    if op.kind == "conv1d":  # w[width, c_in / groups, c_out]: a grouped one is this much cheaper
        w = graph.ops[op.inputs[1]].type.shape
        return 2 * out * int(w[0]) * int(w[1])
    if op.kind == "conv2d":  # w[kh, kw, c_in, c_out]
        w = graph.ops[op.inputs[1]].type.shape
        return 2 * out * int(w[0]) * int(w[1]) * int(w[2])
    if op.kind == "ctc_loss":  # log-softmax over the scores, then B * F * (2L + 1) states
        scores = size(graph.ops[op.inputs[0]].type.shape, dims)
        b_f = size(graph.ops[op.inputs[1]].type.shape, dims)
        labels = graph.ops[op.inputs[2]].type.shape[1]
        n = labels if isinstance(labels, int) else _eval(labels, dims)
        return _EW_COST["log_softmax"] * scores + CTC_STEP_FLOPS * b_f * (2 * n + 1)
    if op.kind == "scan":
        body = graph.subgraphs[op.attrs["body"]]
        steps = graph.ops[op.inputs[0]].type.shape[1]
        n = steps if isinstance(steps, int) else _eval(steps, dims)
        return n * sum(op_flops(o, body, dims) for o in body.ops)
    return out * _EW_COST.get(op.kind, 1)


def estimate(graph: Graph, dims: dict[str, int]) -> CostReport:
    report = CostReport(dims=dict(dims))
    layers: dict[str, LayerCost] = defaultdict(LayerCost)
    for op in graph.ops:
        f = op_flops(op, graph, dims)
        report.per_op[op.id] = f
        report.flops += f
        act = (
            0
            if op.kind in ("param", "constant")
            else size(op.type.shape, dims) * DTYPE_BYTES[op.type.dtype]
        )
        report.activation_bytes += act
        op.flops, op.bytes = f, act
        lc = layers[op.layer or "<model>"]
        lc.ops += 1
        lc.flops += f
        lc.activation_bytes += act
    for p in graph.params.values():
        report.param_count += p.size
        report.param_bytes += p.size * DTYPE_BYTES[p.type.dtype]
        layers[p.layer or "<model>"].params += p.size
    report.op_count = len(graph.ops)
    report.per_layer = dict(layers)
    return report
