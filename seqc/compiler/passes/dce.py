"""Dead-op elimination: ops whose values nothing reads are not computed.

Lowering leaves some (a layer's unused branch, the param references a fusion replaced); a
framework's own compiler drops most of them too, but the cost model, the placer and the
exported artifacts see the graph itself. Inputs stay (they are the graph's signature), and so
do the outputs and the output layer's values (`Graph.head`).
"""

from __future__ import annotations

from seqc.compiler.graph import Graph
from seqc.compiler.passes.base import Rebuild, kept


def live(graph: Graph) -> set[int]:
    """The values the graph's kept values depend on, themselves included."""
    alive = kept(graph)
    for op in reversed(graph.ops):
        if op.id in alive:
            alive.update(op.inputs)
    return alive


def dce(graph: Graph) -> Graph:
    alive = live(graph)
    if len(alive) == len(graph.ops):
        return graph
    out = Rebuild(graph)
    for op in graph.ops:
        if op.id in alive:
            out.copy(op)
    return out.finish()
