"""Declarations of the built-in kinds a spec may call: layers, losses, optimizers, readers, ...

Every kind declares its params with a type, a default and a one-line description (Lingvo's
`Define(name, default, description)`), so the front end can check each call and `seqc layers`
can document each kind from the same source. Kinds live in namespaces because the same call
syntax means different things in different places: `adam(...)` is only valid where an optimizer
is expected.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from seqc.spec.types import Type

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
class KindSpec:
    """One callable kind. `positional`: the params that may be given without a name, in order."""

    name: str
    namespace: str
    doc: str
    params: tuple[ParamSpec, ...] = ()
    positional: tuple[str, ...] = ()

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
) -> KindSpec:
    """Add a kind to the registry. Positional params default to the required ones, in order."""
    if positional is None:
        positional = tuple(p.name for p in params if p.required)
    return REGISTRY.add(KindSpec(name, namespace, doc, tuple(params), positional))


def param(name: str, type_: Type, default: object = REQUIRED, doc: str = "") -> ParamSpec:
    return ParamSpec(name, type_, default, doc)
