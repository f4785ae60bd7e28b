"""Replay a placement on the problem's devices and comm law: the step time a placement gets.

The same transfer rules serve the placers (`algorithms.py`) and this simulator, so a placer's own
schedule and a replay of its placement agree on what a transfer costs:

- a transfer is paid only between different devices, `comm.time_us(edge bytes)`;
- the tensor cache: a producer's output goes to a device once; a later reader there of no more
  bytes reuses the copy (a reader of more bytes triggers a new transfer of its bytes);
- `parallel`: arrival = end of producer + comm time, transfers never contend;
- `sequential`: each device has one channel for sends and receives,
  send = max(end_u, chan[src]); recv = max(send, chan[dst]); arrival = recv + c;
  then chan[src] = send + c and chan[dst] = arrival. A reader's remote inputs are sent in
  (producer end, producer id) order.
"""

from __future__ import annotations

import heapq
import time

from seqc.compiler.placement.problem import Plan, Problem


class Transfers:
    """Channel clocks and the per-destination tensor cache of one schedule."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.sequential = problem.comm.model == "sequential"
        self.chan = [0] * len(problem.devices)
        self.cache: dict[tuple[int, int], tuple[int, int]] = {}
        """(producer, device) -> (bytes sent, arrival)."""

    def data_ready(
        self, v: int, d: int, device: list[int], end: list[int], commit: bool = False
    ) -> int:
        """When all of v's inputs are on device d (v's producers are all scheduled). With
        `commit`, the transfers are booked on the channels and in the cache."""
        p = self.problem
        ready = 0
        remote = []
        for u in p.pred[v]:
            if device[u] == d:
                ready = max(ready, end[u])
            else:
                remote.append((end[u], u))
        if not remote:
            return ready
        comm = p.comm
        if not self.sequential:
            for e, u in remote:
                ready = max(ready, e + comm.time_us(p.edge_bytes[(u, v)]))
            return ready
        chan = self.chan if commit else None
        local: dict[int, int] = {}
        remote.sort()
        for e, u in remote:
            nbytes = p.edge_bytes[(u, v)]
            hit = self.cache.get((u, d))
            if hit is not None and hit[0] >= nbytes:
                ready = max(ready, hit[1])
                continue
            src = device[u]
            c = comm.time_us(nbytes)
            if chan is not None:
                send = max(e, chan[src])
                recv = max(send, chan[d])
                chan[src] = send + c
                chan[d] = recv + c
                self.cache[(u, d)] = (nbytes, recv + c)
            else:
                send = max(e, local.get(src, self.chan[src]))
                recv = max(send, local.get(d, self.chan[d]))
                local[src] = send + c
                local[d] = recv + c
            ready = max(ready, recv + c)
        return ready


def simulate(
    problem: Problem,
    device_of: list[int],
    order: list[int] | None = None,
    algorithm: str = "simulate",
) -> Plan:
    """Event-driven replay of a placement. Ops on a device run one at a time, in `order` (a
    global op order; each device takes its ops in that order) or, without it, in (ready time,
    topological rank) order like TF's VirtualScheduler. Memory is not enforced here: `check`
    replays it."""
    t0 = time.perf_counter()
    p = problem
    n = len(p.nodes)
    if len(device_of) != n:
        raise ValueError(f"placement has {len(device_of)} devices for {n} ops")
    ndev = len(p.devices)
    for v, d in enumerate(device_of):
        if not 0 <= d < ndev:
            raise ValueError(f"op {v} ({p.nodes[v].name}) is on device {d}; there are {ndev}")
    rank = [0] * n
    for i, v in enumerate(p.topo_order()):
        rank[v] = i
    queues: list[list[int]] | None = None
    head = [0] * ndev
    if order is not None:
        if sorted(order) != list(range(n)):
            raise ValueError("order must list every op exactly once")
        queues = [[] for _ in range(ndev)]
        for v in order:
            queues[device_of[v]].append(v)
    xfer = Transfers(p)
    start = [0] * n
    end = [0] * n
    free = [0] * ndev
    missing = [len(ps) for ps in p.pred]
    heap: list[tuple[int, int, int]] = [(0, rank[v], v) for v in range(n) if missing[v] == 0]
    heapq.heapify(heap)
    parked: dict[int, tuple[int, int, int]] = {}
    done = 0
    while heap:
        ready, r, v = heapq.heappop(heap)
        d = device_of[v]
        if queues is not None and queues[d][head[d]] != v:
            parked[v] = (ready, r, v)
            continue
        s = max(free[d], ready)
        start[v] = s
        end[v] = free[d] = s + p.nodes[v].compute_us
        done += 1
        if queues is not None:
            head[d] += 1
            if head[d] < len(queues[d]) and queues[d][head[d]] in parked:
                heapq.heappush(heap, parked.pop(queues[d][head[d]]))
        for w in p.succ[v]:
            missing[w] -= 1
            if missing[w] == 0:
                dr = xfer.data_ready(w, device_of[w], device_of, end, commit=True)
                heapq.heappush(heap, (dr, rank[w], w))
    if done != n:
        raise ValueError("the given order deadlocks: a device waits on an op ordered after it")
    return Plan(
        algorithm=algorithm,
        device=list(device_of),
        start=start,
        end=end,
        makespan=max(end, default=0),
        lower_bound=p.lower_bound(),
        seconds=time.perf_counter() - t0,
    )
