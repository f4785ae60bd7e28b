"""LSTM and GRU stacks, lowered to a `scan` over time.

The input projection of every time step is one big matmul before the scan; only the recurrent
product (h @ U) runs inside it, which is what makes recurrences fast on every backend. A padding
mask keeps the state unchanged over padded steps, so a backward direction over right-padded
sequences starts at each sequence's real end.
"""

from __future__ import annotations

import math

from seqc.compiler.graph import Graph, GraphBuilder, Init, TensorType
from seqc.compiler.lower.call import LayerCall, lowering
from seqc.spec.errors import CheckError


def _body_param(body: GraphBuilder, main: GraphBuilder, full: str) -> int:
    p = main.graph.params[full]
    body.graph.params[full] = p
    return body.typed_op("param", (), {"name": full}, p.type)


def _keep(body: GraphBuilder, m: int, new: int, old: int) -> int:
    """m * new + (1 - m) * old: the state moves only on real (unpadded) steps."""
    one_minus = body.binary("sub", body.constant(1.0), m)
    return body.binary("add", body.binary("mul", m, new), body.binary("mul", one_minus, old))


def _lstm_body(main: GraphBuilder, u_name: str, hidden: int, batch: object) -> Graph:
    body = GraphBuilder()
    body.layer, body.span = main.layer, main.span
    xg = body.input("x0", TensorType("float32", (batch, 4 * hidden)))
    m = body.input("x1", TensorType("float32", (batch, 1)))
    h = body.input("c0", TensorType("float32", (batch, hidden)))
    c = body.input("c1", TensorType("float32", (batch, hidden)))
    gates = body.binary("add", xg, body.matmul(h, _body_param(body, main, u_name)))
    i, f, g, o = (body.slice(gates, 1, k * hidden, (k + 1) * hidden) for k in range(4))
    c_new = body.binary(
        "add",
        body.binary("mul", body.unary("sigmoid", f), c),
        body.binary("mul", body.unary("sigmoid", i), body.unary("tanh", g)),
    )
    h_new = body.binary("mul", body.unary("sigmoid", o), body.unary("tanh", c_new))
    h_out, c_out = _keep(body, m, h_new, h), _keep(body, m, c_new, c)
    body.graph.outputs = [h_out, h_out, c_out]
    return body.graph


def _gru_body(main: GraphBuilder, u_name: str, bu_name: str, hidden: int, batch: object) -> Graph:
    body = GraphBuilder()
    body.layer, body.span = main.layer, main.span
    xg = body.input("x0", TensorType("float32", (batch, 3 * hidden)))
    m = body.input("x1", TensorType("float32", (batch, 1)))
    h = body.input("c0", TensorType("float32", (batch, hidden)))
    hu = body.binary(
        "add",
        body.matmul(h, _body_param(body, main, u_name)),
        _body_param(body, main, bu_name),
    )
    xr, xz, xn = (body.slice(xg, 1, k * hidden, (k + 1) * hidden) for k in range(3))
    hr, hz, hn = (body.slice(hu, 1, k * hidden, (k + 1) * hidden) for k in range(3))
    r = body.unary("sigmoid", body.binary("add", xr, hr))
    z = body.unary("sigmoid", body.binary("add", xz, hz))
    n = body.unary("tanh", body.binary("add", xn, body.binary("mul", r, hn)))
    one_minus_z = body.binary("sub", body.constant(1.0), z)
    h_new = body.binary("add", body.binary("mul", one_minus_z, n), body.binary("mul", z, h))
    h_out = _keep(body, m, h_new, h)
    body.graph.outputs = [h_out, h_out]
    return body.graph


def _recurrent(b: GraphBuilder, c: LayerCall, cell: str) -> int:
    c.allow_kwargs("mask")
    x = c.one_input()
    d_in, hidden = c.args["d_in"], c.args["d_hidden"]
    tx = b.type(x)
    if tx.rank != 3 or tx.shape[-1] != d_in:
        raise CheckError(
            f"`{c.path}` ({cell}) expects [B, T, {d_in}]",
            span=c.span,
            code="shape-mismatch",
            expected=f"[B, T, {d_in}]",
            found=str(tx),
        )
    batch, time = tx.shape[0], tx.shape[1]
    if "mask" in c.kwargs:
        m = b.reshape(b.cast(c.kwargs["mask"], "float32"), (batch, time, 1))
    else:
        m = b.fill(1.0, (batch, time, 1))
    gates = 4 if cell == "LSTM" else 3
    directions = ("fw", "bw") if c.args["bidirectional"] else ("fw",)
    scale = 1.0 / math.sqrt(hidden)
    width = d_in
    for layer in range(c.args["layers"]):
        outs = []
        for direction in directions:
            name = f"l{layer}.{direction}"
            w = b.param(f"{name}.w", (width, gates * hidden), Init("uniform", scale))
            bias = b.param(f"{name}.b", (gates * hidden,), Init("zeros"))
            u_name = f"{b.layer}.{name}.u" if b.layer else f"{name}.u"
            b.param(f"{name}.u", (hidden, gates * hidden), Init("uniform", scale))
            xg = b.binary("add", b.matmul(x, w), bias)
            h0 = b.fill(0.0, (batch, hidden))
            if cell == "LSTM":
                body = _lstm_body(b, u_name, hidden, batch)
                carries = [h0, b.fill(0.0, (batch, hidden))]
            else:
                bu = f"{b.layer}.{name}.bu" if b.layer else f"{name}.bu"
                b.param(f"{name}.bu", (gates * hidden,), Init("zeros"))
                body = _gru_body(b, u_name, bu, hidden, batch)
                carries = [h0]
            outs.append(b.scan(u_name[: -len(".u")], body, [xg, m], carries, direction == "bw"))
        x = outs[0] if len(outs) == 1 else b.concat(outs, axis=-1)
        width = hidden * len(directions)
        if layer < c.args["layers"] - 1:
            x = b.dropout(x, c.args.get("dropout", 0.0))
    return x


@lowering("LSTM")
def _lstm(b: GraphBuilder, c: LayerCall) -> int:
    return _recurrent(b, c, "LSTM")


@lowering("GRU")
def _gru(b: GraphBuilder, c: LayerCall) -> int:
    return _recurrent(b, c, "GRU")
