"""Checking user layer declarations on their own, before any experiment uses them.

`check_layer` checks one declaration: param types and defaults, every sub-layer call against the
catalogue or another user layer, the names a forward body uses (`seqc.resolve.layers.forward`),
and the return. Argument types are checked statically from the declared param types
(`seqc.resolve.layers.infer`), so an error is reported once, at the line that wrote it, not once
per instantiation. `check_layers` checks every layer of a program, then how they contain each
other (`seqc.resolve.layers.nesting`), before anything is instantiated.
"""

from __future__ import annotations

from typing import Any

from seqc.resolve.arguments import match_arguments, missing_param
from seqc.resolve.conform import Context, check_relations, conform
from seqc.resolve.layers.binding import declared_type, layer_kind_spec
from seqc.resolve.layers.forward import check_forward
from seqc.resolve.layers.infer import check_arg, expr_text, has_names
from seqc.resolve.layers.instance import repeat_count
from seqc.resolve.layers.nesting import check_layer_cycles
from seqc.resolve.raw import evaluate, from_python
from seqc.resolve.values import Symbol
from seqc.spec import ir
from seqc.spec.errors import CheckError, Note, did_you_mean
from seqc.spec.kinds import REGISTRY, KindSpec, ParamSpec
from seqc.spec.types import INT, LAYER, Type


def check_layers(program: Any) -> None:
    """Check every user layer of a program once (a cycle would make instantiation recurse)."""
    if getattr(program, "layers_checked", False):
        return
    uses = {name: check_layer(decl, program.layers) for name, decl in program.layers.items()}
    check_layer_cycles(uses, program.layers)
    program.layers_checked = True


def _call_target(
    call: ir.Call, layers: dict[str, ir.LayerDecl]
) -> tuple[str, list[ParamSpec], tuple[str, ...], ir.LayerDecl | None]:
    if not isinstance(call.func, ir.Name):
        raise CheckError("a layer kind is a plain name", span=call.func.span, code="unknown-kind")
    name = call.func.id
    builtin = REGISTRY.get("layer", name)
    if builtin is not None:
        return name, list(builtin.params), builtin.positional, None
    if name in layers:
        spec = layer_kind_spec(layers[name])
        return name, list(spec.params), spec.positional, layers[name]
    candidates = REGISTRY.names("layer") + sorted(layers)
    raise CheckError(
        f"unknown layer kind `{name}`",
        span=call.func.span,
        code="unknown-kind",
        found=f"`{name}`",
        suggestion=did_you_mean(name, candidates),
        hint="`seqc layers` lists the built-in layers",
    )


def check_call(call: ir.Call, layers: dict[str, ir.LayerDecl], scope: dict[str, Type]) -> str:
    """Check one sub-layer call statically; returns the kind's name."""
    name, params, positional, user = _call_target(call, layers)
    notes = [Note(user.span, f"`{name}` is declared here")] if user and user.span else []
    given = match_arguments(
        name,
        positional,
        [p.name for p in params],
        [(a, a.span) for a in call.args],
        [(k.name, k.value, k.span) for k in call.kwargs],
        notes,
    )
    for p in params:
        if p.name in given:
            check_arg(given[p.name], p, name, scope)
        elif p.required:
            raise missing_param(name, p.name, str(p.type), p.doc, call.span, notes)
    builtin = REGISTRY.get("layer", name)
    if builtin is not None and builtin.relations:
        _check_literal_relations(builtin, given, call.span)
    return name


def _check_literal_relations(
    spec: KindSpec, given: dict[str, ir.Expr], span: ir.Span | None
) -> None:
    """A built-in layer's relations, where the call writes its values as literals
    (`SelfAttention(256, 3)`): caught in the declaration, whether or not a model uses it.
    Values that depend on params are checked when the layer is instantiated."""
    values: dict[str, Any] = {}
    for p in spec.params:
        expr = given.get(p.name)
        if expr is None:
            values[p.name] = (
                None if p.required else conform(from_python(p.default), p.type, Context())
            )
        elif has_names(expr):
            values[p.name] = Symbol(ref=expr_text(expr))  # known per instance: skipped here
        else:
            values[p.name] = conform(evaluate(expr), p.type, Context())
    check_relations(spec, values, {k: e.span for k, e in given.items()}, span)


def check_layer(decl: ir.LayerDecl, layers: dict[str, ir.LayerDecl]) -> list[str]:
    """Check a declaration; returns the user layers it uses (for cycle detection)."""
    scope: dict[str, Type] = {}
    seen: dict[str, ir.Span | None] = {}
    for p in decl.params:
        if p.name in seen:
            raise CheckError(
                f"param `{p.name}` is declared twice",
                span=p.span,
                code="duplicate-param",
                notes=[Note(seen[p.name], "first declared here")] if seen[p.name] else [],
            )
        seen[p.name] = p.span
        t = declared_type(p)
        if p.default is not None:
            check_arg(p.default, ParamSpec(p.name, t), decl.name, scope)
        scope[p.name] = t
    for sub in decl.sublayers:
        if sub.name in seen:
            raise CheckError(
                f"`{sub.name}` is already declared in `{decl.name}`",
                span=sub.span,
                code="duplicate-sublayer",
                notes=[Note(seen[sub.name], "first declared here")] if seen[sub.name] else [],
            )
        seen[sub.name] = sub.span
    uses: list[str] = []
    for sub in decl.sublayers:
        # Arguments see the params and the sibling layers (`Softmax(vocab, d, tie = embed)`).
        siblings = {s.name: LAYER for s in decl.sublayers if s.name != sub.name}
        if sub.repeat is not None:
            check_arg(sub.repeat, ParamSpec("repeat", INT), "repeat", scope)
            if not has_names(sub.repeat):
                repeat_count(evaluate(sub.repeat), sub.name)
        kind = check_call(sub.call, layers, {**scope, **siblings})
        if kind in layers:
            uses.append(kind)
    if decl.forward is None:
        raise CheckError(
            f"{decl.kind} `{decl.name}` has no `forward`",
            span=decl.span,
            code="missing-forward",
            hint="add `forward (x: float32[B, T, d]) -> float32[B, T, d] { return ... }`",
        )
    check_forward(decl, decl.forward, scope)
    return uses
