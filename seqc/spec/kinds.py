"""Declarations of the built-in kinds a spec may call: layers, losses, optimizers, readers, ...

Every kind declares its params with a type, a default and a one-line description (Lingvo's
`Define(name, default, description)`), so the front end can check each call and `seqc layers`
can document each kind from the same source. Kinds live in namespaces because the same call
syntax means different things in different places: `adam(...)` is only valid where an optimizer
is expected.

What a param accepts is declared with it too: a range on its type (`param("d", INT, range =
POSITIVE)`), and, for rules between params such as `d % heads == 0`, a `Relation` on the kind.
The checker enforces both generically, at the line that wrote the value.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from seqc.spec.types import Range, Type

REQUIRED: object = type("Required", (), {"__repr__": lambda self: "required"})()
"""Sentinel default for a param that every call must give."""


@dataclass(frozen=True)
class ParamSpec:
    name: str
    type: Type
    default: object = REQUIRED
    doc: str = ""

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


@dataclass(frozen=True)
class Relation:
    """A rule between params of one kind that no range on a single param can state.

    `holds` gets the values of `params`, in order; the rule is skipped while any of them is none
    or known only from the data, or while the param `unless` is set (not none). `blame` is the
    param whose line an error points at: the one a user most likely got wrong. `detail`, given
    the same values, says in numbers why the rule fails (`256 % 3 = 1`).
    """

    text: str
    params: tuple[str, ...]
    holds: Callable[..., bool]
    blame: str
    unless: str | None = None
    hint: str | None = None
    detail: Callable[..., str] | None = None

    def check(self, args: Mapping[str, Any]) -> bool | None:
        """Whether the rule holds for these argument values; None when it does not apply."""
        if self.unless is not None and args.get(self.unless) is not None:
            return None
        values = [args.get(p) for p in self.params]
        if not all(isinstance(v, int | float | list | tuple) for v in values):
            return None  # none, or a Symbol known once the data is read
        return bool(self.holds(*values))


def divides(divisor: str, dividend: str, *, unless: str | None = None, hint: str = "") -> Relation:
    """`dividend % divisor == 0`; an error points at the divisor (`heads`, not `d`)."""
    return Relation(
        f"{dividend} % {divisor} == 0",
        (dividend, divisor),
        lambda a, b: b != 0 and a % b == 0,
        blame=divisor,
        unless=unless,
        hint=hint or None,
        detail=lambda a, b: f"{a} % {b} = {a % b}" if b else "",
    )


def multiple_of(name: str, n: int, *, hint: str = "") -> Relation:
    """`name % n == 0` for a constant `n` (an even width: `multiple_of("d", 2)`)."""
    return Relation(
        f"{name} % {n} == 0",
        (name,),
        lambda a: a % n == 0,
        name,
        hint=hint or None,
        detail=lambda a: f"{a} % {n} = {a % n}",
    )


def less_than(small: str, large: str, *, hint: str = "") -> Relation:
    """`small < large`; an error points at `small`."""
    return Relation(
        f"{small} < {large}", (small, large), lambda a, b: a < b, small, hint=hint or None
    )


def one_more(longer: str, shorter: str, *, hint: str = "") -> Relation:
    """`len(longer) == len(shorter) + 1` (piecewise values and their boundaries)."""
    return Relation(
        f"len({longer}) == len({shorter}) + 1",
        (longer, shorter),
        lambda a, b: len(a) == len(b) + 1,
        longer,
        hint=hint or None,
    )


def increasing(name: str, *, hint: str = "") -> Relation:
    """The items of a list param strictly increase."""
    return Relation(
        f"{name} increasing",
        (name,),
        lambda a: all(x < y for x, y in itertools.pairwise(a)),
        name,
        hint=hint or None,
    )


@dataclass(frozen=True)
class KindSpec:
    """One callable kind. `positional`: the params that may be given without a name, in order.
    `relations`: rules between its params, checked once a call's values are known."""

    name: str
    namespace: str
    doc: str
    params: tuple[ParamSpec, ...] = ()
    positional: tuple[str, ...] = ()
    relations: tuple[Relation, ...] = ()

    def param(self, name: str) -> ParamSpec | None:
        return next((p for p in self.params if p.name == name), None)

    @property
    def param_names(self) -> list[str]:
        return [p.name for p in self.params]


@dataclass
class Registry:
    """All kinds, by namespace then name."""

    namespaces: dict[str, dict[str, KindSpec]] = field(default_factory=dict)
    docs: dict[str, str] = field(default_factory=dict)

    def add(self, spec: KindSpec) -> KindSpec:
        ns = self.namespaces.setdefault(spec.namespace, {})
        if spec.name in ns:
            raise ValueError(f"kind {spec.namespace}.{spec.name} declared twice")
        for pos in spec.positional:
            if spec.param(pos) is None:
                raise ValueError(f"{spec.name}: positional {pos!r} is not a param")
        for rel in spec.relations:
            for name in (*rel.params, rel.blame, *([rel.unless] if rel.unless else [])):
                if spec.param(name) is None:
                    raise ValueError(f"{spec.name}: relation `{rel.text}` names {name!r}")
        ns[spec.name] = spec
        return spec

    def get(self, namespace: str, name: str) -> KindSpec | None:
        return self.namespaces.get(namespace, {}).get(name)

    def names(self, namespace: str) -> list[str]:
        return sorted(self.namespaces.get(namespace, {}))


REGISTRY = Registry()


def declare(
    namespace: str,
    name: str,
    doc: str,
    *params: ParamSpec,
    positional: tuple[str, ...] | None = None,
    relations: tuple[Relation, ...] = (),
) -> KindSpec:
    """Add a kind to the registry. Positional params default to the required ones, in order."""
    if positional is None:
        positional = tuple(p.name for p in params if p.required)
    return REGISTRY.add(KindSpec(name, namespace, doc, tuple(params), positional, relations))


def param(
    name: str,
    type_: Type,
    default: object = REQUIRED,
    doc: str = "",
    *,
    range: Range | None = None,
) -> ParamSpec:
    """A param; `range` limits the values of a numeric type (through `int | none` and
    `float | schedule` to the numeric alternatives)."""
    return ParamSpec(name, type_.within(range) if range is not None else type_, default, doc)
