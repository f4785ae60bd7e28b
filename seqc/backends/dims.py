"""Sizes of composite dims (`((5*T+15)//16)`) when a step runs, for every array backend.

A shape attr may hold a dim that no graph input binds but that the bound ones determine: a
mixture of experts' capacity, ceil(factor * top_k * T / experts) (`seqc.compiler.lower.moe`).
JAX traces with ints, TF with ints or scalar tensors (a length known only when the step runs);
both take Python's `+ - * //`, so one evaluator serves them. `ceil(a / b)` is computed as
-((-a) // b), which is exact on integers and on integer tensors alike.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from functools import lru_cache
from typing import Any


@lru_cache(maxsize=256)
def _parse(expr: str) -> ast.expr:
    return ast.parse(expr, mode="eval").body


def composite(expr: str, dims: Mapping[str, Any]) -> Any | None:
    """The size of dim expression `expr` for these bound dims, or None where it names a dim
    they lack or uses a form outside `+ - * // ceil(a / b)`."""
    try:
        return _value(_parse(expr), dims)
    except (SyntaxError, _Unbound):
        return None


class _Unbound(Exception):
    pass


def _value(node: ast.expr, dims: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name) and node.id in dims:
        return dims[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand, dims)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "ceil"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.BinOp)
        and isinstance(node.args[0].op, ast.Div)
    ):
        a, b = _value(node.args[0].left, dims), _value(node.args[0].right, dims)
        return -((-a) // b)
    if isinstance(node, ast.BinOp):
        a, b = _value(node.left, dims), _value(node.right, dims)
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Mult):
            return a * b
        if isinstance(node.op, ast.FloorDiv):
            return a // b
    raise _Unbound(ast.dump(node))


def size(d: int | str, dims: Mapping[str, Any], exact: bool = False) -> Any:
    """The size of one dim of a shape attr: an int as it is, a bound symbol's size, else -1
    (which a reshape infers), or with `exact` the composite's size (`composite`)."""
    if isinstance(d, int):
        return d
    if d in dims:
        return dims[d]
    if not exact:
        return -1
    value = composite(d, dims)
    if value is None:
        raise ValueError(f"the size of dim `{d}` does not follow from the graph's inputs")
    return value
