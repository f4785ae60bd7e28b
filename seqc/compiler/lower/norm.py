"""Normalisation layers."""

from __future__ import annotations

from seqc.compiler.graph import GraphBuilder, Init
from seqc.compiler.lower.call import LayerCall, lowering
from seqc.spec.errors import CheckError


def _norm(b: GraphBuilder, c: LayerCall, rms: bool) -> int:
    c.allow_kwargs()
    x = c.one_input()
    d = c.args["d"]
    if b.type(x).shape[-1] != d:
        raise CheckError(
            f"`{c.path}` normalises width {d}, the input is {b.type(x)}",
            span=c.span,
            code="shape-mismatch",
            expected=f"[..., {d}]",
            found=str(b.type(x)),
        )
    scale = b.param("scale", (d,), Init("ones")) if c.args.get("scale", True) else None
    bias = None
    if not rms and c.args.get("bias", True):
        bias = b.param("bias", (d,), Init("zeros"))
    return b.layer_norm(x, scale, bias, c.args["eps"], rms)


@lowering("LayerNorm")
def _layer_norm(b: GraphBuilder, c: LayerCall) -> int:
    return _norm(b, c, rms=False)


@lowering("RMSNorm")
def _rms_norm(b: GraphBuilder, c: LayerCall) -> int:
    return _norm(b, c, rms=True)
