"""Common-subexpression elimination: an op identical to an earlier one (same kind, same
inputs, same attributes) reuses its value.

Layers lowered one at a time repeat work a whole-step view can share: each attention layer
builds the same causal mask (`SHAPE_ONLY`) and the same key-padding mask from the same input,
each reference to a param is its own `param` op, scalars such as `1/sqrt(head_dim)` are a
constant per layer.
Random ops (`dropout`, `spec_augment`, `vtlp`) are never merged: two draws are two draws, and the
order in which they draw is kept, so a training run with the pass draws the same masks.
Attributes that cannot be compared by value (an array constant) keep their op.
"""

from __future__ import annotations

from typing import Any

from seqc.compiler.graph import Graph
from seqc.compiler.passes.base import Rebuild

RANDOM = {"dropout", "spec_augment", "vtlp"}
"""Ops that draw randomness: each is its own draw."""

NEVER = RANDOM | {"input", "scan"}

SHAPE_ONLY = {"causal_mask", "iota"}
"""Ops that read only a size of their input, which their output type states (`bool[T, T]`,
`int32[T]`): two of them with one type are one value whatever their inputs, as each attention
layer's causal mask of the same length is."""


def _key(value: Any) -> Any:
    """A hashable form of an attribute value, or a TypeError for one that is not comparable."""
    if isinstance(value, list | tuple):
        return tuple(_key(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _key(v)) for k, v in value.items()))
    hash(value)
    if type(value).__module__ == "numpy":  # a numpy scalar: compare by type and value
        return (type(value).__name__, value.item())
    return (type(value).__name__, value)


def cse(graph: Graph) -> Graph:
    out = Rebuild(graph)
    seen: dict[Any, int] = {}
    merged = 0
    for op in graph.ops:
        if op.kind in NEVER:
            out.copy(op)
            continue
        try:
            inputs = () if op.kind in SHAPE_ONLY else tuple(out.ids[i] for i in op.inputs)
            key = (op.kind, inputs, _key(op.attrs), op.type)
        except TypeError:
            out.copy(op)
            continue
        if key in seen:
            out.ids[op.id] = seen[key]
            merged += 1
        else:
            seen[key] = out.copy(op)
    return out.finish() if merged else graph
