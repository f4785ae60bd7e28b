"""Multi-head self- and cross-attention with causal and padding masks."""

from __future__ import annotations

import math

from seqc.compiler.graph import GraphBuilder
from seqc.compiler.lower.call import LayerCall, lowering
from seqc.compiler.lower.dense import linear
from seqc.spec.errors import CheckError

NEG_INF = -1e9
"""Added to masked scores; large enough to vanish in softmax, finite to keep bf16 stable."""


def _heads(b: GraphBuilder, x: int, heads: int, head_dim: int) -> int:
    """[B, T, h*hd] -> [B, T, h, hd] (a reshape only: the einsums read this layout directly)."""
    bsz, t = b.type(x).shape[0], b.type(x).shape[1]
    return b.reshape(x, (bsz, t, heads, head_dim))


def key_mask(b: GraphBuilder, c: LayerCall, mask: int, keys: int) -> int:
    """bool[B, S] padding mask of the keys -> [B, 1, 1, S]."""
    tm, tk = b.type(mask), b.type(keys)
    if tm.rank != 2 or tm.shape != tk.shape[:2]:
        raise CheckError(
            f"`{c.path}`: the mask does not match the keys",
            span=c.span,
            code="shape-mismatch",
            expected=f"bool[{tk.shape[0]}, {tk.shape[1]}]",
            found=str(tm),
        )
    if tm.dtype != "bool":
        mask = b.binary("greater", mask, b.constant(0, tm.dtype))
    return b.reshape(mask, (tm.shape[0], 1, 1, tm.shape[1]))


def attend(
    b: GraphBuilder,
    c: LayerCall,
    x: int,
    memory: int,
    d_memory: int,
    mask: int | None,
    causal: bool,
) -> int:
    d, heads = c.args["d"], c.args["heads"]
    head_dim = c.args.get("head_dim") or d // heads
    if head_dim * heads != d and not c.args.get("head_dim"):
        raise CheckError(
            f"`{c.path}`: width {d} does not split into {heads} heads",
            span=c.span,
            code="bad-heads",
            hint="choose heads dividing d, or set head_dim",
        )
    for v, width, what in ((x, d, "input"), (memory, d_memory, "memory")):
        if b.type(v).shape[-1] != width:
            raise CheckError(
                f"`{c.path}`: the {what} is {b.type(v)}, expected width {width}",
                span=c.span,
                code="shape-mismatch",
                expected=f"[B, T, {width}]",
                found=str(b.type(v)),
            )
    inner = heads * head_dim
    bias = c.args.get("bias", True)
    q = _heads(b, linear(b, x, d, inner, "q", bias), heads, head_dim)
    k = _heads(b, linear(b, memory, d_memory, inner, "k", bias), heads, head_dim)
    v = _heads(b, linear(b, memory, d_memory, inner, "v", bias), heads, head_dim)
    q = b.binary("mul", q, b.constant(1.0 / math.sqrt(head_dim)))
    scores = b.einsum("bqhd,bkhd->bhqk", q, k)  # [B, h, T, S]
    allowed = None
    if mask is not None:
        allowed = key_mask(b, c, mask, memory)
    if causal:
        tri = b.causal_mask(x, axis=1)  # [T, T]
        allowed = tri if allowed is None else b.binary("logical_and", allowed, tri)
    if allowed is not None:
        scores = b.where(allowed, scores, b.constant(NEG_INF))
    probs = b.dropout(b.softmax(scores, axis=-1), c.args.get("dropout", 0.0))
    ctx = b.einsum("bhqk,bkhd->bqhd", probs, v)  # [B, T, h, hd]
    bsz, t = b.type(x).shape[0], b.type(x).shape[1]
    ctx = b.reshape(ctx, (bsz, t, inner))
    return linear(b, ctx, inner, d, "o", bias)


@lowering("SelfAttention")
def _self_attention(b: GraphBuilder, c: LayerCall) -> int:
    c.allow_kwargs("mask")
    x = c.one_input()
    return attend(b, c, x, x, c.args["d"], c.kwargs.get("mask"), c.args["causal"])


@lowering("CrossAttention")
def _cross_attention(b: GraphBuilder, c: LayerCall) -> int:
    c.allow_kwargs("mask", "memory")
    inputs = list(c.inputs)
    if "memory" in c.kwargs:
        inputs.append(c.kwargs["memory"])
    if len(inputs) != 2:
        raise CheckError(
            f"`{c.path}` (CrossAttention) takes the queries and the memory",
            span=c.span,
            code="arity",
            expected="attn(x, memory, mask = memory_mask)",
        )
    x, memory = inputs
    d_memory = c.args.get("d_memory") or c.args["d"]
    return attend(b, c, x, memory, d_memory, c.kwargs.get("mask"), causal=False)
