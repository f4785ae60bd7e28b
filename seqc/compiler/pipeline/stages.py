"""The model's graph split into one graph per pipeline stage, and what each hands the next.

Stage k runs ops [start_k, start_k+1) of the graph. A value it reads from an earlier stage is
either a leaf (an input, param, constant or fill: the stage makes its own copy of the op, so
every stage reads the batch's inputs itself and a tied weight is read where it is used) or a
computed value, which comes in as one of the stage's `carry` inputs. A value computed before
a boundary and read after it crosses it, passed on by every stage in between, so each
boundary's carries are exactly the values live across it.

Every stage graph is an ordinary `Graph` (ops renumbered, inputs named, the graph's
subgraphs shared), so a backend runs it with its one interpreter: a stage is the model's own
lowering, cut, never a second one.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from seqc.compiler.graph import Graph, Op, TensorType
from seqc.compiler.pipeline.units import LEAF_KINDS

CARRY = "carry."
"""Prefix of a stage input that the previous stage computed: `carry.<value id>`."""


@dataclass
class Stage:
    """One stage's graph and its boundary values (ids of the whole graph's values)."""

    index: int
    graph: Graph
    carry_in: list[int] = field(default_factory=list)
    carry_out: list[int] = field(default_factory=list)
    params: list[str] = field(default_factory=list)
    """The params its ops read."""


def carry_name(vid: int) -> str:
    return f"{CARRY}{vid}"


def split(graph: Graph, starts: list[int]) -> list[Stage]:
    """The graph cut before each op id of `starts` (increasing, each > 0)."""
    bounds = [0, *starts, len(graph.ops)]
    stage_of = [0] * len(graph.ops)
    for k, (a, b) in enumerate(itertools.pairwise(bounds)):
        for i in range(a, b):
            stage_of[i] = k
    count = len(bounds) - 1
    last_read = [-1] * len(graph.ops)  # the last stage that reads each value
    for op in graph.ops:
        for v in op.inputs:
            last_read[v] = max(last_read[v], stage_of[op.id])
    for v in graph.outputs:
        last_read[v] = count  # read by the caller, after the last stage
    live = [
        [v for v in range(bounds[k]) if graph.ops[v].kind not in LEAF_KINDS and last_read[v] >= k]
        for k in range(count + 1)
    ]
    stages = []
    for k in range(count):
        a, b = bounds[k], bounds[k + 1]
        out = graph.outputs if k == count - 1 else live[k + 1]
        stages.append(_stage(graph, k, a, b, live[k], out))
    return stages


def _stage(
    graph: Graph, k: int, start: int, stop: int, carry_in: list[int], outputs: list[int]
) -> Stage:
    g = Graph(subgraphs=graph.subgraphs, head=graph.head)
    new: dict[int, int] = {}

    def add(kind: str, inputs: tuple[int, ...], attrs: dict, t: TensorType, src: Op) -> int:
        vid = len(g.ops)
        g.ops.append(Op(vid, kind, inputs, attrs, t, src.layer, src.span))
        return vid

    for name, vid in graph.inputs.items():  # every stage is given the whole micro-batch
        new[vid] = add("input", (), {"name": name}, graph.ops[vid].type, graph.ops[vid])
        g.inputs[name] = new[vid]
    for vid in carry_in:
        name = carry_name(vid)
        new[vid] = add("input", (), {"name": name}, graph.ops[vid].type, graph.ops[vid])
        g.inputs[name] = new[vid]

    def value(v: int) -> int:
        if v not in new:  # a leaf of an earlier stage: this stage's own copy
            src = graph.ops[v]
            assert src.kind in LEAF_KINDS, f"value {v} crosses a stage boundary uncarried"
            new[v] = add(src.kind, (), src.attrs, src.type, src)
        return new[v]

    reads: list[str] = []
    for op in graph.ops[start:stop]:
        if op.kind == "input":
            continue  # made above
        inputs = tuple(value(v) for v in op.inputs)
        new[op.id] = add(op.kind, inputs, op.attrs, op.type, op)
    for name in _param_reads(g):
        if name not in reads:
            reads.append(name)
    g.params = {n: graph.params[n] for n in reads}
    g.outputs = [value(v) for v in outputs]
    return Stage(k, g, list(carry_in), list(outputs), reads)


def _param_reads(graph: Graph) -> list[str]:
    """The params a graph's ops read, its scans' bodies included, in order."""
    names = []
    for op in graph.ops:
        if op.kind == "param":
            names.append(op.attrs["name"])
        elif op.kind == "scan":
            names.extend(_param_reads(graph.subgraphs[op.attrs["body"]]))
    return names


def readers(stages: list[Stage], criterion: Graph | None = None) -> dict[str, set[int]]:
    """Param -> the stages that read it; the criterion (a fused or sampled loss reads the
    output layer's weights) runs on the last stage."""
    found: dict[str, set[int]] = {}
    for stage in stages:
        for name in stage.params:
            found.setdefault(name, set()).add(stage.index)
    if criterion is not None:
        for name in _param_reads(criterion):
            found.setdefault(name, set()).add(len(stages) - 1)
    return found
