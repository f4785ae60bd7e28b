"""`seqc profile` as a library: each op of a training step measured on this machine, for the placer.

Baechi places a step from per-op costs; seqc's are estimates (FLOPs over the device's FLOP/s,
bytes over its bandwidth, backward twice forward). Those are right in aggregate and wrong per
op in ways that move a placement: a softmax is bound by memory, a small matmul by overhead,
a gather's backward is a scatter. This command measures instead: every op of the task's
forward graph (the one `seqc place` plans) is cut out as a graph of one op, its operands fed
random values of their types at the step's sizes (the experiment's largest batch), compiled
by the backend as a training step is, and timed forward and backward (the pullback of a
random cotangent; see each backend's `profile_op`) after warm-up, `--reps` times, median.
Ops with the same kind, attributes and operand types are measured once (the blocks of a
Transformer repeat). Leaves (params, constants, shape-only masks) and recurrences (`scan`)
keep the estimate; the table says so.

`seqc place --profile F` uses the measured seconds in place of the estimate for every op the
file measured. The file names the graph it measured by a digest, and keeps each op's kind,
layer, type and operands, so a profile of another model or of other sizes is refused saying
what differs (the sizes, or the first op that differs and the op counts by kind) and with the
command that makes a fresh one, the `--set`s of the placement included.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from seqc.backends.api import Backend
from seqc.compiler.graph import Graph, Op
from seqc.compiler.placement.from_graph import LEAVES, device_specs, estimated_seconds
from seqc.run.report import PlainReporter, Reporter
from seqc.spec.errors import FileError, UsageError

FORMAT = 1
OpProgress = Callable[[int, int, Op], None]
"""Told of each op measured: its index, the op count, the op (a terminal's progress line)."""
UNMEASURED = LEAVES | {"input", "scan"}
"""Ops that keep the estimate: leaves are stored or folded into their reader, and a
recurrence's body is measured only as a whole step (not yet)."""


@dataclass
class OpTiming:
    id: int
    kind: str
    layer: str
    forward_s: float
    backward_s: float
    estimate_s: float
    measured: bool
    type: str = ""
    """The op's output type (`float32[B, T, 128]`): what a stale profile is compared by."""
    inputs: tuple[int, ...] = ()

    @property
    def seconds(self) -> float:
        """Forward plus backward: what the placer charges the op's node."""
        return self.forward_s + self.backward_s


def digest(graph: Graph, dims: Mapping[str, int]) -> str:
    """What a profile was measured on: every op's kind, operands and type, and the sizes."""
    h = hashlib.sha256(json.dumps(sorted(dims.items())).encode())
    for op in graph.ops:
        h.update(f"{op.kind}|{op.inputs}|{op.type}|{op.layer}\n".encode())
    return h.hexdigest()[:32]


def graph_signature(graph: Graph) -> str:
    """The graph alone (every op's kind, operands, type and layer; no sizes), short: what a
    stale profile's message names, beside the sizes."""
    h = hashlib.sha256()
    for op in graph.ops:
        h.update(f"{op.kind}|{op.inputs}|{op.type}|{op.layer}\n".encode())
    return h.hexdigest()[:12]


def profile_command(
    spec: Path,
    experiment: str,
    json_file: Path,
    overrides: Sequence[str] = (),
    task: str | None = None,
    backend: str = "jax",
) -> str:
    """The `seqc profile` command line that profiles what a placement with these arguments
    places: its `--set`s and `--task` included (without them, the fresh profile would be of
    another graph again), quoted for a POSIX shell."""
    words = ["seqc", "profile", str(spec), "-e", experiment]
    if task is not None:
        words += ["--task", task]
    if backend != "jax":
        words += ["--backend", backend]
    for o in overrides:
        words += ["--set", o]
    words += ["--json", str(json_file)]
    return shlex.join(words)


def one_op_graph(graph: Graph, op: Op) -> Graph:
    """`op` alone, its distinct operands as inputs `a0`, `a1`, ... of their (symbolic) types."""
    one = Graph(subgraphs=graph.subgraphs)
    ids: dict[int, int] = {}
    for u in dict.fromkeys(op.inputs):
        src = graph.ops[u]
        vid = len(one.ops)
        one.ops.append(Op(vid, "input", (), {"name": f"a{len(ids)}"}, src.type, src.layer))
        one.inputs[f"a{len(ids)}"] = vid
        ids[u] = vid
    vid = len(one.ops)
    one.ops.append(
        Op(vid, op.kind, tuple(ids[u] for u in op.inputs), op.attrs, op.type, op.layer, op.span)
    )
    one.outputs = [vid]
    return one


def random_inputs(one: Graph, dims: Mapping[str, int], seed: int) -> dict[str, np.ndarray]:
    """Values for a one-op graph's inputs: normal floats, small ids (valid indices into any
    table of four or more rows), all-true masks."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, vid in one.inputs.items():
        t = one.ops[vid].type
        shape = tuple(int(d) if isinstance(d, int) else int(dims[d]) for d in t.shape)
        if t.dtype == "bool":
            feeds[name] = np.ones(shape, bool)
        elif t.dtype.startswith("int"):
            feeds[name] = rng.integers(0, 4, shape).astype(t.dtype)
        else:
            feeds[name] = rng.normal(0, 1, shape).astype(np.float32).astype(t.dtype)
    return feeds


def _signature(graph: Graph, op: Op) -> str:
    return repr((op.kind, op.attrs, [graph.ops[u].type for u in op.inputs], op.type))


def profile_graph(
    backend: Backend,
    graph: Graph,
    dims: Mapping[str, int],
    devices: Sequence[Any] | None,
    reps: int = 10,
    on_op: OpProgress | None = None,
) -> list[OpTiming]:
    """Every op of `graph` timed on `backend` (see the module docstring); `on_op` is told of
    each op as its measurement ends."""
    # the estimate of the slowest listed device, as the placer takes it; else the defaults of
    # a device call (100 GFLOP/s, 20 GB/s)
    spec = min(device_specs(devices or [{"kind": "device"}]), key=lambda s: s.flops)
    done: dict[str, tuple[float, float]] = {}
    rows = []
    for n, op in enumerate(graph.ops):
        estimate = estimated_seconds(op, graph, dims, spec.flops, spec.bandwidth)
        if op.kind in UNMEASURED:
            rows.append(OpTiming(op.id, op.kind, op.layer, 0.0, 0.0, estimate, False, *_shape(op)))
            continue
        key = _signature(graph, op)
        if key not in done:
            one = one_op_graph(graph, op)
            done[key] = backend.profile_op(one, random_inputs(one, dims, op.id), reps)
            if on_op is not None:
                on_op(n, len(graph.ops), op)
        fwd, bwd = done[key]
        rows.append(OpTiming(op.id, op.kind, op.layer, fwd, bwd, estimate, True, *_shape(op)))
    return rows


def _shape(op: Op) -> tuple[str, tuple[int, ...]]:
    """What a profile row keeps of an op besides its kind and layer: its type and operands."""
    return str(op.type), tuple(op.inputs)


def write_profile(
    path: Path, rows: list[OpTiming], graph: Graph, dims: Mapping[str, int], meta: dict
) -> None:
    data = {
        "format": FORMAT,
        **meta,
        "dims": dict(dims),
        "digest": digest(graph, dims),
        "graph": graph_signature(graph),
        "ops": [{**row.__dict__, "inputs": list(row.inputs)} for row in rows],
    }
    path.write_text(json.dumps(data, indent=1) + "\n")


def read_profile(
    path: Path, graph: Graph, dims: Mapping[str, int], remake: Callable[[str], str]
) -> dict[int, float]:
    """Measured forward + backward seconds by op id, from a profile of this very graph.
    `remake(backend)`: the command that profiles this graph afresh on that backend (the
    stale profile's, where it names one), for the hint of a refusal."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != FORMAT:
            raise ValueError("not a seqc profile of this version")
        ops = data["ops"]
        stored = data["digest"]
        measured = {
            int(r["id"]): float(r["forward_s"]) + float(r["backward_s"])
            for r in ops
            if r["measured"]
        }
    except FileNotFoundError:
        raise FileError(f"no such profile: {path}", path=str(path), code="file-not-found") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise FileError(
            f"{path} is not a readable seqc profile ({e})",
            path=str(path),
            code="bad-profile",
            hint=f"make one with `{remake('jax')}`",
        ) from None
    if stored != digest(graph, dims):
        raise _stale(path, data, graph, dims, remake)
    return measured


def _stale(
    path: Path, data: dict, graph: Graph, dims: Mapping[str, int], remake: Callable[[str], str]
) -> UsageError:
    """The refusal of a profile of something else, saying what differs: the sizes, the graph
    (its signature, its op counts by kind, the first op that differs), or both."""
    backend = data.get("backend")
    command = remake(backend if isinstance(backend, str) else "jax")
    hint = f"profile this graph (your --set flags included): `{command}`"
    profiled = data.get("dims")
    sizes_differ = profiled != dict(dims)
    rows = data["ops"]
    then = [(r.get("kind"), r.get("layer"), r.get("type"), r.get("inputs")) for r in rows]
    now = [(op.kind, op.layer, str(op.type), list(op.inputs)) for op in graph.ops]
    if "type" not in (rows[0] if rows else {}):  # a profile written before rows kept types
        then = [(k, layer, None, None) for k, layer, _, _ in then]
        now = [(k, layer, None, None) for k, layer, _, _ in now]
    first = next((i for i, (a, b) in enumerate(zip(then, now, strict=False)) if a != b), None)
    if first is None and len(then) != len(now):
        first = min(len(then), len(now))
    # the digest covers the graph and the sizes: at the same sizes, the graph is what differs
    graph_differs = (
        first is not None
        or not sizes_differ
        or (data.get("graph") is not None and data["graph"] != graph_signature(graph))
    )
    if not graph_differs:
        return UsageError(
            f"{path} profiles this graph at other sizes than this placement's",
            path=str(path),
            code="stale-profile",
            expected=f"sizes {dict(dims)}",
            found=f"sizes {profiled}",
            hint=hint,
        )
    sizes = f"; the sizes differ too ({profiled} profiled)" if sizes_differ else ""
    signature = data.get("graph") or "unrecorded"
    return UsageError(
        f"{path} profiles another graph than this placement's: "
        f"{_first_difference(then, now, first)}{sizes}",
        path=str(path),
        code="stale-profile",
        expected=f"this graph: {_kinds(k for k, *_ in now)} (signature "
        f"{graph_signature(graph)}) at sizes {dict(dims)}",
        found=f"a graph of {_kinds(k for k, *_ in then)} (signature {signature}) at sizes "
        f"{profiled}",
        hint=hint,
    )


def _kinds(kinds: Iterable[object]) -> str:
    """`312 ops (matmul 48, add 40, ...)`: an op count and the most common kinds."""
    counts: dict[str, int] = defaultdict(int)
    for k in kinds:
        counts[str(k)] += 1
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:6]
    more = ", ..." if len(counts) > len(top) else ""
    return f"{sum(counts.values())} ops ({', '.join(f'{k} {n}' for k, n in top)}{more})"


def _first_difference(then: list[tuple], now: list[tuple], i: int | None) -> str:
    """Where two graphs' op lists part: the first op that differs, as each has it."""
    if i is None:
        return "the same ops, by kind and layer, but their types or operands differ"

    def shown(ops: list[tuple]) -> str:
        if i >= len(ops):
            return "no op"
        kind, layer, typ, _ = ops[i]
        where = f" in `{layer}`" if layer else ""
        return f"`{kind}`{where}" + (f" of type {typ}" if typ else "")

    return f"op {i} is {shown(then)} in the profile, {shown(now)} here"


def summary(rows: list[OpTiming]) -> list[tuple[str, int, float, float]]:
    """Per op kind: ops measured, measured ms (forward + backward), estimated ms."""
    by: dict[str, list[OpTiming]] = defaultdict(list)
    for r in rows:
        if r.measured:
            by[r.kind].append(r)
    table = [
        (
            kind,
            len(rs),
            sum(r.seconds for r in rs) * 1e3,
            sum(r.estimate_s for r in rs) * 1e3,
        )
        for kind, rs in by.items()
    ]
    return sorted(table, key=lambda row: -row[2])


@dataclass(frozen=True)
class Profiled:
    """A training step's ops measured: the rows, and what they were measured on."""

    rows: list[OpTiming]
    graph: Graph
    dims: dict[str, int]
    meta: dict[str, Any]
    """What a profile file records of its making: spec, experiment, task, backend, reps."""

    @property
    def measured_ms(self) -> float:
        """The measured ops' time a step (forward and backward), in milliseconds."""
        return sum(r.seconds for r in self.rows if r.measured) * 1e3

    @property
    def estimated_ms(self) -> float:
        """The estimate of the same ops, in milliseconds."""
        return sum(r.estimate_s for r in self.rows if r.measured) * 1e3

    def write(self, path: Path) -> None:
        """The table `seqc place --profile` plans with."""
        write_profile(path, self.rows, self.graph, self.dims, self.meta)


def profile_experiment(
    spec: Path,
    experiment: str,
    backend: str = "jax",
    reps: int = 10,
    task: str | None = None,
    overrides: list[str] | None = None,
    reporter: Reporter | None = None,
    on_op: OpProgress | None = None,
) -> Profiled:
    """Measure each op of a training step of `experiment` (forward and backward) on `backend`,
    at the experiment's largest batch (see the module docstring)."""
    from seqc.backends.registry import backend as find_backend
    from seqc.compiler.placement.plan import batch_dims
    from seqc.run.session import compile_experiment

    reporter = reporter or PlainReporter()
    resolved, compiled = compile_experiment(spec, experiment, overrides or [], None, task)
    dims = batch_dims(resolved, compiled.name)
    engine = find_backend(backend)
    graph = compiled.graph
    reporter.info(f"profiling {len(graph.ops)} ops of {compiled.name} at {dims} on {backend}")
    devices = resolved.config["distribution"]["devices"] or None
    rows = profile_graph(engine, graph, dims, devices, reps, on_op=on_op)
    meta = {
        "spec": str(spec),
        "experiment": experiment,
        "task": compiled.name,
        "backend": backend,
        "reps": reps,
    }
    return Profiled(rows, graph, dict(dims), meta)
