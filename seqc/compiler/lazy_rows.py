"""Which params a training step touches only a few rows of: the tables read only by `gather`.

An embedding table, or a sampled criterion's output matrix, is read by gathering the rows of
this step's ids; its gradient is zero everywhere else. A dense optimizer still reads and writes
all V rows of the param and its moments every step: at V = 100k, d = 256 that was 129 ms of a
260 ms sampled step (README, "Large vocabularies"). `adam(lazy_rows = true)` updates only the
rows that were gathered (TF's LazyAdam), and the backends need to know which params qualify
and along which axis their rows run. That is a property of the graphs, found once here.

A param qualifies when every read of it, in every graph a training step runs (the forward and
the training criterion), is the table operand of a `gather`, all along one axis, and no scan
body reads it (a body's reads are per time step; they would need the ids of every step).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from seqc.compiler.config import Adam, OptimizerConfig
from seqc.compiler.graph import Graph


@dataclass(frozen=True)
class LazyRows:
    """A param whose gradient lives on the rows (along `axis`) that the step's gathers read."""

    name: str
    axis: int
    gathers: int
    """How many gather ops read it, in all the step's graphs."""


def _reads(graph: Graph) -> dict[str, list[tuple[str, int]]]:
    """Param name -> how each read of it is used: ("gather", axis), or ("other", -1)."""
    of_value = {op.id: op.attrs["name"] for op in graph.ops if op.kind == "param"}
    reads: dict[str, list[tuple[str, int]]] = {name: [] for name in of_value.values()}
    for op in graph.ops:
        for position, vid in enumerate(op.inputs):
            if vid not in of_value:
                continue
            table = op.kind == "gather" and position == 0
            use = ("gather", int(op.attrs.get("axis", 0))) if table else ("other", -1)
            reads[of_value[vid]].append(use)
    for body in graph.subgraphs.values():
        for name in _params_read(body):
            reads.setdefault(name, []).append(("other", -1))
    return reads


def _params_read(graph: Graph) -> set[str]:
    names = {op.attrs["name"] for op in graph.ops if op.kind == "param"}
    for body in graph.subgraphs.values():
        names |= _params_read(body)
    return names


def row_sparse(graphs: Iterable[Graph]) -> dict[str, LazyRows]:
    """The params of these graphs (run by one training step) that only gathers read."""
    uses: dict[str, list[tuple[str, int]]] = {}
    for graph in graphs:
        for name, reads in _reads(graph).items():
            uses.setdefault(name, []).extend(reads)
    found: dict[str, LazyRows] = {}
    for name, reads in uses.items():
        axes = {axis for kind, axis in reads if kind == "gather"}
        if reads and all(kind == "gather" for kind, _ in reads) and len(axes) == 1:
            found[name] = LazyRows(name, axes.pop(), len(reads))
    return found


def lazy_tables(graphs: Iterable[Graph], optimizer: OptimizerConfig) -> dict[str, LazyRows]:
    """The params a training step updates by rows: the row-sparse ones when the optimizer is
    `adam(lazy_rows = true)`, else none."""
    if not (isinstance(optimizer, Adam) and optimizer.lazy_rows):
        return {}
    return row_sparse(graphs)
