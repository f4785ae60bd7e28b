"""Position-wise layers: Linear, FeedForward, Activation, Dropout, Softmax, Conv1D."""

from __future__ import annotations

import math

from seqc.compiler.graph import GraphBuilder, Head, Init
from seqc.compiler.lower.call import LayerCall, activation, lowering
from seqc.spec.errors import CheckError


def linear(b: GraphBuilder, x: int, d_in: int, d_out: int, name: str, bias: bool = True) -> int:
    """x @ w (+ b), with w glorot-initialised; params `<name>.w`, `<name>.b`."""
    w = b.param(f"{name}.w", (d_in, d_out), Init("glorot"))
    y = b.matmul(x, w)
    if bias:
        y = b.binary("add", y, b.param(f"{name}.b", (d_out,), Init("zeros")))
    return y


@lowering("Linear")
def _linear(b: GraphBuilder, c: LayerCall) -> int:
    c.allow_kwargs()
    x = c.one_input()
    y = linear(b, x, c.args["d_in"], c.args["d_out"], "linear", c.args["bias"])
    return activation(b, c.args["activation"], y)


@lowering("FeedForward")
def _feed_forward(b: GraphBuilder, c: LayerCall) -> int:
    c.allow_kwargs()
    x = c.one_input()
    d, ff, bias = c.args["d"], c.args["ff"], c.args.get("bias", True)
    h = activation(b, c.args["activation"], linear(b, x, d, ff, "w1", bias))
    if c.args.get("gated"):
        h = b.binary("mul", h, linear(b, x, d, ff, "wg", bias))
    h = b.dropout(h, c.args["dropout"])
    return linear(b, h, ff, d, "w2", bias)


@lowering("Activation")
def _activation(b: GraphBuilder, c: LayerCall) -> int:
    c.allow_kwargs()
    return activation(b, c.args["fn"], c.one_input())


@lowering("Dropout")
def _dropout(b: GraphBuilder, c: LayerCall) -> int:
    c.allow_kwargs()
    x = c.one_input()
    axes = (1,) if c.args.get("broadcast_time") else ()
    return b.dropout(x, c.args["rate"], axes)


@lowering("Softmax")
def _softmax(b: GraphBuilder, c: LayerCall) -> int:
    """Vocabulary logits. With `tie`, the output matrix is the tied embedding table, transposed."""
    c.allow_kwargs()
    x = c.one_input()
    vocab, d = c.args["vocab"], c.args["d"]
    tie = c.args.get("tie")
    if tie:
        path = c.siblings.get(tie)
        table = f"{path}.table"
        if path is None or table not in b.graph.params:
            raise CheckError(
                f"`tie = {tie}` needs an Embedding called before this layer",
                span=c.span,
                code="bad-tie",
                hint=f"call `{tie}` earlier in the forward body",
            )
        t = b.graph.params[table].type.shape
        if t != (vocab, d):
            raise CheckError(
                f"tied table `{table}` is {list(t)}, this softmax needs [{vocab}, {d}]",
                span=c.span,
                code="shape-mismatch",
            )
        w = b.transpose(b.shared_param(table), (1, 0))
        weight, vocab_axis = table, 0
    else:
        w = b.param("w", (d, vocab), Init("glorot"))
        weight, vocab_axis = b.graph.ops[w].attrs["name"], 1
    logits = b.matmul(x, w)
    bias = None
    if c.args["bias"]:
        bias_op = b.param("b", (vocab,), Init("zeros"))
        logits = b.binary("add", logits, bias_op)
        bias = b.graph.ops[bias_op].attrs["name"]
    b.graph.head = Head(x, logits, weight, vocab_axis, bias, b.layer, c.span)
    return logits


@lowering("Conv1D")
def _conv1d(b: GraphBuilder, c: LayerCall) -> int:
    c.allow_kwargs()
    x = c.one_input()
    width, d_in, d_out = c.args["width"], c.args["d_in"], c.args["d_out"]
    w = b.param("w", (width, d_in, d_out), Init("normal", 1.0 / math.sqrt(width * d_in)))
    y = b.conv1d(x, w, c.args.get("stride", 1), "causal" if c.args.get("causal") else "same")
    if c.args.get("bias", True):
        y = b.binary("add", y, b.param("b", (d_out,), Init("zeros")))
    return activation(b, c.args.get("activation", "none"), y)
