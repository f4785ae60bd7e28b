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


DIMS = {"B": 1, "T": 128, "S": 128}
"""The sizes a pass report's FLOPs are counted at, unless given."""


def report(
    name: str, before: Sequence[Graph], after: Sequence[Graph], dims: dict[str, int] | None = None
) -> PassReport:
    """What a pass changed, over the graphs a step runs before and after it (a graph pass: the
    training graph; `fuse_loss`: that and the criterion)."""
    from seqc.compiler.cost import estimate

    def measure(graphs: Sequence[Graph]) -> tuple[int, Counter[str]]:
        flops = sum(estimate(g, dims or DIMS).flops for g in graphs)
        return flops, sum((Counter(op.kind for op in g.ops) for g in graphs), Counter())

    (f0, k0), (f1, k1) = measure(before), measure(after)
    return PassReport(name, sum(k0.values()), sum(k1.values()), f0, f1, k0, k1)


def run_passes(
    graph: Graph, names: Sequence[str], dims: dict[str, int] | None = None
) -> tuple[Graph, list[PassReport]]:
    """Apply the named graph passes in `PASSES` order (others in `names`, such as
    `fuse_loss`, are not graph passes); the graph and what each pass changed (FLOPs at `dims`,
    default `DIMS`)."""
    from seqc.compiler.passes import PASSES

    reports = []
    for name in PASSES:
        if name not in names:
            continue
        passed = PASSES[name].run(graph)
        reports.append(report(name, [graph], [passed], dims))
        graph = passed
    return graph, reports
