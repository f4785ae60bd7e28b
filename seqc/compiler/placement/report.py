"""What a placement looks like to a person: a text summary, a JSON file, a Gantt chart.

Memory over time follows the checker's model (`checker.py`): persistent bytes for the whole
step, temporary bytes while an op runs, an output until its last reader has used it, one copy
per receiving device. The figures here are for reading; `check` is the judge. A multi-task
model's plan also says where each task's ops run and where each share's params are held
(`tasks_summary`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqc.compiler.graph import DTYPE_BYTES
from seqc.compiler.placement.problem import UNLIMITED, Plan, Problem

if TYPE_CHECKING:
    from seqc.compiler.multitask import MultiTask

JSON_VERSION = 1
"""Bumped when a field of `plan_json` changes meaning or goes away; new fields do not bump it."""


def memory_timeline(problem: Problem, plan: Plan) -> list[list[tuple[int, int]]]:
    """Per device: (time µs, bytes in use from then on), starting at (0, persistent bytes)."""
    p = problem
    ndev = len(p.devices)
    static = [0] * ndev
    events: list[list[tuple[int, int]]] = [[] for _ in range(ndev)]
    dev, start, end = plan.device, plan.start, plan.end

    def live(d: int, a: int, b: int, nbytes: int) -> None:
        if nbytes:
            events[d].append((a, nbytes))
            events[d].append((max(a, b), -nbytes))

    for v, node in enumerate(p.nodes):
        d = dev[v]
        static[d] += node.persistent
        live(d, start[v], end[v], node.temporary)
        own_until = end[v]
        copies: dict[int, list[int]] = {}
        for w in p.succ[v]:
            if dev[w] == d:
                own_until = max(own_until, end[w])
            else:
                own_until = max(own_until, start[w])
                span = copies.setdefault(dev[w], [start[w], end[w]])
                span[0], span[1] = min(span[0], start[w]), max(span[1], end[w])
        live(d, start[v], own_until, node.output)
        for d2, (a, b) in copies.items():
            live(d2, a, b, node.output)
    out = []
    for d in range(ndev):
        used = static[d]
        steps = [(0, used)]
        for t, delta in sorted(events[d], key=lambda e: (e[0], e[1])):  # frees first at a tie
            used += delta
            if steps[-1][0] == t:
                steps[-1] = (t, used)
            else:
                steps.append((t, used))
        out.append(steps)
    return out


def device_stats(problem: Problem, plan: Plan) -> list[dict[str, Any]]:
    """Per device: ops, busy µs, peak bytes, memory limit (None when unlimited)."""
    timeline = memory_timeline(problem, plan)
    stats = []
    for d, device in enumerate(problem.devices):
        mine = [v for v in range(len(problem.nodes)) if plan.device[v] == d]
        stats.append(
            {
                "device": d,
                "name": device.name,
                "ops": len(mine),
                "busy_us": sum(problem.nodes[v].compute_us for v in mine),
                "peak_bytes": max(b for _, b in timeline[d]),
                "memory": None if device.memory >= UNLIMITED else device.memory,
            }
        )
    return stats


def cut_bytes(problem: Problem, plan: Plan) -> int:
    """Bytes on edges whose ends are on different devices."""
    return sum(b for (u, v), b in problem.edge_bytes.items() if plan.device[u] != plan.device[v])


def summary(problem: Problem, plan: Plan) -> str:
    """A fixed-width table per device, then the makespan against the lower bound."""
    lb = plan.lower_bound or problem.lower_bound()
    rows = [f"{'device':<12} {'ops':>6} {'busy ms':>10} {'util':>6} {'peak mem':>12} {'limit':>12}"]
    for s in device_stats(problem, plan):
        util = s["busy_us"] / plan.makespan if plan.makespan else 0.0
        limit = "unlimited" if s["memory"] is None else _size(s["memory"])
        rows.append(
            f"{s['name']:<12} {s['ops']:>6} {s['busy_us'] / 1e3:>10.2f} {util:>6.0%} "
            f"{_size(s['peak_bytes']):>12} {limit:>12}"
        )
    rows.append(
        f"{plan.algorithm}: makespan {plan.makespan / 1e3:.2f} ms, lower bound {lb / 1e3:.2f} ms "
        f"(x{plan.makespan / lb if lb else 0:.2f}; critical path "
        f"{problem.critical_path() / 1e3:.2f} ms, work/devices "
        f"{problem.total_work() / max(len(problem.devices), 1) / 1e3:.2f} ms)"
    )
    rows.append(
        f"{len(problem.nodes)} nodes, {len(problem.edge_bytes)} edges, "
        f"{_size(cut_bytes(problem, plan))} cross devices; placed in {plan.seconds:.3f} s"
    )
    return "\n".join(rows)


def tasks_summary(problem: Problem, plan: Plan, multi: MultiTask) -> str:
    """For the plan of a multi-task model (`place_multitask`): each task's graph ops per device
    (leaves included), each share's params and the devices that hold them (once, at their first
    reader), and the model's params against what the tasks alone would hold."""
    segments = getattr(problem, "segments", [])
    held: dict[str, int] = getattr(problem, "params", {})
    devices = [d.name for d in problem.devices]
    device_of = {
        op: plan.device[v] for v, ops in enumerate(getattr(problem, "ops", [])) for op in ops
    }
    nbytes = {n: p.size * DTYPE_BYTES[p.type.dtype] for n, p in multi.params.items() if n in held}
    width = max([5, *(len(seg.task) for seg in segments), *(len(s) for s in multi.shares)])
    rows = [f"{'task':<{width}} {'ops':>6}" + "".join(f" {d:>12}" for d in devices)]
    for seg in segments:
        per = [0] * len(devices)
        for op in seg.ops:
            per[device_of[op]] += 1
        rows.append(f"{seg.task:<{width}} {len(seg.ops):>6}" + "".join(f" {n:>12}" for n in per))
    if multi.shares:
        rows.append(f"{'share':<{width}} {'tensors':>7} {'bytes':>12}  {'tasks':<16} held on")
        for share, uses in multi.shares.items():
            mine = [n for n in nbytes if n == share or n.startswith(share + ".")]
            on = sorted({plan.device[held[n]] for n in mine})
            tasks = ", ".join(u.split(".", 1)[0] for u in uses)
            rows.append(
                f"{share:<{width}} {len(mine):>7} {_size(sum(nbytes[n] for n in mine)):>12}  "
                f"{tasks:<16} {', '.join(devices[d] for d in on) or '-'}"
            )
    owners = multi.owners()
    alone = [(n, len(owners[n])) for n in nbytes]
    rows.append(
        f"params: {len(nbytes)} tensors ({_size(sum(nbytes.values()))}), each held once; the "
        f"tasks alone would hold {sum(k for _, k in alone)} "
        f"({_size(sum(nbytes[n] * k for n, k in alone))})"
    )
    return "\n".join(rows)


def plan_json(problem: Problem, plan: Plan) -> dict[str, Any]:
    """The plan as plain data (`json.dump`-able). Times are µs, sizes bytes; a memory limit of
    null means unlimited. Ops built from an op graph also list their original op ids; those of
    a multi-task model their tasks, and `tasks` gives each task's op ids (`[start, stop)`) and
    batch dims."""
    ops_of = getattr(problem, "ops", None)
    layers_of = getattr(problem, "layers", None)
    tasks_of = getattr(problem, "tasks", None)
    segments = getattr(problem, "segments", None)
    ops = []
    for v, node in enumerate(problem.nodes):
        entry: dict[str, Any] = {
            "id": v,
            "name": node.name,
            "layer": node.layer,
            "device": plan.device[v],
            "start": plan.start[v],
            "end": plan.end[v],
            "compute_us": node.compute_us,
            "persistent": node.persistent,
            "temporary": node.temporary,
            "output": node.output,
            "inputs": list(problem.pred[v]),
        }
        if node.group is not None:
            entry["group"] = node.group
        if node.where:
            entry["where"] = node.where
        if ops_of:
            entry["graph_ops"] = list(ops_of[v])
        if layers_of:
            entry["layers"] = list(layers_of[v])
        if tasks_of:
            entry["tasks"] = list(tasks_of[v])
        ops.append(entry)
    extra: dict[str, Any] = {}
    if segments:  # a multi-task model: each task's op ids and batch dims
        extra["tasks"] = {
            seg.task: {"graph_ops": [seg.ops.start, seg.ops.stop], "dims": dict(seg.dims)}
            for seg in segments
        }
    return {
        "version": JSON_VERSION,
        "algorithm": plan.algorithm,
        "devices": [
            {
                "id": d,
                "name": dev.name,
                "memory": None if dev.memory >= UNLIMITED else dev.memory,
                "peak_memory": s["peak_bytes"],
                "busy_us": s["busy_us"],
            }
            for d, (dev, s) in enumerate(
                zip(problem.devices, device_stats(problem, plan), strict=True)
            )
        ],
        "comm": {
            "model": problem.comm.model,
            "latency_us": problem.comm.latency_us,
            "bytes_per_us": problem.comm.bytes_per_us,
        },
        "ops": ops,
        "edges": [{"src": u, "dst": v, "bytes": b} for (u, v), b in problem.edge_bytes.items()],
        "makespan": plan.makespan,
        "lower_bound": plan.lower_bound,
        "placement_seconds": plan.seconds,
        **extra,
    }


def gantt(problem: Problem, plan: Plan, path: str | Path) -> Path:
    """A PNG: one row of op bars per device (colour by layer), and below it memory in use per
    device over the step with each device's limit dashed. Needs matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:  # an optional extra, not a dependency of placement itself
        from seqc.spec.errors import UsageError

        raise UsageError(
            "drawing a Gantt chart needs matplotlib, which is not installed",
            code="missing-dependency",
            hint="pip install 'matplotlib>=3.8', or leave out --gantt",
        ) from e
    ndev = len(problem.devices)
    fig, (ax, mx) = plt.subplots(
        2, 1, figsize=(12, 1.0 + 0.6 * ndev + 3), sharex=True, height_ratios=[ndev, 3]
    )
    cmap = plt.get_cmap("tab20")
    colour: dict[str, Any] = {}
    for v, node in enumerate(problem.nodes):
        key = node.layer.split(".")[0] + (
            "." + node.layer.split(".")[1] if node.layer.count(".") else ""
        )
        c = colour.setdefault(key, cmap(len(colour) % 20))
        d = plan.device[v]
        ax.barh(
            d,
            (plan.end[v] - plan.start[v]) / 1e3,
            left=plan.start[v] / 1e3,
            height=0.8,
            color=c,
            edgecolor="black",
            linewidth=0.2,
        )
    ax.set_yticks(range(ndev), [dev.name for dev in problem.devices])
    ax.invert_yaxis()
    ax.set_title(
        f"{plan.algorithm}: makespan {plan.makespan / 1e3:.2f} ms "
        f"(lower bound {plan.lower_bound / 1e3:.2f} ms)"
    )
    for d, steps in enumerate(memory_timeline(problem, plan)):
        xs = [t / 1e3 for t, _ in steps] + [plan.makespan / 1e3]
        ys = [b / 2**20 for _, b in steps]
        ys.append(ys[-1])
        line = mx.step(xs, ys, where="post", label=problem.devices[d].name)[0]
        if problem.devices[d].memory < UNLIMITED:
            mx.axhline(
                problem.devices[d].memory / 2**20,
                color=line.get_color(),
                linestyle="--",
                linewidth=0.8,
            )
    peak = max((b for steps in memory_timeline(problem, plan) for _, b in steps), default=0)
    limits = [dev.memory for dev in problem.devices if dev.memory < UNLIMITED]
    if peak and limits and min(limits) > 4 * peak:  # keep the usage readable: limits far above
        mx.set_ylim(0, 1.15 * peak / 2**20)
        mx.set_title(f"memory (limits from {_size(min(limits))}, off the scale)", fontsize="small")
    mx.set_xlabel("time (ms)")
    mx.set_ylabel("memory (MiB)")
    mx.legend(loc="upper right", fontsize="small")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"
