"""A user layer bound as a kind: its params' declared types, and a call of it bound to values.

A user layer (or model) is called with the same syntax as a built-in layer, so it is read as a
`KindSpec` (`layer_kind_spec`) and its calls bind as built-in calls do, with one difference: a
default may use the params before it (`ff: int = 4 * d`), so defaults stay expressions until a
call binds them. Binding also records where each param's value was set (`Spans`), so a range or
relation that fails deeper in the instance tree points at the line that set the value.
"""

from __future__ import annotations

import math
from typing import Any

from seqc.resolve.arguments import match_arguments, missing_param
from seqc.resolve.conform import Context, conform
from seqc.resolve.raw import Raw, evaluate, from_python
from seqc.resolve.values import CallValue
from seqc.spec import ir
from seqc.spec.errors import CheckError, Note, did_you_mean
from seqc.spec.kinds import REQUIRED, KindSpec, ParamSpec
from seqc.spec.types import DTYPES, SCALARS, Range, Type, parse_type

Spans = dict[str, ir.Span | None]
"""Param name -> the span of the line that set its value (an argument, a default, an override)."""


def param_type(t: ir.TypeExpr) -> Type:
    """The Type a user wrote for a param (`int`, `list[float]`); an error for tensor types."""
    from seqc.spec.printer import format_type

    text = format_type(t)
    parsed = parse_type(text)
    if parsed is not None:
        return parsed
    known = [*SCALARS, "list", "map"]
    if t.name in DTYPES:
        raise CheckError(
            "a tensor type is not a param type",
            span=t.span,
            code="unknown-type",
            expected=", ".join(known),
            found=text,
            hint="tensor types belong in `forward (x: float32[B, T, d])`",
        )
    raise CheckError(
        f"unknown type `{text}`",
        span=t.span,
        code="unknown-type",
        expected=", ".join(known) + " (with [..] for list and map)",
        found=f"`{text}`",
        suggestion=did_you_mean(t.name, known),
    )


def declared_type(p: ir.Param) -> Type:
    """The type of a user param with the range written after it (`d: int > 0`), if any."""
    t = param_type(p.type)
    r = p.range
    if r is None:
        return t
    if t.name not in ("int", "float"):
        raise CheckError(
            "a range applies to an int or float param",
            span=r.span,
            code="bad-range",
            found=f"`{p.name}: {t}`",
            hint="drop the range, or make the param an int or a float",
        )
    for bound in (r.low, r.high):
        if bound is not None and not math.isfinite(bound.value):
            raise CheckError(
                "a range bound is a finite number",
                span=bound.span,
                code="bad-range",
                found=bound.text,
            )
    range_ = Range(
        low=r.low.value if r.low is not None else None,
        high=r.high.value if r.high is not None else None,
        low_open=r.low_open,
        high_open=r.high_open,
    )
    if range_.empty:
        raise CheckError(
            f"the range `{range_}` of `{p.name}` holds no value",
            span=r.span,
            code="bad-range",
            hint="write the low bound first: `in [low, high]`",
        )
    return t.within(range_)


def layer_kind_spec(decl: ir.LayerDecl) -> KindSpec:
    """A user layer as a kind; defaults are bound by `bind_user_layer`, so they stay exprs."""
    params = tuple(
        ParamSpec(p.name, declared_type(p), REQUIRED if p.default is None else p.default, p.doc)
        for p in decl.params
    )
    return KindSpec(decl.name, "layer", decl.doc or "", params, tuple(p.name for p in params))


def bind_user_layer(
    decl: ir.LayerDecl,
    args: list[Raw],
    kwargs: dict[str, tuple[Raw, ir.Span | None]],
    span: ir.Span | None,
    ctx: Context,
) -> CallValue:
    """Bind a call of a user layer; a default may use the params before it (`ff: int = 4 * d`)."""
    return bind_user_layer_spans(decl, args, kwargs, span, ctx)[0]


def bind_user_layer_spans(
    decl: ir.LayerDecl,
    args: list[Raw],
    kwargs: dict[str, tuple[Raw, ir.Span | None]],
    span: ir.Span | None,
    ctx: Context,
) -> tuple[CallValue, Spans]:
    """`bind_user_layer`, and where each param's value was set (for `instantiate`)."""
    spec = layer_kind_spec(decl)
    notes = [Note(decl.span, f"`{decl.name}` is declared here")] if decl.span else []
    given = match_arguments(
        decl.name,
        spec.positional,
        spec.param_names,
        [(a, a.span) for a in args],
        [(k, raw, kspan) for k, (raw, kspan) in kwargs.items()],
        notes,
    )
    out: dict[str, Any] = {}
    spans: Spans = {}
    for p, ps in zip(decl.params, spec.params, strict=True):
        if p.name in given:
            raw = given[p.name]
        elif p.default is not None:
            raw = evaluate(p.default, env_lookup(out, spans))
        else:
            raise missing_param(decl.name, p.name, str(ps.type), p.doc, span)
        out[p.name] = conform(raw, ps.type, ctx, f"`{decl.name}.{p.name}`")
        spans[p.name] = raw.span
    return CallValue(kind=decl.name, namespace="layer", args=out), spans


def env_lookup(env: dict[str, Any], spans: Spans | None = None) -> Any:
    """Names of params as their values; a bare name keeps the span of the line that set it."""

    def lookup(expr: ir.Expr) -> Raw | None:
        if isinstance(expr, ir.Name) and expr.id in env:
            return from_python(env[expr.id], (spans or {}).get(expr.id) or expr.span)
        return None

    return lookup


def layer_context(layers: dict[str, ir.LayerDecl], names: dict[str, Any] | None = None) -> Context:
    """A conform context in which user layers bind like built-in kinds."""

    def binder(
        name: str,
        args: list[Raw],
        kwargs: dict[str, tuple[Raw, ir.Span | None]],
        span: ir.Span | None,
        ctx: Context,
    ) -> CallValue | None:
        return bind_user_layer(layers[name], args, kwargs, span, ctx) if name in layers else None

    return Context(names=dict(names or {}), user_layers=tuple(layers), user_binder=binder)
