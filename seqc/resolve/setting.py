"""Setting a value at a dotted path of a typed block, and the catalogue's defaults it starts from.

Every block of an experiment (`train`, `distribution`, ...), a task and an input starts from the
catalogue's defaults of its kind; a statement then sets one path inside it
(`train.optimizer.lr.warmup = 0`), typed at each step by the kind of the call it enters, and
records where the value came from. `Setter` is the base of `Resolver`
(`seqc.resolve.experiment`): it holds what every step of a resolution shares.
"""

from __future__ import annotations

from typing import Any

from seqc.resolve.conform import Context, check_relations, conform
from seqc.resolve.program import Program
from seqc.resolve.provenance import DEFAULT, Origin, record
from seqc.resolve.raw import evaluate, from_python
from seqc.resolve.statements import Stmt
from seqc.resolve.values import CallValue, show_value
from seqc.spec.errors import ResolveError, did_you_mean
from seqc.spec.kinds import REGISTRY, KindSpec

_DEFAULTS: dict[int, tuple[KindSpec, dict[str, Any]]] = {}


def default_values(spec: KindSpec) -> dict[str, Any]:
    """The conformed defaults of a kind's optional params, as a new (mutable) dict.

    Every experiment starts from the same defaults of each block: they are conformed once per
    spec and copied (`_fresh`), since a resolve writes into calls (`train.optimizer.lr = ...`).
    """
    hit = _DEFAULTS.get(id(spec))
    if hit is None or hit[0] is not spec:
        values = {
            p.name: conform(from_python(p.default), p.type, Context())
            for p in spec.params
            if not p.required
        }
        hit = _DEFAULTS[id(spec)] = (spec, values)
    return {k: _fresh(v) for k, v in hit[1].items()}


def _fresh(value: Any) -> Any:
    """A copy of a resolved value whose calls, dicts and lists can be changed independently."""
    if type(value) is CallValue:
        args = {k: _fresh(v) for k, v in value.args.items()}
        return CallValue.model_construct(
            _fields_set=set(value.model_fields_set),
            kind=value.kind,
            namespace=value.namespace,
            args=args,
        )
    if type(value) is dict:
        return {k: _fresh(v) for k, v in value.items()}
    if type(value) is list:
        return [_fresh(v) for v in value]
    return value


def block_spec(name: str) -> KindSpec:
    """The catalogue's kind of a block (`experiment`, `train`, `task`, `input`, ...)."""
    spec = REGISTRY.get("block", name)
    assert spec is not None, name
    return spec


class Setter:
    """The state of one resolution (the program, known data symbols, provenance so far), and
    setting values inside its blocks."""

    def __init__(self, program: Program, symbols: dict[str, int] | None = None) -> None:
        self.program = program
        self.symbols = dict(symbols or {})
        """Values of data-dependent symbols once known, e.g. {"shakespeare.vocab_size": 4000}."""
        self.layers = program.layers
        self.prov: dict[str, Origin] = {}

    def defaults(self, spec: KindSpec, prefix: str) -> dict[str, Any]:
        """A block's defaults, recorded as such under `prefix`."""
        out = default_values(spec)
        self.prov[prefix] = DEFAULT
        return out

    def apply_block(self, config: dict[str, Any], st: Stmt) -> None:
        """Apply a statement to one of the experiment's blocks (`train.steps = 200`)."""
        block = st.path[0]
        spec = block_spec(block)
        if st.call is not None:  # `onnx(...)` inside export { }: append a format
            fmt = conform(evaluate(st.call), spec.param("formats").type.args[0], Context())
            config["export"]["formats"] = [*config["export"]["formats"], fmt]
            self.prov["export.formats"] = st.origin
            return
        if len(st.path) == 1:
            raise ResolveError(
                f"`{block}` is a block",
                span=st.span,
                code="block-assign",
                hint=f"write `{block} {{ field = value }}` or `{block}.field = value`",
            )
        self.set_path(config[block], spec, st.path, 1, st, Context(bare_strings=st.bare_strings))

    def set_path(
        self,
        container: dict[str, Any],
        spec: KindSpec,
        path: tuple[str, ...],
        i: int,
        st: Stmt,
        ctx: Context,
    ) -> None:
        """Set `path[i:]` inside `container` (a block dict or a call's args), typed by `spec`."""
        key = path[i]
        p = spec.param(key)
        if p is None:
            raise ResolveError(
                f"`{'.'.join(path[:i])}` has no field `{key}`",
                span=st.span,
                code="unknown-field",
                expected=f"one of {', '.join(spec.param_names)}",
                found=f"`{'.'.join(path)}`",
                suggestion=did_you_mean(key, spec.param_names),
            )
        dotted_path = ".".join(path[: i + 1])
        if i == len(path) - 1:
            assert st.value is not None
            raw = evaluate(st.value)
            container[key] = conform(raw, p.type, ctx, f"`{'.'.join(path)}`")
            # One arg of a call set on its own (`train.optimizer.lr.warmup = 0`): the kind's
            # relations between its args are checked again with the new value.
            check_relations(spec, container, {key: raw.span}, st.span, changed=key)
            record(self.prov, self.layers, dotted_path, raw, st.origin)
            return
        inner = container.get(key)
        if not isinstance(inner, CallValue):
            raise ResolveError(
                f"`{dotted_path}` is {show_value(inner)}, which has no fields",
                span=st.span,
                code="unknown-field",
                found=f"`{'.'.join(path)}`",
            )
        inner_spec = REGISTRY.get(inner.namespace, inner.kind)
        assert inner_spec is not None
        self.set_path(inner.args, inner_spec, path, i + 1, st, ctx)
