"""User layers and models: checking their declarations and instantiating them.

`check_layer` checks a declaration on its own, before any experiment uses it: param types and
defaults, every sub-layer call against the catalogue or another user layer, the names a forward
body uses, and the return. Argument types are checked statically from the declared param types,
so an error is reported once, at the line that wrote it, not once per instantiation.

`instantiate` builds the tree of layer instances for concrete param values (`blocks.3.attn`),
which later passes lower to the op graph. It is also where ranges and relations of built-in
layers meet values that flowed in through params (`SelfAttention(d, heads)` inside a block), so
it carries, for each param, the span of the line that set its value: an error such as
`d % heads == 0` points at `lm.model.heads = 3`, not at the block that passed `heads` along.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict

from seqc.resolve.arguments import match_arguments, missing_param
from seqc.resolve.values import (
    CallValue,
    Context,
    Raw,
    RawCall,
    Symbol,
    check_relations,
    conform,
    evaluate,
    from_python,
    span_within,
)
from seqc.spec import ir
from seqc.spec.errors import CheckError, Note, did_you_mean
from seqc.spec.kinds import REGISTRY, REQUIRED, KindSpec, ParamSpec
from seqc.spec.types import DTYPES, FLOAT, INT, LAYER, SCALARS, Range, Type, parse_type

MAX_REPEAT = 10_000
"""Most copies `repeat(n)` makes: more would stall instantiation long before a backend runs."""

MAX_INSTANCES = 200_000
"""Most layers a `repeat` may instantiate, nested repeats multiplied: `repeat(10000)` of a layer
holding `repeat(100)` would spend minutes building a million instances before lowering could
refuse the graph (`compiler.graph.MAX_GRAPH_OPS`)."""

Spans = dict[str, ir.Span | None]
"""Param name -> the span of the line that set its value (an argument, a default, an override)."""

MASK_METHOD = "mask"
"""`layer.mask(m)`: a padding mask at the rate of the layer's output (a layer that changes the
time axis' rate, such as `LogMelFilterbank`, says how)."""


class LayerInstance(BaseModel):
    """One layer in a model's tree, with its params evaluated; `children` for user layers."""

    model_config = ConfigDict(frozen=True)

    path: str
    kind: str
    builtin: bool
    args: dict[str, Any]
    repeat: int | None = None
    children: tuple[LayerInstance, ...] = ()
    span: ir.Span | None = None


# ------------------------------------------------------------------------------------ types


def param_type(t: ir.TypeExpr) -> Type:
    """The Type a user wrote for a param (`int`, `list[float]`); an error for tensor types."""
    from seqc.spec.printer import _type

    text = _type(t)
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
            raw = evaluate(p.default, _env_lookup(out, spans))
        else:
            raise missing_param(decl.name, p.name, str(ps.type), p.doc, span)
        out[p.name] = conform(raw, ps.type, ctx, f"`{decl.name}.{p.name}`")
        spans[p.name] = raw.span
    return CallValue(kind=decl.name, namespace="layer", args=out), spans


def _env_lookup(env: dict[str, Any], spans: Spans | None = None) -> Any:
    """Names of params as their values; a bare name keeps the span of the line that set it."""

    def lookup(expr: ir.Expr) -> Raw | None:
        if isinstance(expr, ir.Name) and expr.id in env:
            value = env[expr.id]
            return Raw(value, (spans or {}).get(expr.id) or expr.span)
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


# ------------------------------------------------------------------------------------ static check


def _infer(expr: ir.Expr, scope: dict[str, Type]) -> Type:
    """The static type of a layer-body expression over its params (no values known yet)."""
    if isinstance(expr, ir.Number):
        return INT if isinstance(expr.value, int) else FLOAT
    if isinstance(expr, ir.String):
        return SCALARS["str"]
    if isinstance(expr, ir.Bool):
        return SCALARS["bool"]
    if isinstance(expr, ir.NoneLit):
        return Type("none")
    if isinstance(expr, ir.Name):
        if expr.id in scope:
            return scope[expr.id]
        raise CheckError(
            f"unknown name `{expr.id}`",
            span=expr.span,
            code="unknown-name",
            expected="a param of this layer or the name of a sub-layer",
            found=f"`{expr.id}`",
            suggestion=did_you_mean(expr.id, scope),
        )
    if isinstance(expr, ir.Neg):
        return _numeric(expr.operand, scope)
    if isinstance(expr, ir.BinOp):
        left, right = _numeric(expr.left, scope), _numeric(expr.right, scope)
        if expr.op == "/" or FLOAT in (left, right):
            return FLOAT
        return INT
    if isinstance(expr, ir.ListExpr):
        items = [_infer(i, scope) for i in expr.items]
        same = bool(items) and all(i == items[0] for i in items)
        return Type("list", (items[0] if same else SCALARS["any"],))
    raise CheckError(
        "only params, literals and arithmetic may appear here",
        span=expr.span,
        code="wrong-type",
        found=type(expr).__name__.lower(),
    )


def _numeric(expr: ir.Expr, scope: dict[str, Type]) -> Type:
    t = _infer(expr, scope)
    if t not in (INT, FLOAT):
        raise CheckError(
            "arithmetic needs numbers",
            span=expr.span,
            code="wrong-type",
            expected="an int or a float",
            found=str(t),
        )
    return t


def _assignable(src: Type, dst: Type) -> bool:
    if dst.name == "any" or src.name == "any" or src == dst:
        return True
    if dst.name == "union":
        return any(_assignable(src, alt) for alt in dst.args)
    if src == INT and dst == FLOAT:
        return True
    if src.name == "str" and dst.name in ("enum", "size", "dtype"):
        return True
    if src == INT and dst.name == "size":
        return True
    if src.name == "list" and dst.name == "list":
        return _assignable(src.args[0], dst.args[0])
    return False


def _has_names(expr: ir.Expr) -> bool:
    if isinstance(expr, ir.Name):
        return True
    return any(_has_names(v) for v in _children(expr))


def _children(expr: ir.Expr) -> list[ir.Expr]:
    if isinstance(expr, ir.BinOp):
        return [expr.left, expr.right]
    if isinstance(expr, ir.Neg):
        return [expr.operand]
    if isinstance(expr, ir.ListExpr):
        return list(expr.items)
    if isinstance(expr, ir.MapExpr):
        return [e.value for e in expr.entries]
    if isinstance(expr, ir.Call):
        return [*expr.args, *(k.value for k in expr.kwargs)]
    if isinstance(expr, ir.Attr):
        return [expr.obj]
    return []


def _check_arg(expr: ir.Expr, target: ParamSpec, owner: str, scope: dict[str, Type]) -> None:
    what = f"`{owner}.{target.name}`"
    takes_layer = target.type == LAYER or (
        target.type.name == "union" and LAYER in target.type.args
    )
    if takes_layer and isinstance(expr, ir.Name) and scope.get(expr.id) == LAYER:
        return
    if isinstance(expr, ir.Call):
        raise CheckError(
            "a call is not allowed as an argument here",
            span=expr.span,
            code="not-callable",
            hint="declare it as a sub-layer and pass its name",
        )
    # A bare word is a choice where one is expected (`activation = gelu`), as in any block.
    bare_word = isinstance(expr, ir.Name) and expr.id not in scope and _takes_word(target.type)
    if not _has_names(expr) or bare_word:
        conform(evaluate(expr), target.type, Context(), what)
        return
    src = _infer(expr, scope)
    if not _assignable(src, target.type):
        raise CheckError(
            f"{what} has the wrong type",
            span=expr.span,
            code="wrong-type",
            expected=str(target.type),
            found=f"{src} (from `{_text(expr)}`)",
        )


def _takes_word(t: Type) -> bool:
    if t.name == "union":
        return any(_takes_word(a) for a in t.args)
    return t.name in ("enum", "dtype")


def _text(expr: ir.Expr) -> str:
    from seqc.spec.printer import _flat

    return _flat(expr)


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
            _check_arg(given[p.name], p, name, scope)
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
        elif _has_names(expr):
            values[p.name] = Symbol(ref=_text(expr))  # known per instance: skipped here
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
            _check_arg(p.default, ParamSpec(p.name, t), decl.name, scope)
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
            _check_arg(sub.repeat, ParamSpec("repeat", INT), "repeat", scope)
            if not _has_names(sub.repeat):
                _repeat_count(evaluate(sub.repeat), sub.name)
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
    _check_forward(decl, decl.forward, scope)
    return uses


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


def _check_forward(decl: ir.LayerDecl, fwd: ir.Forward, scope: dict[str, Type]) -> None:
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
            fname = func.id if isinstance(func, ir.Name) else _text(func)
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
    for child in _children(e):
        _check_forward_expr(child, decl, values, scope, sublayers)


def check_layer_cycles(uses: dict[str, list[str]], layers: dict[str, ir.LayerDecl]) -> None:
    """A layer may not contain itself, directly or through others; nor contain user layers more
    than `MAX_LAYER_DEPTH` deep. A walk with its own stack: a chain of thousands of layers is
    an error at its line, not a RecursionError."""
    state: dict[str, int] = {}  # 1: on the path being walked, 2: done
    depth: dict[str, int] = {}  # user layers nested in a layer, itself included
    for root in uses:
        if root in state:
            continue
        state[root] = 1
        path, pending = [root], [iter(uses.get(root, []))]
        while pending:
            dep = next(pending[-1], None)
            if dep is None:
                name = path.pop()
                pending.pop()
                state[name] = 2
                depth[name] = 1 + max((depth.get(d, 0) for d in uses.get(name, [])), default=0)
                continue
            if state.get(dep) == 1:
                chain = [*path[path.index(dep) :], dep]
                raise CheckError(
                    f"layer `{dep}` contains itself",
                    span=layers[dep].span,
                    code="layer-cycle",
                    found=" -> ".join(chain),
                )
            if state.get(dep) is None:
                state[dep] = 1
                path.append(dep)
                pending.append(iter(uses.get(dep, [])))
    deepest = max(depth, key=lambda name: depth[name], default=None)  # contained by none
    if deepest is not None and depth[deepest] > MAX_LAYER_DEPTH:
        raise _too_deep(deepest, uses, depth, layers)


MAX_LAYER_DEPTH = 100
"""How deeply user layers may contain each other (README, "Trust and limits"): instantiation and
lowering recurse a few Python frames per level, and 100 levels leave them room under Python's
limit of 1,000 frames, as `MAX_NESTING` does for syntax. Real models nest a handful deep."""


def _too_deep(
    top: str, uses: dict[str, list[str]], depth: dict[str, int], layers: dict[str, ir.LayerDecl]
) -> CheckError:
    """The error at the sub-layer call one level past the limit, on a deepest chain from `top`
    (the outermost layer), as the parser reports syntax nested too deeply."""
    chain = [top]
    while len(chain) <= MAX_LAYER_DEPTH:
        chain.append(max(uses.get(chain[-1], []), key=lambda d: depth.get(d, 0)))
    outer, inner = layers[chain[-2]], chain[-1]
    call = next(
        (
            s
            for s in outer.sublayers
            if isinstance(s.call.func, ir.Name) and s.call.func.id == inner
        ),
        None,
    )
    return CheckError(
        f"user layers nest more than {MAX_LAYER_DEPTH} deep here",
        span=call.span if call is not None else outer.span,
        code="too-deep",
        expected=f"at most {MAX_LAYER_DEPTH} user layers, each inside the one before",
        found=f"{top} -> {chain[1]} -> ... -> {chain[-2]} -> {inner}",
        hint="for a stack of identical layers use `repeat(n)`, which adds no depth",
    )


def check_layers(program: Any) -> None:
    """Check every user layer of a program once (a cycle would make instantiation recurse)."""
    if getattr(program, "layers_checked", False):
        return
    uses = {name: check_layer(decl, program.layers) for name, decl in program.layers.items()}
    check_layer_cycles(uses, program.layers)
    program.layers_checked = True


# ------------------------------------------------------------------------------------ instances


def instantiate(
    decl: ir.LayerDecl,
    args: dict[str, Any],
    layers: dict[str, ir.LayerDecl],
    path: str,
    span: ir.Span | None = None,
    cache: dict[Any, LayerInstance] | None = None,
    spans: Spans | None = None,
) -> LayerInstance:
    """The instance tree of `decl` called with `args` (already bound and type-checked).

    `spans`: where each arg's value was set (`bind_user_layer_spans`), so a range or relation
    that fails inside the tree points at that line. With a `cache`, a subtree built before for
    the same layer, path, call site and arguments is reused: experiments of one registry mostly
    share their models, and instances are frozen (a subtree only enters the cache once checked).
    """
    key = (decl.name, path, span, repr(sorted(args.items())))
    if cache is not None and key in cache:
        return cache[key]
    made = _instantiate(decl, args, layers, path, span, cache, spans or {})
    if cache is not None:
        cache[key] = made
    return made


def _repeat_count(raw: Raw, where: str) -> int:
    """The n of `repeat(n)`: a whole number in [1, MAX_REPEAT], else an error at its value."""
    v = raw.value
    if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= MAX_REPEAT:
        raise CheckError(
            f"repeat count of `{where}` must be a whole number from 1 to {MAX_REPEAT:,}",
            span=raw.span,
            code="bad-count",
            expected=f"an int in [1, {MAX_REPEAT}]",
            found=raw.describe(),
        )
    return v


def _instances(inst: LayerInstance) -> int:
    return 1 + sum(_instances(c) for c in inst.children)


def _check_instances(first: LayerInstance, count: int, repeat: ir.Expr, where: str) -> None:
    """Refuse, from its first copy, a `repeat` that would build more than `MAX_INSTANCES`."""
    total = count * _instances(first)
    if total > MAX_INSTANCES:
        raise CheckError(
            f"`{where}` would build {total:,} layers ({count:,} copies of "
            f"{_instances(first):,}); at most {MAX_INSTANCES:,} fit in one model",
            span=repeat.span,
            code="graph-too-large",
            hint="lower the repeat count, or the depth of the repeated layer",
        )


def _note_call(err: CheckError, span: ir.Span | None, path: str, kind: str) -> None:
    """An error at a value set elsewhere (an override, a model param) also shows the layer call
    the value reached; once, from the innermost call."""
    if span is None or err.span is None or span_within(err.span, span):
        return
    if any(n.message.startswith("in ") for n in err.notes):
        return
    err.notes.append(Note(span, f"in `{path}`, a call of `{kind}`"))


def _instantiate(
    decl: ir.LayerDecl,
    args: dict[str, Any],
    layers: dict[str, ir.LayerDecl],
    path: str,
    span: ir.Span | None,
    cache: dict[Any, LayerInstance] | None,
    spans: Spans,
) -> LayerInstance:
    children: list[LayerInstance] = []
    names = {s.name: s.name for s in decl.sublayers}
    ctx = layer_context(layers, names)
    lookup = _env_lookup(args, spans)
    for sub in decl.sublayers:
        child_path = f"{path}.{sub.name}" if path else sub.name
        call = evaluate(sub.call, lookup)
        assert isinstance(call.value, RawCall)
        child_spans: Spans = {}
        try:
            if call.value.func in layers:
                v = call.value
                bound, child_spans = bind_user_layer_spans(
                    layers[v.func], v.args, v.kwargs, call.span, ctx
                )
            else:
                bound = ctx.bind_layer(call)
        except CheckError as err:
            _note_call(err, call.span, child_path, call.value.func)
            raise
        count: int | None = None
        if sub.repeat is not None:
            count = _repeat_count(evaluate(sub.repeat, lookup), child_path)
        copies = range(count) if count is not None else [None]
        made: list[LayerInstance] = []
        for i in copies:
            if i == 1 and count is not None:
                _check_instances(made[0], count, sub.repeat, child_path)
            ipath = child_path if i is None else f"{child_path}.{i}"
            if bound.kind in layers:
                made.append(
                    instantiate(
                        layers[bound.kind], bound.args, layers, ipath, sub.span, cache, child_spans
                    )
                )
            else:
                made.append(
                    LayerInstance(
                        path=ipath, kind=bound.kind, builtin=True, args=bound.args, span=sub.span
                    )
                )
        if count is None:
            children.append(made[0])
        else:
            children.append(
                LayerInstance(
                    path=child_path,
                    kind=bound.kind,
                    builtin=bound.kind not in layers,
                    args=bound.args,
                    repeat=count,
                    children=tuple(made),
                    span=sub.span,
                )
            )
    return LayerInstance(
        path=path,
        kind=decl.name,
        builtin=False,
        args=args,
        children=tuple(children),
        span=span or decl.span,
    )
