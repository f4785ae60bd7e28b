"""`seqc profile`: each op of a training step measured on this machine, for the placer.

Baechi places a step from per-op costs; seqc's are estimates (FLOPs over the device's FLOP/s,
bytes over its bandwidth, backward twice forward). Those are right in aggregate and wrong per
op in ways that move a placement: a softmax is bound by memory, a small matmul by overhead,
a gather's backward is a scatter. This command measures instead: every op of the task's
forward graph (the one `seqc place` plans) is cut out as a graph of one op, its operands fed
random values of their types at the step's sizes (the experiment's largest batch), compiled
by the backend as a training step is, and timed forward and backward (the gradient of the sum
of its output) after warm-up, `--reps` times, median. Ops with the same kind, attributes and
operand types are measured once (the blocks of a Transformer repeat). Leaves (params,
constants, shape-only masks) and recurrences (`scan`) keep the estimate; the table says so.

`seqc place --profile F` uses the measured seconds in place of the estimate for every op the
file measured. The file names the graph it measured by a digest, so a profile of another model
or of other sizes is refused with the command that makes a fresh one.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from seqc.compiler.graph import Graph, Op
from seqc.compiler.placement.from_graph import LEAVES, device_specs, estimated_seconds
from seqc.run.console import err, out
from seqc.spec.errors import FileError, UsageError

FORMAT = 1
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
    backend: Any,
    graph: Graph,
    dims: Mapping[str, int],
    devices: Any,
    reps: int = 10,
    progress: bool = False,
) -> list[OpTiming]:
    """Every op of `graph` timed on `backend` (see the module docstring)."""
    # the estimate of the slowest listed device, as the placer takes it; else the defaults of
    # a device call (100 GFLOP/s, 20 GB/s)
    spec = min(device_specs(devices or [{"kind": "device"}]), key=lambda s: s.flops)
    done: dict[str, tuple[float, float]] = {}
    rows = []
    for n, op in enumerate(graph.ops):
        estimate = estimated_seconds(op, graph, dims, spec.flops, spec.bandwidth)
        if op.kind in UNMEASURED:
            rows.append(OpTiming(op.id, op.kind, op.layer, 0.0, 0.0, estimate, False))
            continue
        key = _signature(graph, op)
        if key not in done:
            one = one_op_graph(graph, op)
            done[key] = backend.profile_op(one, random_inputs(one, dims, op.id), reps)
            if progress and err.is_terminal:
                err.print(f"  op {n + 1}/{len(graph.ops)}: {op.kind} ({op.layer})", end="\r")
        fwd, bwd = done[key]
        rows.append(OpTiming(op.id, op.kind, op.layer, fwd, bwd, estimate, True))
    return rows


def write_profile(
    path: Path, rows: list[OpTiming], graph: Graph, dims: Mapping[str, int], meta: dict
) -> None:
    data = {
        "format": FORMAT,
        **meta,
        "dims": dict(dims),
        "digest": digest(graph, dims),
        "ops": [row.__dict__ for row in rows],
    }
    path.write_text(json.dumps(data, indent=1) + "\n")


def read_profile(
    path: Path, graph: Graph, dims: Mapping[str, int], remake: str
) -> dict[int, float]:
    """Measured forward + backward seconds by op id, from a profile of this very graph."""
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
            hint=f"make one with `{remake}`",
        ) from None
    if stored != digest(graph, dims):
        raise UsageError(
            f"{path} profiles another graph or other sizes than this placement's",
            path=str(path),
            code="stale-profile",
            found=f"sizes {data.get('dims')}",
            expected=f"this experiment's graph at sizes {dict(dims)}",
            hint=f"make a fresh one: `{remake}`",
        )
    return measured


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


def profile_cmd(
    spec: Annotated[Path, typer.Argument(help="A .seq file.", show_default=False)],
    experiment: Annotated[
        str, typer.Option("-e", "--experiment", help="Registry name of an experiment.")
    ],
    backend: Annotated[str, typer.Option("--backend", help="jax or tf.")] = "jax",
    json_file: Annotated[
        Path | None, typer.Option("--json", help="Write the table for `seqc place --profile`.")
    ] = None,
    reps: Annotated[int, typer.Option("--reps", help="Timed runs of each op.", min=1)] = 10,
    task: Annotated[str | None, typer.Option("--task", help="The task to profile.")] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override a value (repeatable).")
    ] = None,
) -> None:
    """Measure each op of a training step (forward and backward) on this machine's device;
    write the table `seqc place --profile` plans with."""
    from rich.table import Table

    from seqc.backends.registry import backend as find_backend
    from seqc.compiler.placement.plan import batch_dims
    from seqc.run.session import compile_experiment

    resolved, compiled = compile_experiment(spec, experiment, set_ or [], None, task)
    dims = batch_dims(resolved, compiled.name)
    engine = find_backend(backend)
    graph = compiled.graph
    err.print(f"profiling {len(graph.ops)} ops of {compiled.name} at {dims} on {backend}")
    devices = resolved.config["distribution"]["devices"] or None
    rows = profile_graph(engine, graph, dims, devices, reps, progress=True)
    if err.is_terminal:
        err.print()
    table = Table(box=None, padding=(0, 2))
    for col in ("op kind", "ops", "measured ms", "estimated ms", "measured / estimated"):
        table.add_column(col, justify="left" if col == "op kind" else "right")
    for kind, n, measured, estimated in summary(rows):
        ratio = f"{measured / estimated:.2f}" if estimated > 0 else "-"
        table.add_row(kind, str(n), f"{measured:.3f}", f"{estimated:.3f}", ratio)
    out.print(table)
    total_m = sum(r.seconds for r in rows if r.measured) * 1e3
    total_e = sum(r.estimate_s for r in rows if r.measured) * 1e3
    out.print(f"measured ops: {total_m:.2f} ms a step, estimated {total_e:.2f} ms")
    if json_file is not None:
        meta = {
            "spec": str(spec),
            "experiment": experiment,
            "task": compiled.name,
            "backend": backend,
            "reps": reps,
        }
        write_profile(json_file, rows, graph, dims, meta)
        out.print(f"profile: {json_file}")
