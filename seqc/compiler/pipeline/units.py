"""The places a pipeline stage may begin: the graph's ops in runs by top-level layer.

A unit is a maximal run of consecutive ops (the graph is in topological order) of one layer at
the top of the model's tree: `embed`, `pos`, `norm`, and each copy of a `repeat` (`blocks.3`,
`encoder.blocks.3`: the path up to its first index). Ops of no layer (the model's inputs) join
the unit after them. A stage is a contiguous run of units, so a cut never falls inside a
layer: a block's residual stream and its sublayers stay together.

Each unit carries what the partitioner weighs: its forward FLOPs at the batch's sizes (a
stage's time is forward + backward, about 3x that, `placement.from_graph.BACKWARD_FACTOR`),
the bytes of the params it is the first to read (a tied table is charged where it is first
read), and the bytes of the activations it keeps for the backward pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from seqc.compiler.cost import FREE_KINDS, op_flops, size
from seqc.compiler.graph import DTYPE_BYTES, Graph

LEAF_KINDS = frozenset({"input", "param", "constant", "fill"})
"""Ops of no input: each stage that reads one makes its own (`stages.split`), so none is ever
handed from stage to stage."""


@dataclass(frozen=True)
class Unit:
    """Ops [start, stop) of the graph, of the top-level layer `path`."""

    path: str
    start: int
    stop: int
    flops: int
    """Forward FLOPs at the sizes the plan was costed at (one whole batch)."""
    param_bytes: int
    activation_bytes: int
    """Bytes of the outputs of its ops that compute (kept for the backward pass)."""
    out_bytes: int = 0
    """Bytes of its last op's output: what it hands the next unit (a residual stream)."""


def unit_path(layer: str) -> str:
    """The top-level layer an op's layer path belongs to: `blocks.3.attn.q` -> `blocks.3`,
    `encoder.blocks.2.ff` -> `encoder.blocks.2`, `embed` -> `embed`."""
    parts = layer.split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[: i + 1])
    return parts[0]


def units_of(graph: Graph, dims: dict[str, int]) -> list[Unit]:
    """The graph's units in order (see the module's docstring), costed at `dims`."""
    keys = [unit_path(op.layer) if op.layer else "" for op in graph.ops]
    for i in range(len(keys) - 2, -1, -1):  # ops of no layer join the unit after them
        if not keys[i]:
            keys[i] = keys[i + 1]
    for i in range(1, len(keys)):  # ... or, at the end, the one before
        if not keys[i]:
            keys[i] = keys[i - 1]
    runs: list[tuple[str, int, int]] = []
    for i, key in enumerate(keys):
        if runs and runs[-1][0] == key:
            runs[-1] = (key, runs[-1][1], i + 1)
        else:
            runs.append((key, i, i + 1))
    seen: set[str] = set()
    units = []
    for key, start, stop in runs:
        flops = params = acts = 0
        for op in graph.ops[start:stop]:
            if op.kind == "param":
                name = op.attrs["name"]
                if name not in seen:
                    seen.add(name)
                    p = graph.params[name]
                    params += p.size * DTYPE_BYTES.get(p.type.dtype, 4)
                continue
            flops += op_flops(op, graph, dims)
            if op.kind not in FREE_KINDS:
                acts += size(op.type.shape, dims) * DTYPE_BYTES.get(op.type.dtype, 4)
        last = graph.ops[stop - 1].type
        out = size(last.shape, dims) * DTYPE_BYTES.get(last.dtype, 4)
        units.append(Unit(key or "(model)", start, stop, flops, params, acts, out))
    return units
