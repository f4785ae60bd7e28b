"""Conforming raw values to the types their params expect.

`conform` reads a `Raw` value (`seqc.resolve.raw`) against the expected param type: a name where
an optimizer is expected is the call `adam()` with its defaults, a number where a float is
expected becomes a float, and anything else is a `CheckError` pointing at the expression.

`conform` also checks that a number is one the program can use: inside its param's range
(`int > 0`), an int that fits int32, a finite float; and `bind_args` checks the relations a kind
declares between its params (`d % heads == 0`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from seqc.resolve.arguments import match_arguments, missing_param
from seqc.resolve.raw import Raw, RawCall, RawName, from_python, is_number, plain, show_number
from seqc.resolve.values import CallValue, Symbol, show_value
from seqc.spec import ir
from seqc.spec.errors import CheckError, Note, did_you_mean
from seqc.spec.kinds import REGISTRY, KindSpec
from seqc.spec.types import DTYPES, INT_LIMIT, SIZE_LIMIT, Type, parse_size

# ------------------------------------------------------------------------------------ conform


UserBinder = Callable[
    [str, list[Raw], dict[str, tuple[Raw, ir.Span | None]], ir.Span | None, "Context"],
    CallValue | None,
]
"""Binds a call of a user-declared layer; None when the name is not a user layer."""


@dataclass
class Context:
    """What `conform` needs beyond the type: user layers and the bare names valid here."""

    names: dict[str, Any] = field(default_factory=dict)
    """Values of bare names that are valid here (e.g. sibling layers for `tie = embed`)."""
    user_layers: tuple[str, ...] = ()
    user_binder: UserBinder | None = None
    bare_strings: bool = False
    """Accept a bare word where a string is expected (for `--set backend=tf` on a shell)."""

    def bind_layer(self, raw: Raw) -> CallValue:
        return bind_kind(raw, "layer", self, "layer")


def kind_names(namespace: str, ctx: Context) -> list[str]:
    user = list(ctx.user_layers) if namespace == "layer" else []
    return REGISTRY.names(namespace) + user


def conform(raw: Raw, type_: Type, ctx: Context, what: str = "value") -> Any:
    """Check `raw` against `type_` and return the resolved value, or raise a CheckError."""
    v = raw.value
    name = type_.name
    if name == "any":
        return plain(raw)
    if name == "none":
        if v is None:
            return None
        raise _mismatch(raw, type_, what)
    if name == "union":
        errors: list[CheckError] = []
        # Prefer the alternative that matches the value's shape, so errors come from the right one.
        for alt in sorted(type_.args, key=lambda t: not _shape_matches(raw, t)):
            try:
                return conform(raw, alt, ctx, what)
            except CheckError as e:
                errors.append(e)
        specific = [e for e in errors if e.code != "wrong-type"]
        if specific:
            raise specific[0]
        raise _mismatch(raw, type_, what)
    if isinstance(v, Symbol):
        if name in ("int", "float"):
            return v  # known once the data is read; its range is checked then
        raise _mismatch(raw, type_, what)
    if name == "int":
        if isinstance(v, int) and not isinstance(v, bool):
            if not -INT_LIMIT <= v < INT_LIMIT:
                raise _out_of_range(
                    raw, type_, what, "does not fit in 32 bits", v, hint=_INT32_HINT
                )
            return _in_range(raw, v, type_, what)
        raise _mismatch(raw, type_, what)
    if name == "float":
        if is_number(v):
            try:
                f = float(v)
            except OverflowError:  # an int of hundreds of digits
                f = math.inf
            if not math.isfinite(f):
                raise CheckError(
                    f"{what} is not a finite number",
                    span=raw.span,
                    code="not-finite",
                    expected=_range_words(type_),
                    found=show_number(v) if isinstance(v, int) else repr(f),
                    hint="a literal beyond 1.8e308 reads as inf" if math.isinf(f) else None,
                )
            return _in_range(raw, f, type_, what, v)
        raise _mismatch(raw, type_, what)
    if name == "bool":
        if isinstance(v, bool):
            return v
        raise _mismatch(raw, type_, what)
    if name in ("str", "size") and ctx.bare_strings and isinstance(v, RawName):
        return conform(Raw(v.id, raw.span), type_, ctx, what)
    if name == "str":
        if isinstance(v, str):
            return v
        raise _mismatch(raw, type_, what)
    if name == "size":
        nbytes = v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None
        if isinstance(v, str):
            nbytes = parse_size(v)
        if nbytes is not None:
            if nbytes >= SIZE_LIMIT:
                words = f"{_range_words(type_)} below 2**63 bytes"
                raise _out_of_range(raw, type_, what, "is too large", v, expected=words)
            _in_range(raw, nbytes, type_, what, v)
            return v
        raise CheckError(
            f"{what} is not a byte size",
            span=raw.span,
            code="bad-size",
            expected='a size such as "512MiB", "2GiB" or "1.5GB", or a whole number of bytes',
            found=raw.describe(),
        )
    if name == "dtype":
        text = v.id if isinstance(v, RawName) else v
        if isinstance(text, str) and text in DTYPES:
            return text
        suggestion = did_you_mean(text, DTYPES) if isinstance(text, str) else None
        raise CheckError(
            f"{what} is not a dtype",
            span=raw.span,
            code="unknown-dtype",
            expected=", ".join(DTYPES),
            found=raw.describe(),
            suggestion=suggestion,
        )
    if name == "enum":
        text = v.id if isinstance(v, RawName) else v
        if isinstance(text, str) and text in type_.choices:
            return text
        raise CheckError(
            f"{what} must be one of {', '.join(repr(c) for c in type_.choices)}",
            span=raw.span,
            code="bad-choice",
            expected=str(type_),
            found=raw.describe(),
            suggestion=did_you_mean(text, type_.choices) if isinstance(text, str) else None,
        )
    if name == "layer":
        if isinstance(v, RawName) and v.id in ctx.names:
            return v.id
        raise CheckError(
            f"{what} must name a sibling layer",
            span=raw.span,
            code="unknown-name",
            expected="the name of a layer declared in this body",
            found=raw.describe(),
            suggestion=did_you_mean(v.id, ctx.names) if isinstance(v, RawName) else None,
        )
    if name == "list":
        if not isinstance(v, list):
            raise _mismatch(raw, type_, what)
        elem = type_.args[0]
        return [conform(item, elem, ctx, f"item {i} of {what}") for i, item in enumerate(v)]
    if name == "map":
        if not isinstance(v, dict):
            raise _mismatch(raw, type_, what)
        key_t, val_t = type_.args
        out = {}
        for k, item in v.items():
            key_span = (raw.keys or {}).get(k) or item.span
            key = conform(Raw(k, key_span), key_t, ctx, f"a key of {what}")
            out[key] = conform(item, val_t, ctx, f"the value at key {k} of {what}")
        return out
    if name == "kind":
        return bind_kind(raw, type_.choices[0], ctx, what)
    raise _mismatch(raw, type_, what)


def _in_range(raw: Raw, value: Any, type_: Type, what: str, written: Any = None) -> Any:
    """`value` if it is inside the type's range, else an error at the value's span."""
    if type_.range is None or value in type_.range:
        return value
    raise _out_of_range(
        raw, type_, what, f"must be {type_.range}", value if written is None else written
    )


_INT32_HINT = "the backends hold ints (sizes, steps, ids, seeds) as int32"


def _out_of_range(
    raw: Raw,
    type_: Type,
    what: str,
    says: str,
    value: Any,
    expected: str | None = None,
    hint: str | None = None,
) -> CheckError:
    found = show_number(value) if isinstance(value, int | float) else show_value(value)
    if type_.name == "size" and isinstance(value, str):
        found += f" ({show_number(parse_size(value) or 0)} bytes)"
    return CheckError(
        f"{what} {says}",
        span=raw.span,
        code="out-of-range",
        expected=expected or _range_words(type_),
        found=found,
        hint=hint,
    )


def _range_words(t: Type) -> str:
    """What a numeric type accepts, in words: "an int > 0 and < 2**31", "a finite float"."""
    noun = {"int": "an int", "float": "a finite float", "size": "a byte size"}[t.name]
    if t.range is None:
        return noun + (" in [-2**31, 2**31) (int32)" if t.name == "int" else "")
    words = f"{noun} {t.range}"
    if t.name == "int" and (t.range.high is None or t.range.high >= INT_LIMIT):
        words += " and < 2**31"
    return words


def _shape_matches(raw: Raw, t: Type) -> bool:
    v = raw.value
    if t.name == "kind":
        return isinstance(v, RawCall | RawName | str)
    if t.name in ("int", "float"):
        return is_number(v) or isinstance(v, Symbol)
    if t.name == "none":
        return v is None
    return True


def _mismatch(raw: Raw, type_: Type, what: str) -> CheckError:
    hint = None
    if isinstance(raw.value, RawName) and type_.name in ("str", "size"):
        hint = f'strings are quoted: "{raw.value.id}"'
    return CheckError(
        f"{what} has the wrong type",
        span=raw.span,
        code="wrong-type",
        expected=_type_words(type_),
        found=raw.describe(),
        hint=hint,
    )


def _type_words(t: Type) -> str:
    if t.name == "kind":
        return f"a {t.choices[0]} (e.g. {', '.join(REGISTRY.names(t.choices[0])[:3])})"
    if t.name == "union":
        return " or ".join(_type_words(a) for a in t.args)
    return str(t)


def bind_kind(raw: Raw, namespace: str, ctx: Context, what: str = "value") -> CallValue:
    """Bind a call (or a bare name, or a default string) of a kind in `namespace`."""
    v = raw.value
    if isinstance(v, CallValue) and v.namespace == namespace:
        return v
    if isinstance(v, RawName | str):
        func, func_span, args, kwargs = (v.id if isinstance(v, RawName) else v), raw.span, [], {}
    elif isinstance(v, RawCall):
        func, func_span, args, kwargs = v.func, v.func_span, v.args, v.kwargs
    else:
        raise _mismatch(raw, Type("kind", choices=(namespace,)), what)
    if namespace == "layer" and ctx.user_binder is not None:
        bound = ctx.user_binder(func, args, kwargs, raw.span, ctx)
        if bound is not None:
            return bound
    spec = REGISTRY.get(namespace, func)
    if spec is None:
        candidates = kind_names(namespace, ctx)
        raise CheckError(
            f"unknown {namespace} `{func}`",
            span=func_span,
            code="unknown-kind",
            expected=f"one of {', '.join(candidates)}" if len(candidates) <= 12 else None,
            found=f"`{func}`",
            suggestion=did_you_mean(func, candidates),
            hint=f"`seqc layers` lists every {namespace}" if namespace == "layer" else None,
        )
    return bind_args(spec, args, kwargs, raw.span, ctx)


def bind_args(
    spec: KindSpec,
    args: list[Raw],
    kwargs: dict[str, tuple[Raw, ir.Span | None]],
    span: ir.Span | None,
    ctx: Context,
) -> CallValue:
    """Match arguments to params, check each one's type, and fill in defaults."""
    given = match_arguments(
        spec.name,
        spec.positional,
        spec.param_names,
        [(a, a.span) for a in args],
        [(k, raw, kspan) for k, (raw, kspan) in kwargs.items()],
    )
    out: dict[str, Any] = {}
    for p in spec.params:
        if p.name in given:
            out[p.name] = conform(given[p.name], p.type, ctx, f"`{spec.name}.{p.name}`")
        elif p.required:
            raise missing_param(spec.name, p.name, str(p.type), p.doc, span)
        else:
            out[p.name] = conform(from_python(p.default), p.type, ctx, f"`{spec.name}.{p.name}`")
    check_relations(spec, out, {k: raw.span for k, raw in given.items()}, span)
    return CallValue(kind=spec.name, namespace=spec.namespace, args=out)


def check_relations(
    spec: KindSpec,
    args: dict[str, Any],
    spans: dict[str, ir.Span | None],
    call_span: ir.Span | None,
    changed: str | None = None,
) -> None:
    """The kind's relations between params (`d % heads == 0`), once its values are known.

    The error points at the value of the relation's `blame` param (the call's argument, or the
    line that set it: a model param, an override), or at the param just `changed` when one arg
    of a call is set on its own; notes point at the other values and at the call, where they
    are elsewhere.
    """
    for rel in spec.relations:
        if rel.check(args) is not False:
            continue
        blame = changed if changed in rel.params else rel.blame
        span = spans.get(blame) or call_span
        notes = []
        for name in rel.params:
            other = spans.get(name)
            if name != blame and other is not None and other != span:
                notes.append(Note(other, f"`{name}` = {show_value(args[name])} is set here"))
        if call_span is not None and (span is None or not span_within(span, call_span)):
            notes.append(Note(call_span, f"in this call of `{spec.name}`"))
        found = ", ".join(f"{name} = {show_value(args[name])}" for name in rel.params)
        if rel.detail is not None:
            found += f" ({rel.detail(*(args[name] for name in rel.params))})"
        unless = f" (or give `{rel.unless}`)" if rel.unless else ""
        raise CheckError(
            f"`{spec.name}` needs `{rel.text}`{unless}",
            span=span,
            code="bad-relation",
            expected=f"`{rel.text}`",
            found=found,
            hint=rel.hint,
            notes=notes,
        )


def span_within(inner: ir.Span, outer: ir.Span) -> bool:
    """Whether `inner` lies inside `outer` (an argument inside its call)."""
    return (
        inner.file == outer.file
        and (inner.line, inner.col) >= (outer.line, outer.col)
        and (inner.end_line, inner.end_col) <= (outer.end_line, outer.end_col)
    )
