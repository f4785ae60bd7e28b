"""The table type every backend fills: primitive name -> function of (inputs, attrs, ctx).

Each backend keeps its own table (`seqc/backends/<name>/ops.py`, the same names in each); this
is only the shared way of registering into one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Fn = Callable[[list[Any], dict[str, Any], Any], Any]


def registrar(table: dict[str, Fn]) -> Callable[..., Callable[[Fn], Fn]]:
    """A decorator factory: `@op("add", "sub")` puts the function under each name in `table`."""

    def op(*names: str) -> Callable[[Fn], Fn]:
        def register(fn: Fn) -> Fn:
            for n in names:
                table[n] = fn
            return fn

        return register

    return op
