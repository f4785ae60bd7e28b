"""Baechi's memory-aware placers: m-TOPO, m-ETF and m-SCT (`../shared/research/baechi.md` §3).

All three are deterministic: ties go to (time, topological rank, device id). Each returns a
`Plan` whose schedule obeys the memory model of `checker.py` (persistent bytes for the whole
step, temporary bytes while an op runs, an output until its readers have used it, one copy per
reading device); a placement that cannot satisfy it raises `PlacementError`.

How the dynamic placers keep to that model without look-ahead: decisions are made in time order
and an op always starts at the current event time, so every allocation happens "now" and the
future only frees. A device admits an op when
    persistent on it + the op's group's persistent (once, when the group is pinned)
    + max(past peak of live bytes, live bytes now + the op's temporary + output + new copies)
is within its memory; the past peak is there because persistent bytes count for the whole step.
m-TOPO counts every byte for the whole step, an upper bound of the same model.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass

import numpy as np

from seqc.compiler.placement.problem import Node, Plan, Problem
from seqc.compiler.placement.simulate import Transfers, simulate
from seqc.spec.errors import CheckError


@dataclass
class PlacementError(CheckError):
    """No placement fits the devices' memory (or the placer got stuck)."""

    code: str = "placement-infeasible"


def _where(node: Node) -> str:
    name = node.layer or node.name
    return f"op `{node.name}` of layer `{name}`" + (f" at {node.where}" if node.where else "")


def _fail(node: Node, why: str, need: int, avail: int, hint: str | None = None) -> PlacementError:
    return PlacementError(
        message=f"{_where(node)}: {why}",
        path=node.where or None,
        expected=f"at most {avail} bytes available",
        found=f"{need} bytes needed",
        hint=hint or "add devices, raise their memory, or shrink the batch",
    )


def _groups(p: Problem) -> tuple[list[int], dict[int, list[int]]]:
    """Each op's group key (its own id negated when it has none) and the members per key."""
    key = [node.group if node.group is not None else -1 - node.id for node in p.nodes]
    members: dict[int, list[int]] = {}
    for v, k in enumerate(key):
        members.setdefault(k, []).append(v)
    return key, members


def precheck(p: Problem) -> None:
    """Infeasibility that no algorithm can escape: an op (with its group's persistent bytes and
    its inputs) larger than every device, or more persistent bytes than all devices hold."""
    if not p.devices:
        raise PlacementError(message="no devices to place on", code="placement-infeasible")
    key, members = _groups(p)
    gpers = {k: sum(p.nodes[v].persistent for v in vs) for k, vs in members.items()}
    biggest = max(d.memory for d in p.devices)
    for v, node in enumerate(p.nodes):
        need = (
            gpers[key[v]] + node.temporary + node.output + sum(p.nodes[u].output for u in p.pred[v])
        )
        if need > biggest:
            raise _fail(node, "does not fit on any device", need, biggest)
    total = sum(gpers.values())
    cap = sum(d.memory for d in p.devices)
    if total > cap and p.nodes:
        big = max(range(len(p.nodes)), key=lambda v: (p.nodes[v].persistent, -v))
        raise _fail(
            p.nodes[big],
            "the persistent bytes of all ops exceed the devices' total memory "
            "(this op holds the most)",
            total,
            cap,
        )


# ----------------------------------------------------------------------------------- m-TOPO


def m_topo(problem: Problem) -> Plan:
    """Cut the topological order into consecutive chunks of about equal memory, one per device
    (Baechi's "uniform" m-TOPO), with each device's cap lowered to its memory and the last
    device taking what is left up to its memory. The bytes counted
    per device (every op's persistent + temporary + output, plus one copy of every remote input)
    bound the dynamic peak from above, so any schedule of the placement fits."""
    t0 = time.perf_counter()
    p = problem
    precheck(p)
    order = p.topo_order()
    key, members = _groups(p)
    mem = [n.persistent + n.temporary + n.output for n in p.nodes]
    ndev = len(p.devices)
    cap = sum(mem) // ndev + max(mem, default=0)
    caps = [min(cap, d.memory) for d in p.devices]
    # The uniform cap balances; it is no limit: the last device takes the rest up to its memory.
    caps[-1] = p.devices[-1].memory
    device = [-1] * len(p.nodes)
    used = [0] * ndev
    copied: set[tuple[int, int]] = set()
    d = 0
    for v in order:
        if device[v] >= 0:
            continue
        grp = members[key[v]]
        while True:
            extra = sum(mem[w] for w in grp)
            new_copies = {
                (u, d)
                for w in grp
                for u in p.pred[w]
                if device[u] not in (-1, d) and (u, d) not in copied
            }
            extra += sum(p.nodes[u].output for u, _ in new_copies)
            if used[d] + extra <= caps[d]:
                break
            if d + 1 >= ndev:
                raise _fail(
                    p.nodes[v],
                    f"m-TOPO ran out of devices: device {d} has {caps[d] - used[d]} of its cap "
                    f"{caps[d]} left",
                    extra,
                    caps[d] - used[d],
                    hint="try m-ETF or m-SCT, which reuse freed memory",
                )
            d += 1
        used[d] += extra
        copied |= new_copies
        for w in grp:
            device[w] = d
        # A group member may feed an op placed earlier on another device: charge that copy.
        for w in grp:
            for x in p.succ[w]:
                d2 = device[x]
                if d2 not in (-1, d) and (w, d2) not in copied:
                    copied.add((w, d2))
                    used[d2] += p.nodes[w].output
                    if used[d2] > p.devices[d2].memory:
                        raise _fail(
                            p.nodes[w],
                            f"m-TOPO: the copy of this op's output overflows device {d2}",
                            used[d2],
                            p.devices[d2].memory,
                            hint="try m-ETF or m-SCT",
                        )
    plan = simulate(p, device, algorithm="m-topo")
    plan.seconds = time.perf_counter() - t0
    return plan


# ----------------------------------------------------------------------------------- m-ETF


class _Scheduler:
    """Event-driven ETF (Hwang et al. 1989) with Baechi's memory filter and, given favourite
    children, Hanen–Munier's AWAIT rule (m-SCT).

    An op enters the ready pool when its last producer is scheduled, with one entry per device
    it may go to. Per device, heap A holds entries keyed by data-ready time and heap B, keyed by
    topological rank, those whose data is there by the time the device is free; so at each event
    time the free devices propose B's top and the global pick is (rank, device). Entries go stale
    when a group is pinned elsewhere or (sequential comm) a channel moves; they are re-validated
    lazily when they reach a heap's top.
    """

    def __init__(self, p: Problem, favorite: list[int] | None, name: str) -> None:
        precheck(p)
        self.p = p
        self.name = name
        self.fav = favorite
        n, ndev = len(p.nodes), len(p.devices)
        self.rank = [0] * n
        for i, v in enumerate(p.topo_order()):
            self.rank[v] = i
        self.key, members = _groups(p)
        self.gpers = {k: sum(p.nodes[v].persistent for v in vs) for k, vs in members.items()}
        self.pin: dict[int, int] = {}
        self.device = [-1] * n
        self.start = [0] * n
        self.end = [0] * n
        self.free = [0] * ndev
        self.last = [-1] * ndev
        self.A: list[list[tuple[int, int, int]]] = [[] for _ in range(ndev)]
        self.B: list[list[tuple[int, int]]] = [[] for _ in range(ndev)]
        self.blocked: list[list[int]] = [[] for _ in range(ndev)]
        self.xfer = Transfers(p)
        self.missing = [len(ps) for ps in p.pred]
        self.readers_left = [len(s) for s in p.succ]
        self.own_until = [0] * n
        self.copy: dict[tuple[int, int], int] = {}
        """(producer, device) -> end of its last reader there (a live copy)."""
        self.copies_of: list[list[int]] = [[] for _ in range(n)]
        self.static = [0] * ndev
        self.dyn = [0] * ndev
        self.dyn_peak = [0] * ndev
        self.frees: list[tuple[int, int, int]] = []
        self.t = 0

    # -- readiness
    def allowed(self, v: int) -> range | tuple[int]:
        d = self.pin.get(self.key[v])
        return range(len(self.p.devices)) if d is None else (d,)

    def dr(self, v: int, d: int) -> int:
        return self.xfer.data_ready(v, d, self.device, self.end)

    def make_ready(self, v: int) -> None:
        for d in self.allowed(v):
            heapq.heappush(self.A[d], (self.dr(v, d), self.rank[v], v))

    def valid(self, v: int, d: int) -> bool:
        return self.device[v] < 0 and self.pin.get(self.key[v], d) == d

    def refresh(self, d: int) -> None:
        """Move entries whose data is on d by the time d is free from A to B; drop stale ones."""
        h = max(self.free[d], self.t)
        a, b = self.A[d], self.B[d]
        while a:
            ready, r, v = a[0]
            if not self.valid(v, d):
                heapq.heappop(a)
                continue
            if self.xfer.sequential:
                now = self.dr(v, d)
                if now != ready:
                    heapq.heapreplace(a, (now, r, v))
                    continue
            if ready > h:
                break
            heapq.heappop(a)
            heapq.heappush(b, (r, v))
        while b and not self.valid(b[0][1], d):
            heapq.heappop(b)

    def est(self, v: int, d: int) -> int:
        return max(self.free[d], self.dr(v, d), self.t)

    # -- memory
    def need(self, v: int, d: int) -> tuple[int, int]:
        """(new static bytes, new dynamic bytes) of starting v on d now."""
        node = self.p.nodes[v]
        k = self.key[v]
        new_static = self.gpers[k] if k not in self.pin else 0
        new_dyn = node.temporary + node.output
        for u in self.p.pred[v]:
            if self.device[u] != d and (u, d) not in self.copy:
                new_dyn += self.p.nodes[u].output
        return new_static, new_dyn

    def fits(self, v: int, d: int) -> bool:
        s, dy = self.need(v, d)
        peak = max(self.dyn_peak[d], self.dyn[d] + dy)
        return self.static[d] + s + peak <= self.p.devices[d].memory

    def release(self, t: int, d: int, nbytes: int) -> None:
        if nbytes:
            heapq.heappush(self.frees, (t, d, nbytes))

    # -- commit
    def run(self, v: int, d: int) -> None:
        p, t = self.p, self.t
        node = p.nodes[v]
        self.xfer.data_ready(v, d, self.device, self.end, commit=True)
        s, dy = self.need(v, d)
        self.static[d] += s
        self.dyn[d] += dy
        self.dyn_peak[d] = max(self.dyn_peak[d], self.dyn[d])
        k = self.key[v]
        if k not in self.pin:
            self.pin[k] = d
        self.device[v] = d
        self.start[v] = t
        self.end[v] = e = t + node.compute_us
        self.free[d] = e
        self.last[d] = v
        self.release(e, d, node.temporary)
        self.own_until[v] = e
        if not p.succ[v]:
            self.release(e, d, node.output)
        for u in p.pred[v]:
            if self.device[u] == d:
                self.own_until[u] = max(self.own_until[u], e)
            else:
                self.own_until[u] = max(self.own_until[u], t)
                if (u, d) not in self.copy:
                    self.copies_of[u].append(d)
                self.copy[(u, d)] = max(self.copy.get((u, d), 0), e)
            self.readers_left[u] -= 1
            if self.readers_left[u] == 0:
                out = p.nodes[u].output
                self.release(self.own_until[u], self.device[u], out)
                for d2 in self.copies_of[u]:
                    self.release(self.copy[(u, d2)], d2, out)
        for w in p.succ[v]:
            self.missing[w] -= 1
            if self.missing[w] == 0:
                self.make_ready(w)

    # -- m-SCT's AWAIT
    def awaited(self, d: int) -> int:
        """The favourite child device d waits for, or -1."""
        if self.fav is None or self.last[d] < 0:
            return -1
        f = self.fav[self.last[d]]
        if f < 0 or self.device[f] >= 0 or self.missing[f] or d not in self.allowed(f):
            return -1
        mine = self.est(f, d)
        if any(self.est(f, d2) < mine for d2 in self.allowed(f)):
            return -1
        if not self.fits(f, d):
            return -1
        return f

    def urgent(self, v: int) -> int:
        return max(self.est(v, d2) for d2 in self.allowed(v))

    def await_pick(self, d: int, f: int) -> tuple[int, int | None]:
        """(next time d may act, op it runs now or None) while d awaits f."""
        if self.est(f, d) <= self.t:
            return self.t, f
        best = None
        soonest = self.est(f, d)
        # An op that may go to a busy device is not urgent yet; the busy device's free time is
        # an event anyway, so it is looked at again then.
        busy = any(free > self.t for free in self.free)
        for v in {v for _, v in self.B[d]} | {v for _, _, v in self.A[d]}:
            if not self.valid(v, d) or v == f:
                continue
            if self.key[v] in self.pin:
                u = self.est(v, d)
            elif busy:
                continue
            else:
                u = self.urgent(v)
            soonest = min(soonest, u)
            if u <= self.t and self.fits(v, d):
                cand = (self.rank[v], v)
                best = cand if best is None or cand < best else best
        return soonest, None if best is None else best[1]

    # -- main loop
    def schedule(self) -> Plan:
        t0 = time.perf_counter()
        p = self.p
        n, ndev = len(p.nodes), len(p.devices)
        for v in range(n):
            if self.missing[v] == 0:
                self.make_ready(v)
        done = 0
        while done < n:
            progressed = True
            while progressed:
                progressed = False
                self._free_until_now()
                best = None
                for d in range(ndev):
                    if self.free[d] > self.t:
                        continue
                    f = self.awaited(d)
                    if f >= 0:
                        _, v = self.await_pick(d, f)
                        if v is not None and (best is None or (self.rank[v], d) < best[:2]):
                            best = (self.rank[v], d, v, True)
                        continue
                    self.refresh(d)
                    while self.B[d]:
                        r, v = self.B[d][0]
                        if not self.valid(v, d):
                            heapq.heappop(self.B[d])
                            continue
                        if self.xfer.sequential and self.dr(v, d) > self.t:
                            heapq.heappop(self.B[d])
                            heapq.heappush(self.A[d], (self.dr(v, d), r, v))
                            continue
                        if not self.fits(v, d):
                            heapq.heappop(self.B[d])
                            self.blocked[d].append(v)
                            continue
                        if best is None or (r, d) < best[:2]:
                            best = (r, d, v, False)
                        break
                if best is not None:
                    _, d, v, _ = best
                    self.run(v, d)
                    done += 1
                    progressed = True
            if done == n:
                break
            nxt = self._next_time(ndev)
            if nxt is None:
                self._stuck()
            self.t = nxt
        return Plan(
            algorithm=self.name,
            device=self.device,
            start=self.start,
            end=self.end,
            makespan=max(self.end, default=0),
            lower_bound=p.lower_bound(),
            seconds=time.perf_counter() - t0,
        )

    def _free_until_now(self) -> None:
        """Apply the frees due by now (a sent tensor leaves its sender when the reader starts,
        which can be now) and give the ops blocked on those devices another try."""
        touched = set()
        while self.frees and self.frees[0][0] <= self.t:
            _, d, nbytes = heapq.heappop(self.frees)
            self.dyn[d] -= nbytes
            touched.add(d)
        for d in sorted(touched):
            for v in self.blocked[d]:
                if self.valid(v, d):
                    heapq.heappush(self.A[d], (self.dr(v, d), self.rank[v], v))
            self.blocked[d].clear()

    def _next_time(self, ndev: int) -> int | None:
        cands = []
        if self.frees:
            cands.append(self.frees[0][0])
        for d in range(ndev):
            if self.free[d] > self.t:
                cands.append(self.free[d])
                continue
            f = self.awaited(d)
            if f >= 0:
                soon, _ = self.await_pick(d, f)
                cands.append(soon)
                continue
            self.refresh(d)
            if self.B[d]:
                cands.append(max(self.free[d], self.t))
            elif self.A[d]:
                cands.append(self.A[d][0][0])
        later = [c for c in cands if c > self.t]
        if later:
            return min(later)
        return None

    def _stuck(self) -> None:
        waiting = sorted(
            {(self.rank[v], v) for d in range(len(self.p.devices)) for v in self.blocked[d]}
        )
        if not waiting:
            raise RuntimeError(f"{self.name}: no op is ready and none is blocked (a bug)")
        v = waiting[0][1]

        def held(d: int) -> int:
            new_static, new_dyn = self.need(v, d)
            peak = max(self.dyn_peak[d], self.dyn[d] + new_dyn)
            return self.static[d] + new_static + peak

        d = min(self.allowed(v), key=lambda d: (held(d) - self.p.devices[d].memory, d))
        raise _fail(
            self.p.nodes[v],
            f"{self.name} is stuck at t={self.t} us: no device has room for this op while the "
            f"tensors already placed are live; on device {d} ({self.p.devices[d].name}) it "
            f"would bring the persistent bytes plus the peak of live bytes to {held(d)}",
            held(d),
            self.p.devices[d].memory,
            hint="memory is too tight for a greedy placer; add devices or memory",
        )


def m_etf(problem: Problem) -> Plan:
    """Earliest task first with a memory filter (Baechi m-ETF): at each event the free devices
    take the ready op that can start earliest, ties to topological rank then device id."""
    t0 = time.perf_counter()
    plan = _Scheduler(problem, None, "m-etf").schedule()
    plan.seconds = time.perf_counter() - t0
    return plan


# ----------------------------------------------------------------------------------- m-SCT


IPM_ABOVE = 2000
"""Edges above which the favourite-child LP is solved by HiGHS's interior-point method: on a
10k-op layered DAG the dual simplex took about 100 s and the interior point 8 s, and the m-SCT
makespans differed by 0.2% (3k ops: 4.067 vs 4.075 of the lower bound). The LP is degenerate,
so the two land on different optima; either is a valid relaxation to round."""


def favorite_children(
    problem: Problem, threshold: float = 0.5, time_limit: float | None = None
) -> list[int]:
    """Each op's favourite child (or -1) from Hanen–Munier's LP relaxation, rounded at
    `threshold` (x_e <= threshold: the edge is kept local) and resolved as a matching: each op
    has at most one favourite child and is the favourite of at most one parent, preferring the
    most confidently local edges, then the costliest, then topological rank.

    When HiGHS does not finish (or `time_limit` seconds pass), falls back to Baechi's heuristic:
    the child with the largest comm time."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    p = problem
    n = len(p.nodes)
    edges = list(p.edge_bytes.items())
    m = len(edges)
    comm = [p.comm.time_us(b) for _, b in edges]
    rank = [0] * n
    for i, v in enumerate(p.topo_order()):
        rank[v] = i
    x = None
    if m:
        rows, cols, vals, rhs = [], [], [], []
        r = 0
        out_e: list[list[int]] = [[] for _ in range(n)]
        in_e: list[list[int]] = [[] for _ in range(n)]
        for k, ((i, j), _) in enumerate(edges):
            rows += [r, r, r]
            cols += [m + i, m + j, k]
            vals += [1.0, -1.0, float(comm[k])]
            rhs.append(-float(p.nodes[i].compute_us))
            r += 1
            out_e[i].append(k)
            in_e[j].append(k)
        for lists in (out_e, in_e):
            for ks in lists:
                if len(ks) >= 2:
                    rows += [r] * len(ks)
                    cols += ks
                    vals += [-1.0] * len(ks)
                    rhs.append(1.0 - len(ks))
                    r += 1
        for v in range(n):
            if not p.succ[v]:
                rows += [r, r]
                cols += [m + v, m + n]
                vals += [1.0, -1.0]
                rhs.append(-float(p.nodes[v].compute_us))
                r += 1
        a_ub = coo_matrix((vals, (rows, cols)), shape=(r, m + n + 1)).tocsr()
        cost = np.zeros(m + n + 1)
        cost[-1] = 1.0
        bounds = [(0.0, 1.0)] * m + [(0.0, None)] * (n + 1)
        options = {"time_limit": time_limit} if time_limit else {}
        res = linprog(
            cost,
            A_ub=a_ub,
            b_ub=np.array(rhs),
            bounds=bounds,
            method="highs" if m <= IPM_ABOVE else "highs-ipm",
            options=options,
        )
        if res.status == 0:
            x = res.x[:m]
    fav = [-1] * n
    parent = [-1] * n
    if x is not None:
        cand = [
            (float(x[k]), -comm[k], rank[i], rank[j], i, j)
            for k, ((i, j), _) in enumerate(edges)
            if x[k] <= threshold + 1e-9
        ]
    else:
        cand = [(0.0, -comm[k], rank[i], rank[j], i, j) for k, ((i, j), _) in enumerate(edges)]
    for *_, i, j in sorted(cand):
        if fav[i] < 0 and parent[j] < 0:
            fav[i], parent[j] = j, i
    return fav


def m_sct(problem: Problem, threshold: float = 0.5, time_limit: float | None = None) -> Plan:
    """Shortest communication time (Baechi m-SCT): favourite children from the LP, then m-ETF
    in which a device that just ran an op waits for that op's favourite child when it can run
    it first, unless an urgent op (one that can start now on every device) is ready."""
    t0 = time.perf_counter()
    precheck(problem)
    fav = favorite_children(problem, threshold, time_limit)
    plan = _Scheduler(problem, fav, "m-sct").schedule()
    plan.seconds = time.perf_counter() - t0
    return plan
