"""Run an op graph with JAX. Called inside `jax.jit`, it traces once into one XLA program.

Symbolic dims (`B`, `T`) are bound from the shapes of the graph's inputs at trace time; a scan
runs its body graph with `jax.lax.scan` over the time axis.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from seqc.backends.jax.ops import OPS, Ctx
from seqc.compiler.graph import Graph


def bind_dims(graph: Graph, inputs: dict[str, jax.Array]) -> dict[str, int]:
    dims: dict[str, int] = {}
    for name, vid in graph.inputs.items():
        for d, n in zip(graph.ops[vid].type.shape, inputs[name].shape, strict=True):
            if isinstance(d, str):
                dims.setdefault(d, int(n))
    return dims


def run_graph(
    graph: Graph,
    params: dict[str, jax.Array],
    inputs: dict[str, jax.Array],
    ctx: Ctx,
) -> list[jax.Array]:
    """The graph's outputs for these params and inputs."""
    ctx.dims.update(bind_dims(graph, inputs))
    return _run(graph, params, inputs, ctx)


def _run(
    graph: Graph, params: dict[str, jax.Array], inputs: dict[str, Any], ctx: Ctx
) -> list[jax.Array]:
    env: list[Any] = [None] * len(graph.ops)
    for op in graph.ops:
        if op.kind == "input":
            env[op.id] = inputs[op.attrs["name"]]
        elif op.kind == "param":
            p = params[op.attrs["name"]]
            env[op.id] = p.astype(ctx.compute_dtype) if p.dtype == jnp.float32 else p
        elif op.kind == "scan":
            env[op.id] = _scan(graph, op, [env[i] for i in op.inputs], params, ctx)
        else:
            env[op.id] = OPS[op.kind]([env[i] for i in op.inputs], op.attrs, ctx)
    return [env[o] for o in graph.outputs]


def _scan(graph: Graph, op: Any, args: list[Any], params: dict, ctx: Ctx) -> jax.Array:
    body = graph.subgraphs[op.attrs["body"]]
    n_xs = op.attrs["n_xs"]
    xs = [jnp.swapaxes(x.astype(ctx.compute_dtype), 0, 1) for x in args[:n_xs]]  # time first
    carries = tuple(c.astype(ctx.compute_dtype) for c in args[n_xs:])

    def step(carry: tuple, x_t: tuple) -> tuple:
        named = {f"x{i}": x for i, x in enumerate(x_t)} | {f"c{i}": c for i, c in enumerate(carry)}
        outs = _run(body, params, named, ctx)
        return tuple(o.astype(ctx.compute_dtype) for o in outs[1:]), outs[0]

    _, ys = jax.lax.scan(step, carries, tuple(xs), reverse=op.attrs["reverse"])
    return jnp.swapaxes(ys, 0, 1)
