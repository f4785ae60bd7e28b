"""Raw values: a spec expression evaluated before anything knows what is expected there.

Evaluation happens in two steps. `evaluate` turns an expression into a `Raw` value without
knowing what is expected there (numbers are folded, calls and names kept as written).
`seqc.resolve.conform` then reads it against the expected param type. Keeping the two apart is
what lets `placement = m_etf` and `tasks = [lm]` use the same syntax for different things.

Integer arithmetic is bounded in digits, so `9 ** 9 ** 9` is an error at its expression instead
of a hang.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from seqc.resolve.values import CallValue, Symbol
from seqc.spec import ir
from seqc.spec.errors import CheckError

MAX_INT_DIGITS = 4300
"""Integer arithmetic stops at this many digits (Python's own limit for printing an int)."""

MAX_COPIES = 65536
"""Most copies `n x value` makes (a device list)."""

# ------------------------------------------------------------------------------------ raw values


@dataclass
class RawCall:
    func: str
    func_span: ir.Span | None
    args: list[Raw]
    kwargs: dict[str, tuple[Raw, ir.Span | None]]


@dataclass
class RawName:
    id: str


@dataclass
class Raw:
    """An evaluated expression with its span: scalars, lists, maps, calls, names and symbols."""

    value: Any
    span: ir.Span | None = None
    keys: dict[Any, ir.Span | None] | None = None
    """For a map: the span of each entry, so a bad key is reported at its entry."""

    def describe(self) -> str:
        v = self.value
        if isinstance(v, RawCall):
            return f"a call of `{v.func}`"
        if isinstance(v, RawName):
            return f"the name `{v.id}`"
        if isinstance(v, Symbol):
            return f"{v} (an int known from the data)"
        if isinstance(v, bool):
            return f"bool `{'true' if v else 'false'}`"
        if v is None:
            return "`none`"
        if isinstance(v, int):
            return show_number(v) if abs(v) >= _HUGE else f"int `{v}`"
        if isinstance(v, float):
            return f"float `{v!r}`"
        if isinstance(v, str):
            return f'string "{v}"'
        if isinstance(v, list):
            return "a list"
        if isinstance(v, dict):
            return "a map"
        if isinstance(v, CallValue):
            return f"`{v.kind}(...)`"
        return type(v).__name__


def show_number(v: int | float) -> str:
    """A number for a message: a huge int as its digit count, not hundreds of digits."""
    if isinstance(v, int) and abs(v) >= _HUGE:
        return f"{'a negative' if v < 0 else 'an'} int of {len(str(abs(v)))} digits"
    return repr(v)


_HUGE = 10**20


Lookup = Callable[[ir.Expr], Raw | None]
"""Resolves a name or attribute reference in the caller's scope; None leaves it as a RawName."""


def evaluate(expr: ir.Expr, lookup: Lookup | None = None) -> Raw:
    """Evaluate context-free parts of an expression: literals, collections and arithmetic."""
    span = expr.span
    if isinstance(expr, ir.Number | ir.String | ir.Bool):
        return Raw(expr.value, span)
    if isinstance(expr, ir.NoneLit):
        return Raw(None, span)
    if isinstance(expr, ir.Name | ir.Attr):
        found = lookup(expr) if lookup else None
        if found is not None:
            return found
        if isinstance(expr, ir.Name):
            return Raw(RawName(expr.id), span)
        raise CheckError(
            f"`{dotted(expr)}` does not name anything here",
            span=span,
            code="unknown-name",
        )
    if isinstance(expr, ir.ListExpr):
        return Raw([evaluate(i, lookup) for i in expr.items], span)
    if isinstance(expr, ir.MapExpr):
        values = {e.key: evaluate(e.value, lookup) for e in expr.entries}
        return Raw(values, span, keys={e.key: e.span for e in expr.entries})
    if isinstance(expr, ir.Replicate):
        if expr.count > MAX_COPIES:
            raise CheckError(
                "too many copies",
                span=span,
                code="bad-count",
                expected=f"at most {MAX_COPIES} copies",
                found=show_number(expr.count),
            )
        item = evaluate(expr.value, lookup)
        return Raw([item] * expr.count, span)
    if isinstance(expr, ir.Call):
        func = dotted(expr.func)
        if func is None:
            raise CheckError(
                "only a named kind can be called", span=expr.func.span, code="not-callable"
            )
        return Raw(
            RawCall(
                func,
                expr.func.span,
                [evaluate(a, lookup) for a in expr.args],
                {k.name: (evaluate(k.value, lookup), k.span) for k in expr.kwargs},
            ),
            span,
        )
    if isinstance(expr, ir.Neg):
        inner = evaluate(expr.operand, lookup)
        return Raw(_arith("-", Raw(0, span), inner, span), span)
    if isinstance(expr, ir.BinOp):
        left, right = evaluate(expr.left, lookup), evaluate(expr.right, lookup)
        return Raw(_arith(expr.op, left, right, span, expr), span)
    if isinstance(expr, ir.TypeExpr):
        raise CheckError("a type is not a value", span=span, code="wrong-type")
    raise CheckError(f"cannot evaluate {type(expr).__name__}", span=span, code="wrong-type")


def dotted(expr: ir.Expr) -> str | None:
    if isinstance(expr, ir.Name):
        return expr.id
    if isinstance(expr, ir.Attr):
        base = dotted(expr.obj)
        return f"{base}.{expr.name}" if base else None
    return None


def _arith(
    op: str, left: Raw, right: Raw, span: ir.Span | None, expr: ir.Expr | None = None
) -> Any:
    a, b = left.value, right.value
    symbolic = isinstance(a, Symbol) or isinstance(b, Symbol)
    if symbolic and all(is_number(x) or isinstance(x, Symbol) for x in (a, b)):
        return Symbol(ref=f"({_sym(a)} {op} {_sym(b)})")
    if op == "+" and isinstance(a, str) and isinstance(b, str):
        return a + b
    for side in (left, right):
        if not is_number(side.value):
            raise CheckError(
                f"`{op}` needs numbers",
                span=side.span,
                code="wrong-type",
                expected="an int or a float",
                found=side.describe(),
            )
    if op == "**" and isinstance(a, int) and isinstance(b, int) and abs(a) > 1 and b > 0:
        # Estimated before computing: `9 ** 9 ** 9` would take minutes to compute.
        digits = b * math.log10(abs(a))
        if digits > MAX_INT_DIGITS + 1:
            raise _too_many_digits(f"about {digits:,.0f}", span, expr)
    try:
        if op == "+":
            result = a + b
        elif op == "-":
            result = a - b
        elif op == "*":
            result = a * b
        elif op == "/":
            result = a / b
        elif op == "//":
            result = a // b
        elif op == "%":
            result = a % b
        else:
            result = a**b
            if isinstance(result, complex) or (isinstance(result, float) and math.isinf(result)):
                raise OverflowError
    except ZeroDivisionError:
        raise CheckError("division by zero", span=span, code="division-by-zero") from None
    except OverflowError:
        raise CheckError("number too large", span=span, code="overflow") from None
    if isinstance(result, int) and abs(result) >= _INT_CAP:
        digits = result.bit_length() * math.log10(2)
        raise _too_many_digits(f"about {digits:,.0f}", span, expr)
    return result


_INT_CAP = 10**MAX_INT_DIGITS


def _too_many_digits(digits: str, span: ir.Span | None, expr: ir.Expr | None) -> CheckError:
    from seqc.spec.printer import format_expr

    text = f"`{format_expr(expr)}`" if expr is not None else "this arithmetic"
    return CheckError(
        f"{text} is too large to compute",
        span=span,
        code="overflow",
        expected=f"integer arithmetic of at most {MAX_INT_DIGITS:,} digits",
        found=f"{digits} digits",
        hint="an int param holds less than 2**31 anyway",
    )


def _sym(v: Any) -> str:
    return v.ref if isinstance(v, Symbol) else repr(v)


def is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def from_python(value: Any, span: ir.Span | None = None) -> Raw:
    """A resolved value as Raw again, a list's or map's items included (as a written list's
    are), each at `span`: a catalogue default (no span: its origin is the catalogue), or a
    param's value passed on to a layer (the line that set it, where an item out of the layer's
    range is an error)."""
    if isinstance(value, list | tuple):
        return Raw([from_python(v, span) for v in value], span)
    if isinstance(value, dict):
        return Raw({k: from_python(v, span) for k, v in value.items()}, span)
    return Raw(value, span)


def plain(raw: Raw) -> Any:
    """A raw value as plain Python (names become strings); for fields typed `any`."""
    v = raw.value
    if isinstance(v, list):
        return [plain(i) for i in v]
    if isinstance(v, dict):
        return {k: plain(i) for k, i in v.items()}
    if isinstance(v, RawName):
        return v.id
    if isinstance(v, RawCall):
        raise CheckError("a call is not allowed here", span=raw.span, code="wrong-type")
    return v
