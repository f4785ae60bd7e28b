"""What a pass is, how a graph is rebuilt by one, and the report of a pipeline.

Value ids are positions in `Graph.ops` (ops are in topological order), so a pass never edits a
graph in place: it rebuilds it with `Rebuild`, which renumbers what it copies and maps the old
ids of the graph's inputs, outputs and output layer (`Graph.head`) to the new ones.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from seqc.compiler.graph import Graph, Op, TensorType
from seqc.spec import ir


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable[[Graph], Graph]
    doc: str


@dataclass(frozen=True)
class PassReport:
    """One pass's effect: op counts (by kind) and forward FLOPs before and after."""

    name: str
    ops_before: int
    ops_after: int
    flops_before: int
    flops_after: int
    kinds_before: Counter[str]
    kinds_after: Counter[str]


class Rebuild:
    """A new graph built from `old` op by op; `ids` maps each copied old id to its new one."""

    def __init__(self, old: Graph) -> None:
        self.old = old
        self.graph = Graph(params=old.params, subgraphs=old.subgraphs)
        self.ids: dict[int, int] = {}

    def add(
        self,
        kind: str,
        inputs: tuple[int, ...],
        attrs: dict[str, Any],
        type_: TensorType,
        layer: str,
        span: ir.Span | None,
    ) -> int:
        """Append an op whose `inputs` are new ids; its new id."""
        vid = len(self.graph.ops)
        self.graph.ops.append(Op(vid, kind, inputs, attrs, type_, layer, span))
        return vid

    def copy(self, op: Op) -> int:
        """Append `op` with its inputs mapped; records and returns its new id."""
        vid = self.add(
            op.kind, tuple(self.ids[i] for i in op.inputs), op.attrs, op.type, op.layer, op.span
        )
        self.ids[op.id] = vid
        return vid

    def finish(self) -> Graph:
        g, ids = self.graph, self.ids
        g.inputs = {name: ids[vid] for name, vid in self.old.inputs.items()}
        g.outputs = [ids[vid] for vid in self.old.outputs]
        head = self.old.head
        if head is not None and head.hidden in ids and head.logits in ids:
            g.head = dataclasses.replace(head, hidden=ids[head.hidden], logits=ids[head.logits])
        return g


def kept(graph: Graph) -> set[int]:
    """Values a pass may not remove: inputs (the signature), outputs and the output layer's."""
    keep = set(graph.inputs.values()) | set(graph.outputs)
    if graph.head is not None:
        keep |= {graph.head.hidden, graph.head.logits}
    return keep


def run_passes(
    graph: Graph, names: Sequence[str], dims: dict[str, int] | None = None
) -> tuple[Graph, list[PassReport]]:
    """Apply the named passes in `PASSES` order; the graph and what each pass changed
    (FLOPs at `dims`, default B = 1, T = S = 128)."""
    from seqc.compiler.cost import estimate
    from seqc.compiler.passes import PASSES

    dims = dims or {"B": 1, "T": 128, "S": 128}
    reports = []
    for name in PASSES:
        if name not in names:
            continue
        before = estimate(graph, dims).flops, Counter(op.kind for op in graph.ops)
        graph = PASSES[name].run(graph)
        after = estimate(graph, dims).flops, Counter(op.kind for op in graph.ops)
        reports.append(
            PassReport(
                name,
                sum(before[1].values()),
                sum(after[1].values()),
                before[0],
                after[0],
                before[1],
                after[1],
            )
        )
    return graph, reports
