"""From seqc's op graph to a placement problem: one training step, fused into placeable nodes.

The model (`../shared/research/baechi.md` §1-2, Baechi's forward-only placement):
- Backward ops are colocated with their forward op, so a forward op stands for both: its time is
  forward + backward (backward ≈ 2 x forward FLOPs and bytes), plus the optimizer update of the
  params it owns. Time = max(FLOPs / device flops, bytes moved / memory bandwidth), integer µs, ≥1.
- Param, constant, fill, iota and causal-mask ops are leaves computed or stored where they are
  read: each folds into its first reader. A later reader (a tied embedding) gets an edge from the
  first one carrying the leaf's bytes, so the weight's single copy and its transfer are both
  modelled. Iota and causal masks read their input for its shape only: that edge is dropped.
- Memory: `persistent` = params + gradients + optimizer slots of the params an op owns (each
  param once, at its first reader), plus constants; `temporary` = the gradient of the op's
  output during backward; `output` = the op's activation. Edges carry activation bytes.
- Co-placement and fusion (§2 steps 3-4): an op with exactly one out-edge joins its successor's
  group; an internal edge (u, v) of a group is contracted unless outdeg(u) > 1 and indeg(v) > 1,
  the one case where contracting could close a cycle. Fused nodes get dense ids and remember
  the original op ids and layer paths they came from.

Devices are taken as identical (as in Baechi): node times use the slowest listed device.

Several tasks trained as one model (`seqc.compiler.multitask`) are one graph, the union of the
tasks' forwards, with a `Segment` per task: its op ids and its batch dims. Each task's output is
a sink whose loss starts its part of the backward pass, folded into its ops as above; a shared
param is one tensor, held once by its first reader like a tied weight, and sent to the readers
of the other tasks (the same edge carries their gradients back, as every edge stands for its
forward and backward transfer).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from seqc.compiler.cost import FREE_KINDS, op_flops, size
from seqc.compiler.graph import DTYPE_BYTES, Graph, Op
from seqc.compiler.placement.problem import UNLIMITED, Comm, CommModel, Device, Edge, Node, Problem
from seqc.spec.errors import UsageError
from seqc.spec.types import parse_size

DEFAULT_DIMS: dict[str, int] = {"B": 32, "T": 128, "S": 128}
"""Sizes of the symbolic dims when the caller gives none: batch, target and source length."""

LATENCY_US = 134.0
"""Per-transfer latency when a device call gives none (Baechi's GPU0 -> GPU1 fit)."""

BACKWARD_FACTOR = 2.0
"""Backward FLOPs and bytes per forward FLOP and byte."""

LEAVES = frozenset({"param", "constant", "fill", "iota", "causal_mask"})
"""Ops folded into their first reader."""

_SHAPE_ONLY = frozenset({"iota", "causal_mask"})
"""Ops whose input is read for its shape only: no data dependency."""


@dataclass(frozen=True)
class DeviceSpec:
    """One device of a distribution block, in the units the cost model needs."""

    name: str
    memory: int
    flops: float
    """FLOP/s."""
    bandwidth: float
    """Memory bytes/s."""
    link: float
    """Bytes/s to each other device."""
    latency: float = LATENCY_US * 1e-6
    """Seconds per transfer, besides its bytes."""


@dataclass(frozen=True)
class Segment:
    """The ops of one task in a graph of several (`MultiTask.union_graph`)."""

    task: str
    ops: range
    """Its op ids in the graph."""
    dims: Mapping[str, int]
    """Its sizes of the symbolic dims (each task feeds its own batches)."""


@dataclass
class GraphProblem(Problem):
    """A `Problem` built from an op graph, with the way back from each node to the graph."""

    ops: list[tuple[int, ...]] = field(default_factory=list)
    """Original op ids of each node, in graph order."""
    layers: list[tuple[str, ...]] = field(default_factory=list)
    """Distinct layer paths of each node's ops, in graph order."""
    dims: dict[str, int] = field(default_factory=dict)
    """The sizes the symbolic dims were bound to."""
    node_of: dict[int, int] = field(default_factory=dict)
    """Original op id -> node id."""
    params: dict[str, int] = field(default_factory=dict)
    """Param -> the node that holds it (its value, gradient and optimizer slots), once."""
    segments: list[Segment] = field(default_factory=list)
    """The tasks of a multi-task graph, in op order; empty for one task's graph."""
    tasks: list[tuple[str, ...]] = field(default_factory=list)
    """Tasks whose ops each node holds (with segments; else empty)."""


def device_specs(devices: Sequence[Any] | None) -> list[DeviceSpec]:
    """Read `distribution.devices` (catalogue `cpu`/`gpu`/`tpu` calls, or dicts of the same
    params) into numbers."""
    if not devices:
        raise UsageError(
            "placement needs the devices to place onto; `distribution.devices` is empty",
            code="no-devices",
            hint='add `devices = 4 x gpu(memory = "16GiB")` to the distribution block',
        )
    out = []
    for i, dev in enumerate(devices):
        kind = getattr(dev, "kind", None) or (
            dev.get("kind", "device") if isinstance(dev, Mapping) else "device"
        )
        args = dev.args if hasattr(dev, "args") else dev
        out.append(
            DeviceSpec(
                name=f"{kind}:{i}",
                memory=_bytes(args.get("memory"), f"distribution.devices.{i}.memory", UNLIMITED),
                flops=float(args.get("flops", 1e11)),
                bandwidth=float(
                    _bytes(args.get("bandwidth"), f"distribution.devices.{i}.bandwidth", 20 * 10**9)
                ),
                link=float(_bytes(args.get("link"), f"distribution.devices.{i}.link", 10 * 10**9)),
                latency=float(args.get("latency", LATENCY_US * 1e-6)),
            )
        )
    return out


def _bytes(value: Any, path: str, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, int | float):
        return int(value)
    n = parse_size(str(value))
    if n is None:
        raise UsageError(
            f"`{path}` is not a size",
            code="wrong-type",
            expected='a size such as "16GiB" or "900GB"',
            found=repr(value),
        )
    return n


def comm_for(specs: Sequence[DeviceSpec], model: CommModel = "sequential") -> Comm:
    """The slowest link and the largest per-transfer latency of the listed devices."""
    link = min(s.link for s in specs)
    latency_us = max(s.latency for s in specs) * 1e6
    return Comm(model=model, latency_us=latency_us, bytes_per_us=link / 1e6)


def _check_dims(ops: Iterable[Op], dims: Mapping[str, int]) -> None:
    missing: set[str] = set()
    for op in ops:
        for d in op.type.shape:
            if isinstance(d, str):
                missing |= set(re.findall(r"[A-Za-z_]\w*", d)) - {"ceil"} - set(dims)
    if missing:
        raise UsageError(
            f"the op graph has symbolic dims with no size: {', '.join(sorted(missing))}",
            code="unbound-dims",
            expected=f"sizes for {', '.join(sorted(missing))}",
            found=f"sizes for {', '.join(sorted(dims)) or 'none'}",
            hint="pass them in batch_dims, e.g. {"
            + ", ".join(f'"{m}": 128' for m in sorted(missing))
            + "}",
        )


def problem_from_graph(
    graph: Graph,
    devices_config: Sequence[Any] | None,
    comm: CommModel = "sequential",
    optimizer_slots: int = 2,
    batch_dims: Mapping[str, int] | None = None,
    *,
    fuse: bool = True,
    retain_activations: bool = False,
    segments: Sequence[Segment] = (),
    measured: Mapping[int, float] | None = None,
) -> GraphProblem:
    """The placement problem of one training step of `graph` on `devices_config`.

    `optimizer_slots`: state tensors per param (Adam: 2, momentum: 1, SGD: 0).
    `batch_dims`: sizes of the symbolic dims (default `DEFAULT_DIMS`).
    `fuse=False` keeps one node per non-leaf op (no grouping), for inspection.
    `retain_activations`: also count each op's activation as persistent, as a training step
    keeps it for backward (off by default, as in Baechi's forward-only memory model).
    `segments`: the tasks of a multi-task graph; each one's ops take its dims (the others
    `batch_dims`).
    `measured`: forward + backward seconds by op id (`seqc profile`), used in place of the
    estimate for those ops.
    """
    dims = dict(DEFAULT_DIMS if batch_dims is None else batch_dims)
    ops = graph.ops
    n_ops = len(ops)
    dims_of: list[dict[str, int]] = [dims] * n_ops
    for seg in segments:
        seg_dims = dict(seg.dims)
        for v in seg.ops:
            dims_of[v] = seg_dims
        _check_dims((ops[v] for v in seg.ops), seg_dims)
    _check_dims((op for op in ops if dims_of[op.id] is dims), dims)
    specs = device_specs(devices_config)
    flops_s = min(s.flops for s in specs)
    bw_s = min(s.bandwidth for s in specs)

    act = [size(op.type.shape, dims_of[op.id]) * DTYPE_BYTES[op.type.dtype] for op in ops]
    readers: list[list[int]] = [[] for _ in range(n_ops)]
    for op in ops:
        if op.kind in _SHAPE_ONLY:
            continue
        for u in dict.fromkeys(op.inputs):
            readers[u].append(op.id)

    # --- op level: every non-leaf op (and every unread leaf) is a unit; leaves fold in.
    is_unit = [op.kind not in LEAVES or not readers[op.id] for op in ops]
    host = [v if is_unit[v] else readers[v][0] for v in range(n_ops)]
    """The unit each op lives in: itself, or a leaf's first reader."""

    param_bytes = {name: p.size * DTYPE_BYTES[p.type.dtype] for name, p in graph.params.items()}
    owner: dict[str, int] = {}
    readers_of: dict[str, list[int]] = {}
    for op in ops:  # each param once, at the first unit that reads it (scan bodies included)
        for name in _param_names(op, graph):
            owner[name] = min(owner.get(name, host[op.id]), host[op.id])
            readers_of.setdefault(name, []).append(host[op.id])
    for name, p in graph.params.items():  # an unread param still takes memory
        if name not in owner:
            owner[name] = next(
                (host[o.id] for o in ops if o.layer == p.layer), host[0] if ops else 0
            )

    compute = [0.0] * n_ops
    persistent = [0] * n_ops
    temporary = [0] * n_ops
    for op in ops:
        v = op.id
        if op.kind == "constant":
            persistent[host[v]] += act[v]
        elif op.kind == "sinusoid":  # the table a training backend gathers its rows from
            persistent[v] += int(op.attrs["max_length"]) * int(op.attrs["d"]) * 4
        if not is_unit[v] or op.kind in LEAVES:
            continue
        if measured is not None and v in measured:
            compute[v] += measured[v]
        else:
            compute[v] += estimated_seconds(op, graph, dims_of[v], flops_s, bw_s)
        if op.type.dtype.startswith(("float", "bfloat")) and op.kind != "input":
            temporary[v] = act[v]
        if retain_activations:
            persistent[v] += act[v]
    for name, v in owner.items():
        b = param_bytes[name]
        persistent[v] += b * (2 + optimizer_slots)
        compute[v] += b * (3 + 2 * optimizer_slots) / bw_s  # read p, g, slots; write p, slots

    # Tensors between units: (src unit, dst unit) -> {tensor op id: bytes}.
    tensors: dict[tuple[int, int], dict[int, int]] = {}
    for op in ops:
        if not is_unit[op.id] or op.kind in _SHAPE_ONLY:
            continue
        for u in dict.fromkeys(op.inputs):
            src = host[u]
            if src != op.id:
                tensors.setdefault((src, op.id), {})[u] = act[u]

    for key, (name, hosts) in enumerate(readers_of.items()):  # a tied weight goes to its readers
        for h in hosts:
            if h != owner[name]:
                tensors.setdefault((owner[name], h), {})[-1 - key] = param_bytes[name]

    units = [v for v in range(n_ops) if is_unit[v]]
    members: dict[int, list[int]] = {v: [v] for v in units}
    for v in range(n_ops):
        if not is_unit[v]:
            members[host[v]].append(v)

    # --- co-placement groups and fusion (§2 steps 3-4).
    parent = {v: v for v in units}

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    succ: dict[int, set[int]] = {v: set() for v in units}
    pred: dict[int, set[int]] = {v: set() for v in units}
    for a, b in tensors:
        succ[a].add(b)
        pred[b].add(a)
    group = {v: v for v in units}
    if fuse:
        gparent = dict(group)

        def gfind(x: int) -> int:
            while gparent[x] != x:
                gparent[x] = gparent[gparent[x]]
                x = gparent[x]
            return x

        for v in units:
            if len(succ[v]) == 1:
                a, b = gfind(v), gfind(next(iter(succ[v])))
                if a != b:
                    gparent[a] = b
        group = {v: gfind(v) for v in units}
        for a0, b0 in sorted(tensors):
            if group[a0] != group[b0]:
                continue
            a, b = find(a0), find(b0)
            if a == b or b not in succ[a] or (len(succ[a]) > 1 and len(pred[b]) > 1):
                continue
            _contract(a, b, succ, pred)
            parent[b] = a

    reps = sorted({find(v) for v in units}, key=lambda r: r)
    node_id = {r: i for i, r in enumerate(reps)}
    fused: dict[int, list[int]] = {r: [] for r in reps}
    for v in units:
        fused[find(v)].extend(members[v])
    node_of = {o: node_id[find(host[o])] for o in range(n_ops)}

    # Groups that fusion could not collapse stay as pins.
    groups_of_rep: dict[int, list[int]] = {}
    for r in reps:
        groups_of_rep.setdefault(group[r], []).append(r)
    pin: dict[int, int] = {}
    for g_members in groups_of_rep.values():
        if len(g_members) > 1:
            gid = len({*pin.values()})
            for r in g_members:
                pin[r] = gid

    edge_tensors: dict[tuple[int, int], dict[int, int]] = {}
    for (a, b), ts in tensors.items():
        key = (node_of[a], node_of[b])
        if key[0] != key[1]:
            edge_tensors.setdefault(key, {}).update(ts)
    leaves_out: dict[int, set[int]] = {}
    for (a, _), ts in edge_tensors.items():
        leaves_out.setdefault(a, set()).update(ts)

    nodes: list[Node] = []
    op_lists: list[tuple[int, ...]] = []
    layer_lists: list[tuple[str, ...]] = []
    for r in reps:
        i = node_id[r]
        mem = sorted(fused[r])
        real = [o for o in mem if is_unit[o]]
        out_bytes = sum(
            act[o]
            for o in real
            if ops[o].kind not in LEAVES and (o in leaves_out.get(i, ()) or not readers[o])
        )
        layers = tuple(dict.fromkeys(ops[o].layer for o in mem if ops[o].layer))
        first_span = next((ops[o].span for o in mem if ops[o].span is not None), None)
        nodes.append(
            Node(
                id=i,
                name=_name([ops[o].kind for o in real]),
                compute_us=max(1, math.ceil(sum(compute[o] for o in real) * 1e6)),
                persistent=sum(persistent[o] for o in mem),
                temporary=max((temporary[o] for o in real), default=0),
                output=out_bytes,
                group=pin.get(r),
                layer=_common_layer(layers),
                where=str(first_span) if first_span is not None else "",
            )
        )
        op_lists.append(tuple(mem))
        layer_lists.append(layers)
    task_of = {v: seg.task for seg in segments for v in seg.ops}
    edges = [Edge(a, b, sum(ts.values())) for (a, b), ts in sorted(edge_tensors.items())]
    return GraphProblem(
        nodes=nodes,
        edges=edges,
        devices=[Device(s.name, s.memory) for s in specs],
        comm=comm_for(specs, comm),
        ops=op_lists,
        layers=layer_lists,
        dims=dims,
        node_of=node_of,
        params={name: node_of[v] for name, v in owner.items()},
        segments=list(segments),
        tasks=[tuple(dict.fromkeys(task_of[o] for o in mem if o in task_of)) for mem in op_lists]
        if segments
        else [],
    )


def estimated_seconds(
    op: Op, graph: Graph, dims: Mapping[str, int], flops_s: float, bw_s: float
) -> float:
    """The cost model's forward + backward seconds of one op: FLOPs over the device's FLOP/s
    or bytes moved over its bandwidth, whichever is longer, backward `BACKWARD_FACTOR` times
    forward. Reshapes, transposes and slices move nothing (the framework fuses them)."""

    def nbytes(v: int) -> int:
        t = graph.ops[v].type
        return size(t.shape, dims) * DTYPE_BYTES[t.dtype]

    f = op_flops(op, graph, dict(dims))
    moved = (
        0
        if op.kind in FREE_KINDS
        else nbytes(op.id) + sum(nbytes(u) for u in dict.fromkeys(op.inputs))
    )
    return (1 + BACKWARD_FACTOR) * max(f / flops_s, moved / bw_s)


def _contract(a: int, b: int, succ: dict[int, set[int]], pred: dict[int, set[int]]) -> None:
    """Merge b into a (the edge a -> b disappears)."""
    for x in succ.pop(b):
        pred[x].discard(b)
        if x != a:
            succ[a].add(x)
            pred[x].add(a)
    for x in pred.pop(b):
        succ[x].discard(b)
        if x != a:
            succ[x].add(a)
            pred[a].add(x)
    succ[a].discard(b)


def _param_names(op: Any, graph: Graph) -> list[str]:
    if op.kind == "param":
        return [op.attrs["name"]]
    if op.kind == "scan":
        body = graph.subgraphs[op.attrs["body"]]
        return [n for o in body.ops for n in _param_names(o, body)]
    return []


def _name(kinds: list[str]) -> str:
    if not kinds:
        return "leaf"
    if len(kinds) <= 3:
        return "+".join(kinds)
    return f"{kinds[0]}..{kinds[-1]} ({len(kinds)} ops)"


def _common_layer(layers: tuple[str, ...]) -> str:
    if not layers:
        return ""
    if len(layers) == 1:
        return layers[0]
    parts = [p.split(".") for p in layers]
    common: list[str] = []
    for segs in zip(*parts, strict=False):
        if len(set(segs)) != 1:
            break
        common.append(segs[0])
    return ".".join(common) or layers[0]


def batch_dims(resolved: Any, task: str) -> dict[str, int]:
    """B and T (and S) of the largest batch the experiment feeds: the longest bucket and its
    batch size, else `max_length` and `train.batch_size`."""
    inp = resolved.config[task]["input"]
    buckets = inp.get("buckets") if hasattr(inp, "get") else None
    batch = resolved.config["train"]["batch_size"]
    if buckets:
        length = max(int(k) for k in buckets)
        b = int(batch or buckets[length])
    else:
        length = int(inp.get("max_length") or DEFAULT_DIMS["T"])
        b = int(batch or DEFAULT_DIMS["B"])
    return {"B": b, "T": length, "S": length}
