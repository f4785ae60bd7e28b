"""Matching call arguments to params: one set of rules and messages for every kind of call.

Built-in kinds, user layers bound with values, and user layers checked statically all match
positional and named arguments the same way, so they fail the same way too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from seqc.spec import ir
from seqc.spec.errors import CheckError, Note, did_you_mean

T = TypeVar("T")


def match_arguments(
    kind: str,
    positional: Sequence[str],
    params: Sequence[str],
    args: Sequence[tuple[T, ir.Span | None]],
    kwargs: Sequence[tuple[str, T, ir.Span | None]],
    notes: list[Note] | None = None,
) -> dict[str, T]:
    """Param name -> argument; too many positionals, unknown names and repeats are errors."""
    notes = notes or []
    if len(args) > len(positional):
        raise CheckError(
            f"`{kind}` takes {len(positional)} positional argument(s), got {len(args)}",
            span=args[len(positional)][1],
            code="too-many-args",
            expected=f"positional params: {', '.join(positional) or 'none'}",
            hint="name the extra arguments, e.g. `name = value`",
            notes=notes,
        )
    given = {name: value for name, (value, _) in zip(positional, args, strict=False)}
    for name, value, span in kwargs:
        if name not in params:
            raise CheckError(
                f"`{kind}` has no param `{name}`",
                span=span,
                code="unknown-param",
                expected=f"one of {', '.join(params)}" if params else "no params",
                found=f"`{name}`",
                suggestion=did_you_mean(name, params),
                notes=notes,
            )
        if name in given:
            raise CheckError(
                f"`{name}` is given twice (by position and by name)",
                span=span,
                code="duplicate-argument",
            )
        given[name] = value
    return given


def missing_param(
    kind: str,
    name: str,
    type_text: str,
    doc: str | None,
    span: ir.Span | None,
    notes: list[Note] | None = None,
) -> CheckError:
    return CheckError(
        f"`{kind}` needs `{name}`",
        span=span,
        code="missing-param",
        expected=f"`{name}: {type_text}`" + (f" ({doc})" if doc else ""),
        hint=f"add `{name} = ...` to the call",
        notes=notes or [],
    )
