"""Attention as one primitive: the chain a multi-head attention layer lowers to becomes one
`attention` op that a backend may run as a fused kernel.

An attention layer lowers to scale, scores, mask, softmax and weighted sum
(`seqc.compiler.lower.attention.attend`):

    q' = mul(q, scale)                         [B, T, h, d]
    s  = einsum("bqhd,bkhd->bhqk", q', k)      [B, h, T, S]
    s' = where(allowed, s, fill)               (allowed: causal_mask, a key mask, or both)
    p  = softmax(s', axis = -1)
    o  = einsum("bhqk,bkhd->bqhd", p, v)       [B, T, h, d]

which materializes the [B, h, T, S] scores and probabilities, forward and backward. A fused
kernel (cuDNN's flash attention, which JAX reaches through `jax.nn.dot_product_attention`)
computes `o` from q, k and v in tiles and never holds them. The pass replaces each such chain
whose intermediate values nothing else reads by

    o = attention(q, k, v[, allowed]) {scale, causal, fill}

where `causal` says the causal mask is part of the mask (a kernel builds it itself) and
`allowed` is the rest of it (a key-padding mask), if any. A backend without a fused kernel for
the case at hand computes the same chain (`seqc.backends.jax.ops`, `seqc.backends.tf.ops`),
so the pass changes no number there. Dropout on the probabilities (a layer's `dropout > 0`)
sits between softmax and the weighted sum and keeps the chain as it is: the fused kernels take
no dropout mask.
"""

from __future__ import annotations

from seqc.compiler.graph import Graph, Op
from seqc.compiler.passes.base import Rebuild, kept
from seqc.compiler.passes.dce import dce

SCORES = "bqhd,bkhd->bhqk"
MIX = "bhqk,bkhd->bqhd"


def _readers(graph: Graph) -> dict[int, list[Op]]:
    out: dict[int, list[Op]] = {op.id: [] for op in graph.ops}
    for op in graph.ops:
        for i in op.inputs:
            out[i].append(op)
    return out


def _scalar(graph: Graph, vid: int) -> float | None:
    """The value of a scalar float `constant` op, else None."""
    op = graph.ops[vid]
    if op.kind != "constant" or op.type.rank != 0 or not op.type.dtype.startswith("float"):
        return None
    try:
        return float(op.attrs["value"])
    except (TypeError, ValueError):
        return None


def _match(graph: Graph, mix: Op, readers: dict[int, list[Op]], keep: set[int]) -> dict | None:
    """The fused op's operands and attributes if `mix` ends an attention chain, else None."""
    if mix.kind != "einsum" or mix.attrs.get("equation") != MIX:
        return None
    probs, v = (graph.ops[i] for i in mix.inputs)
    if probs.kind != "softmax" or probs.attrs.get("axis") not in (-1, 3):
        return None
    inner = [probs.id]
    masked = graph.ops[probs.inputs[0]]
    causal, allowed, fill = False, None, None
    if masked.kind == "where":
        cond, scores_id, fill_id = masked.inputs
        fill = _scalar(graph, fill_id)
        if fill is None:
            return None
        inner.append(masked.id)
        cond_op = graph.ops[cond]
        if cond_op.kind == "causal_mask":
            causal = True
        elif cond_op.kind == "logical_and" and any(
            graph.ops[i].kind == "causal_mask" for i in cond_op.inputs
        ):
            causal = True
            a, b = cond_op.inputs
            allowed = b if graph.ops[a].kind == "causal_mask" else a
        else:
            allowed = cond
        scores = graph.ops[scores_id]
    else:
        scores = masked
    if scores.kind != "einsum" or scores.attrs.get("equation") != SCORES:
        return None
    inner.append(scores.id)
    q, k = scores.inputs
    scale = None
    scaled = graph.ops[q]
    if scaled.kind == "mul" and len(readers[scaled.id]) == 1:
        value = _scalar(graph, scaled.inputs[1])
        if value is not None:
            scale, q = value, scaled.inputs[0]
            inner.append(scaled.id)
    # every value the chain computes on its way is read by the next link only
    for vid in inner:
        if vid in keep or len(readers[vid]) != 1:
            return None
    if causal and graph.ops[q].type.shape[1] != graph.ops[k].type.shape[1]:
        return None  # a causal mask is square: queries and keys of one length
    inputs = (q, k, v.id) if allowed is None else (q, k, v.id, allowed)
    return {"inputs": inputs, "attrs": {"scale": scale, "causal": causal, "fill": fill}}


def fuse_attention(graph: Graph) -> Graph:
    readers, keep = _readers(graph), kept(graph)
    chains = {op.id: m for op in graph.ops if (m := _match(graph, op, readers, keep)) is not None}
    if not chains:
        return graph
    out = Rebuild(graph)
    for op in graph.ops:
        chain = chains.get(op.id)
        if chain is None:
            out.copy(op)
            continue
        inputs = tuple(out.ids[i] for i in chain["inputs"])
        out.ids[op.id] = out.add("attention", inputs, chain["attrs"], op.type, op.layer, op.span)
    return dce(out.finish())
