"""An independent check of a plan: it shares no bookkeeping with the placers or the simulator,
only the problem model and the memory model below, recomputed from the plan alone.

The memory model (the placers reserve at least this, so the check is the ground truth):
- `persistent` bytes of an op sit on its device for the whole step (weights, gradients and
  optimizer state exist before the step starts and after it ends);
- `temporary` bytes live while the op runs, [start, end);
- `output` bytes live on the op's device from its start until every reader has used them:
  the end of the last reader on that device, or the start of the last reader elsewhere (a sent
  tensor stays on the sender until the receiver starts); an op without readers keeps its output
  until its own end;
- a copy of the output on another device d' lives from the start of the first reader on d'
  to the end of the last reader on d' (one copy per device: the tensor cache);
- intervals are half-open: bytes freed at time t are available to an op starting at t.
"""

from __future__ import annotations

from itertools import pairwise

from seqc.compiler.placement.problem import Plan, Problem


def check(problem: Problem, plan: Plan) -> None:
    """Raise ValueError naming the first violated invariant; return None if the plan is valid."""
    p = problem
    n = len(p.nodes)
    ndev = len(p.devices)
    dev, start, end = plan.device, plan.start, plan.end
    if not (len(dev) == len(start) == len(end) == n):
        raise ValueError(f"placement: the plan covers {len(dev)} ops; the problem has {n}")
    group_dev: dict[int, int] = {}
    for v, node in enumerate(p.nodes):
        d = dev[v]
        if not isinstance(d, int) or not 0 <= d < ndev:
            raise ValueError(f"placement: op {v} ({node.name}) is on device {d!r}")
        if node.group is not None:
            first = group_dev.setdefault(node.group, d)
            if first != d:
                raise ValueError(
                    f"group: op {v} ({node.name}) of group {node.group} is on device {d}, "
                    f"the group's other ops on device {first}"
                )
        if start[v] < 0 or end[v] != start[v] + node.compute_us:
            raise ValueError(
                f"timing: op {v} ({node.name}) runs [{start[v]}, {end[v]}) for a compute "
                f"time of {node.compute_us} us"
            )

    per_dev: list[list[int]] = [[] for _ in range(ndev)]
    for v in range(n):
        per_dev[dev[v]].append(v)
    for d, ops in enumerate(per_dev):
        ops.sort(key=lambda v: (start[v], end[v], v))
        for a, b in pairwise(ops):
            if start[b] < end[a]:
                raise ValueError(
                    f"overlap: on device {d}, op {b} starts at {start[b]} before op {a} "
                    f"ends at {end[a]}"
                )

    for (u, v), nbytes in p.edge_bytes.items():
        need = end[u] if dev[u] == dev[v] else end[u] + p.comm.time_us(nbytes)
        if start[v] < need:
            raise ValueError(
                f"precedence: op {v} starts at {start[v]} but its input from op {u} "
                f"(device {dev[u]} -> {dev[v]}) is there at {need} at the earliest"
            )

    _check_memory(p, plan)

    makespan = max(end, default=0)
    if plan.makespan != makespan:
        raise ValueError(f"makespan: the plan says {plan.makespan}, the ops end at {makespan}")
    if makespan + 1e-9 < p.lower_bound():
        raise ValueError(f"bound: makespan {makespan} is below the lower bound {p.lower_bound()}")


def _check_memory(p: Problem, plan: Plan) -> None:
    dev, start, end = plan.device, plan.start, plan.end
    ndev = len(p.devices)
    static = [0] * ndev
    events: list[list[tuple[int, int, int]]] = [[] for _ in range(ndev)]
    """Per device: (time, +bytes / -bytes, 0 = free first, 1 = allocate)."""

    def live(d: int, a: int, b: int, nbytes: int) -> None:
        if nbytes:
            events[d].append((a, 1, nbytes))
            events[d].append((max(a, b), 0, -nbytes))

    for v, node in enumerate(p.nodes):
        d = dev[v]
        static[d] += node.persistent
        live(d, start[v], end[v], node.temporary)
        readers = p.succ[v]
        if not readers:
            live(d, start[v], end[v], node.output)
            continue
        own_until = end[v]
        copies: dict[int, list[int]] = {}
        for w in readers:
            if dev[w] == d:
                own_until = max(own_until, end[w])
            else:
                own_until = max(own_until, start[w])
                span = copies.setdefault(dev[w], [start[w], end[w]])
                span[0] = min(span[0], start[w])
                span[1] = max(span[1], end[w])
        live(d, start[v], own_until, node.output)
        for d2, (a, b) in copies.items():
            live(d2, a, b, node.output)

    for d, device in enumerate(p.devices):
        peak = used = static[d]
        when = 0
        for t, _, delta in sorted(events[d]):
            used += delta
            if used > peak:
                peak, when = used, t
        if peak > device.memory:
            raise ValueError(
                f"memory: device {d} ({device.name}) holds {peak} bytes at t={when} us; "
                f"its limit is {device.memory}"
            )
