"""Sibling-matmul fusion: matmuls that read the same input with weight params become one.

Attention projects its input three times (q, k, v), a gated MLP twice, a recurrent layer's input
once per gate matrix: each is a [..., d] @ [d, n] product of the same rows. One product with the
weights side by side, [..., d] @ [d, n1 + n2 + ...], reads the input once and gives the
framework one larger matrix multiply, which is what a hand-written model does with a fused qkv
matrix. The weights stay separate params under their own names (the checkpoint format does not
change): the fused matrix is a `concat` of them inside the step, and the gradient of each is
its slice of the fused one. Each product's result is a `slice` of the fused output, labelled
with that product's layer and span.

Only weights that are params are fused (a tied table used transposed is another op), and only
at the top level of the graph (a recurrence's body is left as it is).
"""

from __future__ import annotations

from collections import defaultdict

from seqc.compiler.graph import Graph, Op, TensorType
from seqc.compiler.passes.base import Rebuild
from seqc.compiler.passes.dce import dce


def _siblings(graph: Graph) -> dict[int, list[Op]]:
    """Groups of two or more fusable matmuls, keyed by the first one's id."""
    by_input: dict[tuple[int, str], list[Op]] = defaultdict(list)
    for op in graph.ops:
        if op.kind != "matmul":
            continue
        x, w = (graph.ops[i] for i in op.inputs)
        if w.kind != "param" or w.type.rank != 2 or not isinstance(w.type.shape[1], int):
            continue
        by_input[(x.id, w.type.dtype)].append(op)
    return {group[0].id: group for group in by_input.values() if len(group) >= 2}


def _common_layer(ops: list[Op]) -> str:
    """The layer path the fused ops belong to: the siblings' common prefix (`blocks.0.attn`)."""
    paths = [op.layer.split(".") for op in ops]
    common: list[str] = []
    for parts in zip(*paths, strict=False):
        if len(set(parts)) != 1:
            break
        common.append(parts[0])
    return ".".join(common)


def fuse_matmul(graph: Graph) -> Graph:
    groups = _siblings(graph)
    if not groups:
        return graph
    fused_later = {op.id for group in groups.values() for op in group[1:]}
    out = Rebuild(graph)
    for op in graph.ops:
        if op.id in fused_later:
            continue  # computed with its group's first
        group = groups.get(op.id)
        if group is None:
            out.copy(op)
            continue
        layer = _common_layer(group)
        weights = []
        for m in group:
            w = graph.ops[m.inputs[1]]
            # a reference to the param here: the first sibling may come before the others' own
            weights.append(out.add("param", (), w.attrs, w.type, w.layer, w.span))
        width = sum(int(graph.ops[m.inputs[1]].type.shape[1]) for m in group)
        k = graph.ops[op.inputs[1]].type.shape[0]
        dtype = graph.ops[op.inputs[1]].type.dtype
        concat = out.add(
            "concat", tuple(weights), {"axis": 1}, TensorType(dtype, (k, width)), layer, op.span
        )
        x = out.ids[op.inputs[0]]
        rows = op.type.shape[:-1]
        product = out.add(
            "matmul", (x, concat), {}, TensorType(op.type.dtype, (*rows, width)), layer, op.span
        )
        start = 0
        for m in group:
            n = int(m.type.shape[-1])
            axis = len(m.type.shape) - 1
            attrs = {"axis": axis, "start": start, "end": start + n}
            out.ids[m.id] = out.add("slice", (product,), attrs, m.type, m.layer, m.span)
            start += n
    return dce(out.finish())
