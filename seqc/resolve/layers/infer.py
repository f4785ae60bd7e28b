"""Static types of the expressions in a layer declaration, before any value is known.

A declaration is checked once, not once per instantiation, so its arguments are checked from
the declared types of the params they use: `FeedForward(d, 4 * d)` is an int where an int is
expected whatever `d` turns out to be. An expression that uses no param is evaluated and
conformed as any value would be, so its error is the one a literal gets anywhere else.
"""

from __future__ import annotations

from seqc.resolve.conform import Context, conform
from seqc.resolve.raw import evaluate
from seqc.spec import ir
from seqc.spec.errors import CheckError, did_you_mean
from seqc.spec.kinds import ParamSpec
from seqc.spec.types import FLOAT, INT, LAYER, SCALARS, Type


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


def has_names(expr: ir.Expr) -> bool:
    """Whether an expression uses a name, so its value is known only per instance."""
    if isinstance(expr, ir.Name):
        return True
    return any(has_names(v) for v in children(expr))


def children(expr: ir.Expr) -> list[ir.Expr]:
    """The sub-expressions of an expression, for walks over a declaration."""
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


def check_arg(expr: ir.Expr, target: ParamSpec, owner: str, scope: dict[str, Type]) -> None:
    """Check an argument of a sub-layer call (or a default) against its param, statically."""
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
    if not has_names(expr) or bare_word:
        conform(evaluate(expr), target.type, Context(), what)
        return
    src = _infer(expr, scope)
    if not _assignable(src, target.type):
        raise CheckError(
            f"{what} has the wrong type",
            span=expr.span,
            code="wrong-type",
            expected=str(target.type),
            found=f"{src} (from `{expr_text(expr)}`)",
        )


def _takes_word(t: Type) -> bool:
    if t.name == "union":
        return any(_takes_word(a) for a in t.args)
    return t.name in ("enum", "dtype")


def expr_text(expr: ir.Expr) -> str:
    """An expression as written, on one line, for messages."""
    from seqc.spec.printer import format_expr

    return format_expr(expr)
