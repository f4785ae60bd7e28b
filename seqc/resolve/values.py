"""Resolved values: what a spec expression means once names and kinds are known.

A call of a kind (`CallValue`: `adam(lr = 1e-3)` with every param bound), a reference to a
declared name (`Symbol`), and frozen containers, with how each is shown and written as JSON.
How an expression becomes one is `seqc.resolve.raw` (evaluate it, kinds unknown) then
`seqc.resolve.conform` (read it against the type its param expects).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

# ------------------------------------------------------------------------------------ values


class CallValue(BaseModel):
    """A bound call of a kind: every param present, defaults filled in."""

    model_config = ConfigDict(frozen=True)

    kind: str
    namespace: str
    args: dict[str, Any]

    def __str__(self) -> str:
        return show_value(self)


class Symbol(BaseModel):
    """A value known only once data is read, e.g. the vocabulary size of a character tokenizer."""

    model_config = ConfigDict(frozen=True)

    ref: str

    def __str__(self) -> str:
        return f"<{self.ref}>"


class FrozenDict(dict):
    """A dict that refuses mutation: the resolved experiment is read-only."""

    def _readonly(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("a resolved experiment is frozen; use --set or `extends` to change it")

    __setitem__ = __delitem__ = _readonly  # type: ignore[assignment]
    clear = pop = popitem = setdefault = update = _readonly  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items(), key=lambda kv: str(kv[0]))))


def freeze(value: Any) -> Any:
    """Deep-freeze a value tree: dicts become FrozenDicts, lists tuples."""
    if isinstance(value, CallValue):
        # model_construct: validation would copy the FrozenDict back into a plain dict.
        args = FrozenDict({k: freeze(v) for k, v in value.args.items()})
        return CallValue.model_construct(kind=value.kind, namespace=value.namespace, args=args)
    if isinstance(value, dict):
        return FrozenDict({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


def show_value(value: Any) -> str:
    """A value as .seq text (used by `seqc show` and in error messages)."""
    if isinstance(value, CallValue):
        args = ", ".join(f"{k} = {show_value(v)}" for k, v in value.args.items())
        return f"{value.kind}({args})"
    if isinstance(value, Symbol):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return '"' + escaped.replace("\n", "\\n").replace("\t", "\\t") + '"'
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {show_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(show_value(v) for v in value) + "]"
    return str(value)


def to_json(value: Any) -> Any:
    """JSON-ready form: calls as {"kind": ..., "args": ...}, symbols as {"symbol": ...}."""
    if isinstance(value, CallValue):
        return {"kind": value.kind, "args": {k: to_json(v) for k, v in value.args.items()}}
    if isinstance(value, Symbol):
        return {"symbol": value.ref}
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    return value
