"""The TF backend's `scan`: a recurrence's body graph run once per time step in a `tf.while_loop`.

Each step's output is written at its own index, so a reversed scan returns its outputs in input
order, as `jax.lax.scan(reverse=True)` does. Training writes the outputs into a `TensorArray`;
a portable graph (`Ctx.portable`, for TFLite) gathers them by concatenation instead, because
TFLite lowers a TensorArray to builtin ops only when its element shape is static, and the batch
dim is not.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from seqc.backends import interpret
from seqc.backends.tf.context import DTYPES, Ctx
from seqc.compiler.graph import Graph, Op


def _time_first(x: tf.Tensor) -> tf.Tensor:
    return tf.transpose(x, [1, 0, *range(2, x.shape.rank)])


def scan(
    machine: interpret.Machine, graph: Graph, op: Op, args: list[Any], params: Any, ctx: Ctx
) -> tf.Tensor:
    body = graph.subgraphs[op.attrs["body"]]
    n_xs, reverse = op.attrs["n_xs"], op.attrs["reverse"]
    xs = [_time_first(tf.cast(x, ctx.compute_dtype)) for x in args[:n_xs]]
    carries = tuple(tf.cast(c, ctx.compute_dtype) for c in args[n_xs:])
    y_dtype = body.ops[body.outputs[0]].type.dtype
    y_dtype = ctx.compute_dtype if y_dtype == "float32" else DTYPES[y_dtype]
    steps = tf.shape(xs[0])[0]

    def run_step(i: tf.Tensor, carry: tuple) -> tuple[tf.Tensor, tuple, tf.Tensor]:
        t = steps - 1 - i if reverse else i
        named = {f"x{k}": x[t] for k, x in enumerate(xs)}
        named |= {f"c{k}": c for k, c in enumerate(carry)}
        outs = interpret.evaluate(machine, body, params, named, ctx)
        new = tuple(tf.cast(o, ctx.compute_dtype) for o in outs[1:])
        return t, new, tf.cast(outs[0], y_dtype)

    if ctx.portable:
        out = _concatenated(body, xs, carries, y_dtype, reverse, run_step)
    else:
        ys = tf.TensorArray(y_dtype, size=steps)

        def step(i: tf.Tensor, carry: tuple, ys: tf.TensorArray) -> tuple:
            t, new, y = run_step(i, carry)
            return i + 1, new, ys.write(t, y)

        _, _, ys = tf.while_loop(lambda i, c, y: i < steps, step, (tf.constant(0), carries, ys))
        out = _time_first(ys.stack())
    out.set_shape([args[0].shape[0], args[0].shape[1], *out.shape[2:]])
    return out


def _concatenated(
    body: Graph,
    xs: list[tf.Tensor],
    carries: tuple,
    y_dtype: tf.DType,
    reverse: bool,
    run_step: Any,
) -> tf.Tensor:
    """The scan with its outputs gathered by concatenation (TFLite's builtin ops only)."""
    steps = tf.shape(xs[0])[0]
    y_shape = body.ops[body.outputs[0]].type.shape
    eshape = [d if isinstance(d, int) else None for d in y_shape]
    dims = [tf.shape(xs[0])[1] if d is None else d for d in eshape]
    ys0 = tf.zeros([0, *dims], y_dtype)

    def step(i: tf.Tensor, carry: tuple, ys: tf.Tensor) -> tuple:
        _, new, y = run_step(i, carry)
        return i + 1, new, tf.concat([y[None], ys] if reverse else [ys, y[None]], 0)

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
    return _time_first(ys)
