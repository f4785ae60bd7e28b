"""Reader and tokenizer calls as the data layer receives them.

Why: the data layer is driven by the resolved spec, where a reader or tokenizer is a bound
`CallValue` with every param present. Code and tests that build a pipeline without a spec file
need the same thing, so `make_call` fills defaults from the catalogue exactly as the front end
does, and `call_args` tolerates a hand-made call that left defaults out.
"""

from __future__ import annotations

from typing import Any

import seqc.spec.catalogue  # noqa: F401  (fills the registry with the reader/tokenizer kinds)
from seqc.data.errors import DataError
from seqc.resolve.values import CallValue
from seqc.spec.errors import did_you_mean
from seqc.spec.kinds import REGISTRY, KindSpec


def kind_spec(namespace: str, kind: str) -> KindSpec:
    """The catalogue entry of a reader or tokenizer kind, or a DataError naming the known ones."""
    spec = REGISTRY.get(namespace, kind)
    if spec is None:
        known = REGISTRY.names(namespace)
        raise DataError(
            f"unknown {namespace} kind `{kind}`",
            code="unknown-kind",
            expected=f"one of {', '.join(known)}",
            found=f"`{kind}`",
            suggestion=did_you_mean(kind, known),
        )
    return spec


def make_call(namespace: str, kind: str, /, *args: Any, **kwargs: Any) -> CallValue:
    """A bound call with catalogue defaults filled in: `make_call("reader", "text", "a.txt")`."""
    spec = kind_spec(namespace, kind)
    bound: dict[str, Any] = dict(zip(spec.positional, args, strict=False))
    if len(args) > len(spec.positional):
        raise TypeError(f"{kind}() takes {len(spec.positional)} positional argument(s)")
    bound.update(kwargs)
    unknown = set(bound) - set(spec.param_names)
    if unknown:
        raise TypeError(f"{kind}() has no param(s) {', '.join(sorted(unknown))}")
    out: dict[str, Any] = {}
    for p in spec.params:
        if p.name in bound:
            out[p.name] = bound[p.name]
        elif p.required:
            raise TypeError(f"{kind}() needs `{p.name}`")
        else:
            out[p.name] = p.default
    return CallValue(kind=kind, namespace=namespace, args=out)


def call_args(call: CallValue) -> dict[str, Any]:
    """The call's arguments with any missing default filled in from the catalogue."""
    spec = kind_spec(call.namespace, call.kind)
    args = {p.name: p.default for p in spec.params if not p.required}
    args.update(call.args)
    return args
