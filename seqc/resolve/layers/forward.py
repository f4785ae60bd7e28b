"""Checking a layer's `forward`: its tensor types, the names its body uses, and its return.

A forward body is a small dataflow program over its inputs, the names it assigns and the
layer's sub-layers; anything else (an attribute, a map, a call of something that is not a
sub-layer) is refused here, at its line, so lowering only meets bodies it can translate.
"""

from __future__ import annotations

from seqc.resolve.layers.infer import children, expr_text
from seqc.spec import ir
from seqc.spec.errors import CheckError, did_you_mean
from seqc.spec.kinds import REGISTRY
from seqc.spec.types import DTYPES, INT, Type

MASK_METHOD = "mask"
"""`layer.mask(m)`: a padding mask at the rate of the layer's output (a layer that changes the
time axis' rate, such as `LogMelFilterbank`, says how)."""


def _check_tensor_type(t: ir.TypeExpr, scope: dict[str, Type]) -> None:
    if t.name not in DTYPES:
        raise CheckError(
            f"unknown dtype `{t.name}`",
            span=t.span,
            code="unknown-dtype",
            expected=", ".join(DTYPES),
            found=f"`{t.name}`",
            suggestion=did_you_mean(t.name, DTYPES),
        )
    for dim in t.args or ():
        _check_dim(dim, scope)


def _check_dim(dim: ir.Expr, scope: dict[str, Type]) -> None:
    """A dim is a symbolic name (`B`), an int param, a whole number, or arithmetic on those."""
    if isinstance(dim, ir.TypeExpr):
        if dim.args is not None:
            raise CheckError("a dim cannot have brackets", span=dim.span, code="bad-dim")
        if dim.name in scope and scope[dim.name] != INT:
            raise CheckError(
                f"dim `{dim.name}` names a param of type {scope[dim.name]}",
                span=dim.span,
                code="bad-dim",
                expected="an int param or a symbolic dim",
            )
        return
    if isinstance(dim, ir.Number):
        if not isinstance(dim.value, int) or dim.value < 1:
            raise CheckError(
                "a dim is a positive whole number",
                span=dim.span,
                code="bad-dim",
                found=dim.text,
            )
        return
    if isinstance(dim, ir.BinOp):
        _check_dim(dim.left, scope)
        _check_dim(dim.right, scope)
        return
    raise CheckError("not a dim", span=dim.span, code="bad-dim")


def check_forward(decl: ir.LayerDecl, fwd: ir.Forward, scope: dict[str, Type]) -> None:
    """Check the forward of `decl`: its types, each name its body uses, and its return."""
    values: dict[str, str] = {}  # names bound to tensors in the forward body
    sublayers = {s.name for s in decl.sublayers}
    for p in fwd.params:
        _check_tensor_type(p.type, scope)
        if p.name in values or p.name in sublayers:
            raise CheckError(
                f"forward input `{p.name}` is already a name in `{decl.name}`",
                span=p.span,
                code="duplicate-name",
            )
        values[p.name] = "input"
    for t in fwd.returns:
        _check_tensor_type(t, scope)
    returned: ir.Return | None = None
    for stmt in fwd.body:
        if returned is not None:
            raise CheckError(
                "statement after `return` is never run",
                span=stmt.span,
                code="unreachable",
            )
        exprs = [stmt.value] if isinstance(stmt, ir.Let) else list(stmt.values)
        for e in exprs:
            _check_forward_expr(e, decl, values, scope, sublayers)
        if isinstance(stmt, ir.Let):
            if stmt.name in sublayers:
                raise CheckError(
                    f"`{stmt.name}` is a sub-layer; it cannot be reassigned",
                    span=stmt.span,
                    code="duplicate-name",
                )
            values[stmt.name] = "let"
        else:
            returned = stmt
    if returned is None:
        raise CheckError(
            f"the forward of `{decl.name}` does not return",
            span=fwd.span,
            code="missing-return",
            hint="end the body with `return <expr>`",
        )
    if fwd.returns and len(fwd.returns) != len(returned.values):
        raise CheckError(
            f"`{decl.name}` declares {len(fwd.returns)} output(s) but returns "
            f"{len(returned.values)}",
            span=returned.span,
            code="return-count",
        )


def _check_forward_expr(
    e: ir.Expr,
    decl: ir.LayerDecl,
    values: dict[str, str],
    scope: dict[str, Type],
    sublayers: set[str],
) -> None:
    if isinstance(e, ir.Name):
        if e.id in values or e.id in scope:
            return
        if e.id in sublayers:
            raise CheckError(
                f"`{e.id}` is a layer; call it",
                span=e.span,
                code="not-a-value",
                hint=f"write `{e.id}(...)`",
            )
        raise CheckError(
            f"unknown name `{e.id}`",
            span=e.span,
            code="unknown-name",
            expected="a forward input, a name assigned above, or a param",
            found=f"`{e.id}`",
            suggestion=did_you_mean(e.id, [*values, *scope]),
        )
    if isinstance(e, ir.Call):
        func = e.func
        if (
            isinstance(func, ir.Attr)
            and func.name == MASK_METHOD
            and isinstance(func.obj, ir.Name)
            and func.obj.id in sublayers
        ):  # `frontend.mask(m)`: whether the kind has one is checked when it is lowered
            for a in [*e.args, *(k.value for k in e.kwargs)]:
                _check_forward_expr(a, decl, values, scope, sublayers)
            return
        if not isinstance(func, ir.Name) or func.id not in sublayers:
            fname = func.id if isinstance(func, ir.Name) else expr_text(func)
            hint = None
            if isinstance(func, ir.Name) and REGISTRY.get("layer", func.id) is not None:
                hint = f"declare it first, e.g. `{func.id.lower()} = {func.id}(...)`"
            elif isinstance(func, ir.Name) and (func.id in values or func.id in scope):
                hint = f"`{func.id}` is a value, not a layer; only sub-layers are called"
            raise CheckError(
                f"`{fname}` is not a sub-layer of `{decl.name}`",
                span=func.span,
                code="not-a-layer",
                expected=f"one of {', '.join(sorted(sublayers))}" if sublayers else None,
                found=f"`{fname}`",
                suggestion=did_you_mean(fname, sublayers),
                hint=hint,
            )
        for a in [*e.args, *(k.value for k in e.kwargs)]:
            _check_forward_expr(a, decl, values, scope, sublayers)
        return
    if isinstance(e, ir.Attr | ir.MapExpr | ir.Replicate | ir.TypeExpr):
        raise CheckError(
            "not allowed in a forward body",
            span=e.span,
            code="bad-forward",
            expected="names, sub-layer calls, numbers and arithmetic",
        )
    for child in children(e):
        _check_forward_expr(child, decl, values, scope, sublayers)
