"""Checks on the built-in catalogue's declarations themselves.

Why: the catalogue is the source of both the checker's rules and `seqc layers`' documentation,
so a missing description, a default that fails its own type, or a positional param that does
not exist would surface as a confusing error in every spec that uses the kind. The type check
here is a small local one, independent of the front end's checker, so it tests the data rather
than sharing that checker's bugs.
"""

from __future__ import annotations

import keyword

import pytest

import seqc.spec.catalogue  # noqa: F401  (fills the registry)
from seqc.spec.kinds import REGISTRY, KindSpec, ParamSpec
from seqc.spec.types import DTYPES, Type, parse_size

ALL_KINDS: list[KindSpec] = [spec for ns in REGISTRY.namespaces.values() for spec in ns.values()]
ALL_PARAMS: list[tuple[KindSpec, ParamSpec]] = [(k, p) for k in ALL_KINDS for p in k.params]

EXPECTED_NAMESPACES = {
    "layer",
    "optimizer",
    "schedule",
    "loss",
    "metric",
    "decode",
    "reader",
    "tokenizer",
    "device",
    "placement",
    "export",
    "block",
}

REQUIRED_LAYERS = {
    "Embedding",
    "SinusoidalPosition",
    "LearnedPosition",
    "Linear",
    "LayerNorm",
    "RMSNorm",
    "FeedForward",
    "Dropout",
    "SelfAttention",
    "CrossAttention",
    "LSTM",
    "Softmax",
}


def _kid(item: KindSpec | tuple[KindSpec, ParamSpec]) -> str:
    if isinstance(item, tuple):
        return f"{item[0].namespace}.{item[0].name}.{item[1].name}"
    return f"{item.namespace}.{item.name}"


def type_ok(value: object, t: Type) -> bool:
    """Whether a plain Python default fits a declared type (int fits float; str may name a kind)."""
    if t.name == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if t.name == "float":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if t.name == "bool":
        return isinstance(value, bool)
    if t.name in ("str", "layer"):
        return isinstance(value, str)
    if t.name == "size":
        if isinstance(value, bool):
            return False
        if isinstance(value, int):
            return value >= 0
        return isinstance(value, str) and parse_size(value) is not None
    if t.name == "dtype":
        return value in DTYPES
    if t.name == "any":
        return True
    if t.name == "none":
        return value is None
    if t.name == "enum":
        return value in t.choices
    if t.name == "list":
        return isinstance(value, list) and all(type_ok(v, t.args[0]) for v in value)
    if t.name == "map":
        return isinstance(value, dict) and all(
            type_ok(k, t.args[0]) and type_ok(v, t.args[1]) for k, v in value.items()
        )
    if t.name == "kind":
        # A kind default is the name of a kind callable with no arguments.
        if not isinstance(value, str):
            return False
        spec = REGISTRY.get(t.choices[0], value)
        return spec is not None and not any(p.required for p in spec.params)
    if t.name == "union":
        return any(type_ok(value, a) for a in t.args)
    raise AssertionError(f"unknown type {t.name!r}")


def _walk(t: Type) -> list[Type]:
    return [t, *(sub for a in t.args for sub in _walk(a))]


def test_namespaces_present_and_documented() -> None:
    assert set(REGISTRY.namespaces) >= EXPECTED_NAMESPACES
    for ns in REGISTRY.namespaces:
        assert REGISTRY.docs.get(ns, "").strip(), f"namespace {ns} has no doc"


def test_required_layers_present() -> None:
    assert set(REGISTRY.names("layer")) >= REQUIRED_LAYERS


@pytest.mark.parametrize("spec", ALL_KINDS, ids=_kid)
def test_kind_has_docstring(spec: KindSpec) -> None:
    assert len(spec.doc.strip()) >= 15, f"{_kid(spec)}: doc too short"
    assert spec.doc.strip().endswith("."), f"{_kid(spec)}: doc should be a sentence"


@pytest.mark.parametrize("item", ALL_PARAMS, ids=_kid)
def test_param_has_description(item: tuple[KindSpec, ParamSpec]) -> None:
    _, p = item
    assert len(p.doc.strip()) >= 10, f"{_kid(item)}: description missing"
    assert p.name.isidentifier() and not keyword.iskeyword(p.name)


@pytest.mark.parametrize("item", ALL_PARAMS, ids=_kid)
def test_default_fits_type(item: tuple[KindSpec, ParamSpec]) -> None:
    _, p = item
    if p.required:
        return
    assert type_ok(p.default, p.type), f"{_kid(item)}: default {p.default!r} is not {p.type}"


@pytest.mark.parametrize("item", ALL_PARAMS, ids=_kid)
def test_kind_types_name_known_namespaces(item: tuple[KindSpec, ParamSpec]) -> None:
    for t in _walk(item[1].type):
        if t.name == "kind":
            assert REGISTRY.names(t.choices[0]), f"{_kid(item)}: empty namespace {t}"


@pytest.mark.parametrize("spec", ALL_KINDS, ids=_kid)
def test_params_unique_and_positional_valid(spec: KindSpec) -> None:
    names = spec.param_names
    assert len(names) == len(set(names))
    assert len(spec.positional) == len(set(spec.positional))
    assert all(name in names for name in spec.positional)
    # Positional params keep their declaration order, so `f(a, b)` reads like the signature.
    assert list(spec.positional) == [n for n in names if n in spec.positional]
    # A required param that cannot be given positionally is allowed, but only in blocks.
    if spec.namespace != "block":
        required = [p.name for p in spec.params if p.required]
        assert set(required) <= set(spec.positional), f"{_kid(spec)}: required not positional"


def test_blocks_have_no_positional_params() -> None:
    for spec in REGISTRY.namespaces["block"].values():
        assert spec.positional == ()


@pytest.mark.parametrize(
    ("name", "positional"),
    [
        ("Embedding", ("vocab", "d")),
        ("SinusoidalPosition", ("d",)),
        ("LearnedPosition", ("max_length", "d")),
        ("Linear", ("d_in", "d_out")),
        ("LayerNorm", ("d",)),
        ("RMSNorm", ("d",)),
        ("FeedForward", ("d", "ff")),
        ("Dropout", ("rate",)),
        ("SelfAttention", ("d", "heads")),
        ("CrossAttention", ("d", "heads")),
        ("LSTM", ("d_in", "d_hidden")),
        ("Softmax", ("vocab", "d")),
    ],
)
def test_layer_positional_calls(name: str, positional: tuple[str, ...]) -> None:
    spec = REGISTRY.get("layer", name)
    assert spec is not None
    assert spec.positional == positional


def test_named_defaults_used_by_the_brief() -> None:
    def default(ns: str, kind_name: str, param_name: str) -> object:
        spec = REGISTRY.get(ns, kind_name)
        assert spec is not None
        p = spec.param(param_name)
        assert p is not None
        return p.default

    assert default("layer", "Softmax", "tie") is None
    assert default("layer", "SelfAttention", "causal") is False
    assert default("optimizer", "adam", "lr") == pytest.approx(1e-3)
    assert default("block", "train", "optimizer") == "adam"
    assert default("block", "task", "loss") == "cross_entropy"
    assert default("block", "distribution", "mesh") == {"data": 1}
    assert default("block", "distribution", "placement") == "single"
    assert default("decode", "beam", "length_penalty") == pytest.approx(0.6)
    assert default("export", "onnx", "opset") == 17


@pytest.mark.parametrize(
    ("value", "t", "ok"),
    [
        (1, "float", True),
        (True, "int", False),
        (None, "optional_int", True),
        ("adam", "optimizer", True),
        ("sampled_softmax", "loss", False),  # needs `samples`, so cannot be named bare
        ("8GiB", "size", True),
        ("8 lots", "size", False),
    ],
)
def test_local_checker(value: object, t: str, ok: bool) -> None:
    from seqc.spec.types import FLOAT, INT, SIZE, kind, optional

    types = {
        "float": FLOAT,
        "int": INT,
        "optional_int": optional(INT),
        "optimizer": kind("optimizer"),
        "loss": kind("loss"),
        "size": SIZE,
    }
    assert type_ok(value, types[t]) is ok


# ------------------------------------------------------------------------------------ ranges


def range_ok(value: object, t: Type) -> bool:
    """Whether a default that fits `t` is inside every range on the way (local, like `type_ok`)."""
    if t.name == "union":
        return any(range_ok(value, a) for a in t.args if type_ok(value, a))
    if t.name == "list":
        return all(range_ok(v, t.args[0]) for v in value)  # type: ignore[attr-defined]
    if t.name == "map":
        return all(
            range_ok(k, t.args[0]) and range_ok(v, t.args[1])
            for k, v in value.items()  # type: ignore[attr-defined]
        )
    if t.range is None:
        return True
    number = parse_size(value) if isinstance(value, str) else value
    return number in t.range


@pytest.mark.parametrize("item", ALL_PARAMS, ids=_kid)
def test_default_within_range(item: tuple[KindSpec, ParamSpec]) -> None:
    _, p = item
    if p.required:
        return
    assert range_ok(p.default, p.type), f"{_kid(item)}: default {p.default!r} is not {p.type}"


@pytest.mark.parametrize(
    ("namespace", "kind_name", "param_name", "declared"),
    [
        ("layer", "Embedding", "vocab", "int > 0"),
        ("layer", "SelfAttention", "heads", "int > 0"),
        ("layer", "SelfAttention", "head_dim", "int > 0 | none"),
        ("layer", "FeedForward", "ff", "int > 0"),
        ("layer", "LSTM", "layers", "int > 0"),
        ("layer", "Dropout", "rate", "float in [0, 1)"),
        ("layer", "LayerNorm", "eps", "float > 0"),
        ("block", "train", "steps", "int > 0"),
        ("block", "train", "batch_size", "int > 0 | none"),
        ("block", "train", "log_every", "int >= 0"),
        ("block", "train", "clip_norm", "float >= 0"),
        ("block", "input", "buckets", "map[int > 0 | float > 0, int > 0]"),
        (
            "block",
            "distribution",
            "mesh",
            'map["stage" | "data" | "fsdp" | "expert" | "model", int > 0]',
        ),
        ("optimizer", "adam", "lr", "float >= 0 | schedule"),
        ("optimizer", "adam", "beta1", "float in [0, 1)"),
        ("optimizer", "adam", "eps", "float > 0"),
        ("schedule", "warmup_rsqrt", "warmup", "int >= 0"),
        ("loss", "cross_entropy", "label_smoothing", "float in [0, 1)"),
        ("decode", "sample", "temperature", "float > 0"),
        ("decode", "sample", "top_p", "float in (0, 1]"),
        ("decode", "sample", "top_k", "int >= 0"),
        ("decode", "beam", "width", "int > 0"),
        ("device", "gpu", "memory", "size > 0"),
        ("device", "gpu", "flops", "float > 0"),
        ("placement", "m_sct", "threshold", "float in (0, 1)"),
    ],
)
def test_declared_ranges(namespace: str, kind_name: str, param_name: str, declared: str) -> None:
    """What `seqc layers` prints as each param's type, ranges included."""
    spec = REGISTRY.get(namespace, kind_name)
    assert spec is not None
    p = spec.param(param_name)
    assert p is not None
    assert str(p.type) == declared


def test_attention_declares_heads_divide_width() -> None:
    for name in ("SelfAttention", "CrossAttention"):
        spec = REGISTRY.get("layer", name)
        assert spec is not None
        (rel,) = spec.relations
        assert (rel.text, rel.blame, rel.unless) == ("d % heads == 0", "heads", "head_dim")
        assert rel.check({"d": 256, "heads": 4, "head_dim": None}) is True
        assert rel.check({"d": 256, "heads": 3, "head_dim": None}) is False
        assert rel.check({"d": 256, "heads": 3, "head_dim": 64}) is None  # not applicable


@pytest.mark.parametrize("spec", [k for k in ALL_KINDS if k.relations], ids=_kid)
def test_relations_hold_for_defaults(spec: KindSpec) -> None:
    """A kind's own defaults never break its relations (where they decide them alone)."""
    defaults = {p.name: p.default for p in spec.params if not p.required}
    for rel in spec.relations:
        assert rel.check(defaults) is not False, f"{_kid(spec)}: `{rel.text}`"
