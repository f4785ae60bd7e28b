"""Run an op graph with each op pinned to a device: the TF emitter's side of placement.

A placement maps op ids to TF device names (`/device:CPU:1`). Each op is emitted under
`tf.device`, so TF inserts the transfers between devices where an edge crosses them. A scan is
placed as one op (its body runs where the scan runs). Ops the plan leaves out go to the
`default` device. The plan itself comes from the placement pass (m-TOPO, m-ETF, m-SCT) or from
`by_layer`, a prefix table such as `{"encoder": "/device:CPU:0", "decoder": "/device:CPU:1"}`.
"""

from __future__ import annotations

import contextlib
from typing import Any

import tensorflow as tf

from seqc.backends.tf.interpret import _scan
from seqc.backends.tf.ops import OPS, Ctx
from seqc.compiler.graph import Graph


def run_placed(
    graph: Graph,
    params: dict[str, Any],
    inputs: dict[str, Any],
    ctx: Ctx,
    placement: dict[int, str],
    default: str | None = None,
) -> list[tf.Tensor]:
    check_devices(placement)
    env: list[Any] = [None] * len(graph.ops)
    for op in graph.ops:
        device = placement.get(op.id, default)
        with tf.device(device) if device else contextlib.nullcontext():
            if op.kind == "input":
                env[op.id] = tf.identity(tf.convert_to_tensor(inputs[op.attrs["name"]]))
            elif op.kind == "param":
                p = tf.convert_to_tensor(params[op.attrs["name"]])
                env[op.id] = tf.cast(p, ctx.compute_dtype) if p.dtype == tf.float32 else p
            elif op.kind == "scan":
                env[op.id] = _scan(graph, op, [env[i] for i in op.inputs], params, ctx)
            else:
                env[op.id] = OPS[op.kind]([env[i] for i in op.inputs], op.attrs, ctx)
    return [env[o] for o in graph.outputs]


def check_devices(placement: dict[int, str]) -> None:
    """Every device the plan names must exist; TF would otherwise place silently elsewhere."""
    logical = tf.config.list_logical_devices()
    known = {(d.device_type, int(d.name.rsplit(":", 1)[1])) for d in logical}
    for device in sorted(set(placement.values())):
        spec = tf.DeviceSpec.from_string(device)
        if (spec.device_type, spec.device_index or 0) not in known:
            raise ValueError(
                f"placement names device {device}, but this process has only "
                f"{', '.join(d.name for d in logical)}"
            )


def by_layer(graph: Graph, prefixes: dict[str, str], default: str) -> dict[int, str]:
    """Op id to device from the longest layer-path prefix that matches each op's layer."""
    ordered = sorted(prefixes, key=len, reverse=True)
    plan: dict[int, str] = {}
    for op in graph.ops:
        for prefix in ordered:
            if op.layer == prefix or op.layer.startswith(prefix + "."):
                plan[op.id] = prefixes[prefix]
                break
        else:
            plan[op.id] = default
    return plan


def devices_used(graph: Graph, placement: dict[int, str]) -> dict[str, int]:
    """How many ops each device runs (a summary for logs and tests)."""
    counts: dict[str, int] = {}
    for op in graph.ops:
        d = placement.get(op.id, "")
        counts[d] = counts.get(d, 0) + 1
    return counts


def from_plan(problem: Any, plan: Any, names: list[str] | None = None) -> dict[int, str]:
    """Op id -> TF device from a placement pass's plan over a `GraphProblem` (its nodes map
    back to op ids). Device i of the plan is `names[i]`, by default `/device:CPU:i`."""
    names = names or [f"/device:CPU:{i}" for i in range(len(problem.devices))]
    return {op: names[plan.device[node]] for node, ops in enumerate(problem.ops) for op in ops}
