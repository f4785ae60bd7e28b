"""The placement a spec asks for: `distribution.placement` run on `distribution.devices`.

`seqc place` prints it; `seqc train` runs it (on backends that place ops). Both call `place`
here, so the plan a user inspects is the plan that trains. A plan maps each op of the forward
graph to a device index; backends turn indices into their own devices. A multi-task model is
placed whole (`place_multitask`): one step of every task, over the union of their graphs.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from seqc.compiler.config import OptimizerConfig
from seqc.compiler.graph import Graph
from seqc.compiler.placement import algorithms
from seqc.compiler.placement.checker import check
from seqc.compiler.placement.from_graph import (
    GraphProblem,
    Segment,
    batch_dims,
    problem_from_graph,
)
from seqc.compiler.placement.problem import Plan, Problem
from seqc.compiler.placement.simulate import simulate
from seqc.resolve.experiment import ResolvedExperiment
from seqc.spec.errors import UsageError
from seqc.spec.ir import Span

if TYPE_CHECKING:
    from seqc.compiler.multitask import MultiTask

ALGORITHMS = ("m_topo", "m_etf", "m_sct", "single", "manual")


@dataclass
class Placement:
    """A checked plan over a training step's problem, and what it means for the graph."""

    problem: GraphProblem
    plan: Plan
    span: Span | None
    """The spec line that asked for it (`distribution.placement`)."""

    @property
    def devices(self) -> dict[int, int]:
        """Op id of the forward graph -> device index."""
        return op_devices(self.problem, self.plan)

    @property
    def used(self) -> int:
        """How many devices the plan puts ops on."""
        return len(set(self.plan.device))

    @property
    def trivial(self) -> bool:
        """Everything on device 0: what an unplaced program runs anyway."""
        return set(self.plan.device) <= {0}


def place(
    graph: Graph,
    resolved: ResolvedExperiment,
    task: str,
    algorithm: str | None = None,
    *,
    fuse: bool = True,
    keep_activations: bool = False,
    measured: Mapping[int, float] | None = None,
) -> Placement:
    """Plan one training step of `graph` with the experiment's placement (or `algorithm`);
    `measured`: op seconds from `seqc profile`, in place of the estimate."""
    return _place(
        graph,
        resolved,
        batch_dims(resolved, task),
        algorithm,
        fuse=fuse,
        keep_activations=keep_activations,
        measured=measured,
    )


def place_multitask(
    multi: MultiTask,
    resolved: ResolvedExperiment,
    algorithm: str | None = None,
    *,
    fuse: bool = True,
    keep_activations: bool = False,
) -> Placement:
    """Plan one training step of every task of a multi-task model: the union of their forward
    graphs (`MultiTask.union_graph`), each task's ops sized by its own batches, each shared
    param held once. The plan's op ids are the union graph's."""
    graph = multi.union_graph()
    segments, first = [], 0
    for name, task in multi.tasks.items():  # union_graph lays the tasks out in this order
        n = len(task.graph.ops)
        segments.append(Segment(name, range(first, first + n), batch_dims(resolved, name)))
        first += n
    assert first == len(graph.ops), "union_graph's op ids are the tasks' in task order"
    largest = {k: max(seg.dims[k] for seg in segments) for k in segments[0].dims}
    return _place(
        graph,
        resolved,
        largest,
        algorithm,
        fuse=fuse,
        keep_activations=keep_activations,
        segments=segments,
    )


def _place(
    graph: Graph,
    resolved: ResolvedExperiment,
    dims: dict[str, int],
    algorithm: str | None,
    *,
    fuse: bool,
    keep_activations: bool,
    segments: Sequence[Segment] = (),
    measured: Mapping[int, float] | None = None,
) -> Placement:
    dist = resolved.config["distribution"]
    asked = dist["placement"]
    span = resolved.span("distribution.placement")
    if algorithm is not None and algorithm not in ALGORITHMS:
        raise UsageError(
            f"unknown placement algorithm `{algorithm}`",
            code="unknown-algorithm",
            expected=", ".join(ALGORITHMS),
            found=algorithm,
        )
    kind = algorithm or asked.kind
    args = dict(asked.args) if algorithm is None or algorithm == asked.kind else {}
    if not dist["devices"]:
        raise UsageError(
            f"`placement = {kind}` needs the devices to place onto; `distribution.devices` is "
            "empty",
            span=span,
            code="no-devices",
            hint='add `devices = 2 x cpu(memory = "8GiB")` (or gpu) to the distribution block',
        )
    problem = problem_from_graph(
        graph,
        dist["devices"],
        comm=dist["comm"],
        optimizer_slots=OptimizerConfig.of(resolved.config["train"]["optimizer"]).slots,
        batch_dims=dims,
        fuse=fuse and kind != "manual",  # fusion may join layers a manual plan splits
        retain_activations=keep_activations,
        segments=segments,
        measured=measured,
    )
    plan = run_placement(problem, kind, args, span)
    check(problem, plan)
    return Placement(problem, plan, span)


def run_placement(
    problem: Problem, kind: str, args: Mapping[str, Any], span: Span | None = None
) -> Plan:
    """Run one placement kind of the catalogue on a problem; the plan's `seconds` is set."""
    t0 = time.perf_counter()
    if kind == "m_topo":
        plan = algorithms.m_topo(problem)
    elif kind == "m_etf":
        plan = algorithms.m_etf(problem)
    elif kind == "m_sct":
        plan = algorithms.m_sct(problem, threshold=float(args.get("threshold", 0.5)))
    elif kind == "single":
        d = int(args.get("device", 0))
        _check_device(d, len(problem.devices), f"`single({d})` names device {d}", span)
        plan = simulate(problem, [d] * len(problem.nodes), algorithm="single")
    elif kind == "manual":
        layers = getattr(problem, "layers", [[] for _ in problem.nodes])
        devices = manual_devices(layers, dict(args.get("layers", {})), len(problem.devices), span)
        plan = simulate(problem, devices, algorithm="manual")
    else:
        raise UsageError(
            f"unknown placement algorithm `{kind}`",
            span=span,
            code="unknown-algorithm",
            expected=", ".join(ALGORITHMS),
            found=kind,
        )
    plan.seconds = time.perf_counter() - t0
    return plan


def _check_device(d: int, n: int, what: str, span: Span | None) -> None:
    if not 0 <= d < n:
        raise UsageError(
            f"{what}; there are {n}",
            span=span,
            code="bad-device",
            expected=f"a device index in 0..{n - 1}",
            found=str(d),
        )


def manual_devices(
    layers: list[Any], prefixes: Mapping[str, int], n: int, span: Span | None = None
) -> list[int]:
    """Device per node from `manual(layers = {prefix: device})`: the longest prefix matching
    the node's first layer path; device 0 when none does."""
    for path, d in prefixes.items():
        _check_device(int(d), n, f"`manual` puts `{path}` on device {d}", span)
    table = {path: int(d) for path, d in prefixes.items()}
    return [_longest(paths[0] if paths else "", table, 0) for paths in layers]


def _longest(layer: str, table: Mapping[str, int], default: int) -> int:
    for prefix in sorted(table, key=len, reverse=True):
        if layer == prefix or layer.startswith(prefix + "."):
            return table[prefix]
    return default


def op_devices(problem: GraphProblem, plan: Plan) -> dict[int, int]:
    """Op id -> device index from a plan over a `GraphProblem` (its nodes map back to ops)."""
    return {op: plan.device[node] for node, ops in enumerate(problem.ops) for op in ops}


def replay(problem: GraphProblem, devices: Mapping[int, int]) -> Plan:
    """A placement of the same graph made over another problem (the same ops under other
    costs: the estimate where `problem` holds measured ones), replayed on `problem`: each node
    on the device that most of its ops had. What that placement's step takes under these
    costs, to set beside the plan made from them."""
    device_of = []
    for ops in problem.ops:
        votes = Counter(devices[op] for op in ops if op in devices)
        device_of.append(votes.most_common(1)[0][0] if votes else 0)
    plan = simulate(problem, device_of, algorithm="replay")
    plan.lower_bound = problem.lower_bound()
    return plan
