"""Run an op graph with TensorFlow. Called inside `tf.function`, it traces once into one TF graph.

Symbolic dims (`B`, `T`) are bound from the shapes of the graph's inputs at trace time (as
tensors where the signature leaves them unknown); a scan runs its body graph in a
`tf.while_loop` over the time axis, writing each step's output at its own index, so a reversed
scan returns its outputs in input order, as `jax.lax.scan(reverse=True)` does.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from seqc.backends.tf.ops import DTYPES, OPS, Ctx
from seqc.compiler.graph import Graph


def bind_dims(graph: Graph, inputs: dict[str, Any]) -> dict[str, Any]:
    dims: dict[str, Any] = {}
    for name, vid in graph.inputs.items():
        x = tf.convert_to_tensor(inputs[name])
        shape = graph.ops[vid].type.shape
        if x.shape.rank != len(shape):
            raise ValueError(f"input `{name}` has shape {x.shape}, the graph expects {shape}")
        for i, d in enumerate(shape):
            if isinstance(d, str) and d not in dims:
                n = x.shape[i]
                dims[d] = int(n) if n is not None else tf.shape(x)[i]
    return dims


def run_graph(
    graph: Graph,
    params: dict[str, Any],
    inputs: dict[str, Any],
    ctx: Ctx,
    placement: dict[int, str] | None = None,
) -> list[tf.Tensor]:
    """The graph's outputs for these params (arrays or variables) and inputs.

    `placement` maps op ids to TF device names; see `seqc.backends.tf.placed`."""
    ctx.dims.update(bind_dims(graph, inputs))
    if placement:
        from seqc.backends.tf.placed import run_placed

        return run_placed(graph, params, inputs, ctx, placement)
    return _run(graph, params, inputs, ctx)


def _run(graph: Graph, params: dict[str, Any], inputs: dict[str, Any], ctx: Ctx) -> list[Any]:
    env: list[Any] = [None] * len(graph.ops)
    for op in graph.ops:
        if op.kind == "input":
            env[op.id] = tf.convert_to_tensor(inputs[op.attrs["name"]])
        elif op.kind == "param":
            p = tf.convert_to_tensor(params[op.attrs["name"]])
            env[op.id] = tf.cast(p, ctx.compute_dtype) if p.dtype == tf.float32 else p
        elif op.kind == "scan":
            env[op.id] = _scan(graph, op, [env[i] for i in op.inputs], params, ctx)
        else:
            env[op.id] = OPS[op.kind]([env[i] for i in op.inputs], op.attrs, ctx)
    return [env[o] for o in graph.outputs]


def _time_first(x: tf.Tensor) -> tf.Tensor:
    return tf.transpose(x, [1, 0, *range(2, x.shape.rank)])


def _scan(graph: Graph, op: Any, args: list[Any], params: dict, ctx: Ctx) -> tf.Tensor:
    body = graph.subgraphs[op.attrs["body"]]
    n_xs, reverse = op.attrs["n_xs"], op.attrs["reverse"]
    xs = [_time_first(tf.cast(x, ctx.compute_dtype)) for x in args[:n_xs]]
    carries = tuple(tf.cast(c, ctx.compute_dtype) for c in args[n_xs:])
    y_dtype = body.ops[body.outputs[0]].type.dtype
    y_dtype = ctx.compute_dtype if y_dtype == "float32" else DTYPES[y_dtype]
    steps = tf.shape(xs[0])[0]
    if ctx.portable:
        return _scan_concat(body, args, xs, carries, params, ctx, y_dtype, reverse)
    ys = tf.TensorArray(y_dtype, size=steps)

    def step(i: tf.Tensor, carry: tuple, ys: tf.TensorArray) -> tuple:
        t = steps - 1 - i if reverse else i
        named = {f"x{k}": x[t] for k, x in enumerate(xs)}
        named |= {f"c{k}": c for k, c in enumerate(carry)}
        outs = _run(body, params, named, ctx)
        new = tuple(tf.cast(o, ctx.compute_dtype) for o in outs[1:])
        return i + 1, new, ys.write(t, tf.cast(outs[0], y_dtype))

    _, _, ys = tf.while_loop(lambda i, c, y: i < steps, step, (tf.constant(0), carries, ys))
    out = _time_first(ys.stack())
    out.set_shape([args[0].shape[0], args[0].shape[1], *out.shape[2:]])
    return out


def _scan_concat(
    body: Graph,
    args: list[Any],
    xs: list[tf.Tensor],
    carries: tuple,
    params: dict,
    ctx: Ctx,
    y_dtype: tf.DType,
    reverse: bool,
) -> tf.Tensor:
    """The scan with its outputs gathered by concatenation: TFLite lowers a TensorArray to
    builtin ops only when its element shape is static, and the batch dim is not."""
    steps = tf.shape(xs[0])[0]
    y_shape = body.ops[body.outputs[0]].type.shape
    eshape = [d if isinstance(d, int) else None for d in y_shape]
    dims = [tf.shape(xs[0])[1] if d is None else d for d in eshape]
    ys0 = tf.zeros([0, *dims], y_dtype)

    def step(i: tf.Tensor, carry: tuple, ys: tf.Tensor) -> tuple:
        t = steps - 1 - i if reverse else i
        named = {f"x{k}": x[t] for k, x in enumerate(xs)}
        named |= {f"c{k}": c for k, c in enumerate(carry)}
        outs = _run(body, params, named, ctx)
        new = tuple(tf.cast(o, ctx.compute_dtype) for o in outs[1:])
        y = tf.cast(outs[0], y_dtype)[None]
        return i + 1, new, tf.concat([y, ys] if reverse else [ys, y], 0)

    invariants = (
        tf.TensorShape([]),
        tuple(c.shape for c in carries),
        tf.TensorShape([None, *eshape]),
    )
    _, _, ys = tf.while_loop(
        lambda i, c, y: i < steps,
        step,
        (tf.constant(0), carries, ys0),
        shape_invariants=invariants,
    )
    out = _time_first(ys)
    out.set_shape([args[0].shape[0], args[0].shape[1], *out.shape[2:]])
    return out
