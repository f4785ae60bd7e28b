"""Token embeddings and position signals."""

from __future__ import annotations

import math

from seqc.compiler.graph import GraphBuilder, Init
from seqc.compiler.lower.call import LayerCall, lowering
from seqc.spec.errors import CheckError


@lowering("Embedding")
def _embedding(b: GraphBuilder, c: LayerCall) -> int:
    c.allow_kwargs()
    ids = c.one_input()
    vocab, d = c.args["vocab"], c.args["d"]
    table = b.param("table", (vocab, d), Init("normal", c.args["init_scale"] / math.sqrt(d)))
    x = b.gather(table, ids)
    pad = c.args.get("padding_id")
    if pad is not None:
        keep = b.cast(
            b.unary("logical_not", b.binary("equal", ids, b.constant(pad, "int32"))), "float32"
        )
        x = b.binary("mul", x, b.reshape(keep, (*b.type(ids).shape, 1)))
    if c.args["scale_output"]:
        x = b.binary("mul", x, b.constant(math.sqrt(d)))
    return x


def _check_width(b: GraphBuilder, c: LayerCall, x: int, d: int) -> None:
    if len(b.type(x).shape) < 3:  # positions need a time axis (a damaged forward can drop it)
        raise CheckError(
            f"`{c.path}` adds positions along time, and its input has no time axis",
            span=c.span,
            code="shape-mismatch",
            expected=f"[B, T, {d}]",
            found=str(b.type(x)),
        )
    if b.type(x).shape[-1] != d:
        raise CheckError(
            f"`{c.path}` adds {d}-wide positions to a {b.type(x).shape[-1]}-wide input",
            span=c.span,
            code="shape-mismatch",
            expected=f"[B, T, {d}]",
            found=str(b.type(x)),
        )


@lowering("SinusoidalPosition")
def _sinusoidal(b: GraphBuilder, c: LayerCall) -> int:
    """x + [sin(t / ts_i), cos(t / ts_i)] with timescales geometric in [min, max] (Vaswani).

    A `sinusoid` op of the positions, not sin and cos ops: each backend computes the signal as
    it needs (a float64 table in training, whatever the compute dtype; a few float32 ops in a
    deployed file), see `seqc.compiler.sinusoid`. No weights, so no checkpoint holds it.
    """
    c.allow_kwargs()
    x = c.one_input()
    d = c.args["d"]
    _check_width(b, c, x, d)
    half = d // 2
    if 2 * half != d:
        raise CheckError("SinusoidalPosition needs an even width", span=c.span, code="bad-width")
    length, max_length = b.type(x).shape[1], c.args["max_length"]
    if isinstance(length, int) and length > max_length:
        raise CheckError(
            f"`{c.path}` covers {max_length} positions, the input has {length}",
            span=c.span,
            code="shape-mismatch",
            hint="raise `max_length`",
        )
    timescales = (float(c.args["min_timescale"]), float(c.args["max_timescale"]))
    signal = b.sinusoid(b.positions(x, axis=1), d, timescales, max_length)  # [T, d]
    return b.binary("add", x, signal)


@lowering("LearnedPosition")
def _learned(b: GraphBuilder, c: LayerCall) -> int:
    c.allow_kwargs()
    x = c.one_input()
    d = c.args["d"]
    _check_width(b, c, x, d)
    table = b.param("table", (c.args["max_length"], d), Init("normal", c.args["init_scale"]))
    return b.binary("add", x, b.gather(table, b.positions(x, axis=1)))
