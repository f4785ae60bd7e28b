"""The placement problem: a DAG of ops with times and memory, devices with memory limits, and a
communication law. Every placer, the simulator and the checker read this one model.

Why integer microseconds: event-driven schedulers compare times for equality and order (a
device frees at t, an op becomes ready at t); float sums drift and break ties differently run
to run (Baechi's "Timestamp should move forward"). Bytes are integers too.

Terms follow `../shared/research/baechi.md`: `persistent` bytes are never freed (params,
gradients, optimizer state of the op), `temporary` bytes live while the op runs, `output` bytes
live until the op's last consumer has run. A `group` pins ops to one device (a backward op with
its forward op, a fused chain).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

CommModel = Literal["sequential", "parallel"]

UNLIMITED = 1 << 62
"""Memory of a device without a limit (an int, so sums and comparisons stay exact)."""


@dataclass(frozen=True)
class Device:
    name: str
    memory: int = UNLIMITED
    """Bytes available to the model."""


@dataclass(frozen=True)
class Node:
    id: int
    name: str
    compute_us: int
    persistent: int = 0
    temporary: int = 0
    output: int = 0
    group: int | None = None
    layer: str = ""
    """The seqc layer path the op came from (`blocks.3.attn`), for reports and errors."""
    where: str = ""
    """`file:line:col` of the user's line, for errors."""


@dataclass(frozen=True)
class Edge:
    src: int
    dst: int
    bytes: int


@dataclass(frozen=True)
class Comm:
    """Transfer time = latency + bytes / bandwidth, paid only between different devices; a
    tensor goes once per destination device. `sequential`: each device has one channel for
    sends and receives; `parallel`: transfers never contend."""

    model: CommModel = "sequential"
    latency_us: float = 134.0
    bytes_per_us: float = 5701.0  # about 5.7 GB/s: Baechi's GPU0 -> GPU1 fit

    def time_us(self, nbytes: int) -> int:
        if nbytes <= 0:
            return 0
        return math.ceil(self.latency_us + nbytes / self.bytes_per_us)


@dataclass
class Problem:
    nodes: list[Node]
    edges: list[Edge]
    devices: list[Device]
    comm: Comm = field(default_factory=Comm)

    def __post_init__(self) -> None:
        n = len(self.nodes)
        for i, node in enumerate(self.nodes):
            if node.id != i:
                raise ValueError(f"node ids must be 0..{n - 1} in order; node {i} has {node.id}")
        self.succ: list[list[int]] = [[] for _ in range(n)]
        self.pred: list[list[int]] = [[] for _ in range(n)]
        self.edge_bytes: dict[tuple[int, int], int] = {}
        for e in self.edges:
            key = (e.src, e.dst)
            if key not in self.edge_bytes:
                self.succ[e.src].append(e.dst)
                self.pred[e.dst].append(e.src)
            self.edge_bytes[key] = self.edge_bytes.get(key, 0) + e.bytes

    def topo_order(self) -> list[int]:
        """Kahn's order, FIFO by node id: also the global tie-breaker of every algorithm."""
        indeg = [len(p) for p in self.pred]
        queue = deque(i for i, d in enumerate(indeg) if d == 0)
        order = []
        while queue:
            v = queue.popleft()
            order.append(v)
            for w in self.succ[v]:
                indeg[w] -= 1
                if indeg[w] == 0:
                    queue.append(w)
        if len(order) != len(self.nodes):
            raise ValueError("the op graph has a cycle")
        return order

    def total_work(self) -> int:
        return sum(n.compute_us for n in self.nodes)

    def critical_path(self) -> int:
        """The longest path by compute time alone (no communication)."""
        finish = [0] * len(self.nodes)
        for v in self.topo_order():
            start = max((finish[u] for u in self.pred[v]), default=0)
            finish[v] = start + self.nodes[v].compute_us
        return max(finish, default=0)

    def lower_bound(self) -> float:
        """max(critical path, total work / devices): no placement can beat it."""
        return max(float(self.critical_path()), self.total_work() / max(len(self.devices), 1))


@dataclass
class Plan:
    """A placement and the schedule the placer (or the simulator) found for it."""

    algorithm: str
    device: list[int]
    """Device index per node."""
    start: list[int]
    end: list[int]
    makespan: int
    lower_bound: float
    seconds: float = 0.0
    """Wall time the placer took."""
