"""Typed configuration at the backend contract: the `train` block and a task's `decode`.

Why: backends and the run loop used to read the resolved spec as a dict, by string
(`train["optimizer"].args["beta1"]`), and restated the catalogue's defaults wherever a key might
be missing (`clip_norm` 0.0, `accumulate` 1, `keep_checkpoints` 3, each several times, some
disagreeing with the catalogue). Here `compile_task` reads the resolved values once into frozen
dataclasses, and backends receive those, never the resolved dict (nor `seqc.resolve` at all).

No field has a default: every one is read from the resolved values, which the resolver has
filled with the catalogue's defaults (`seqc.spec.catalogue`), so the catalogue stays the only
table of defaults. A value missing from what is given is a `KeyError` here, at construction,
never a silent literal at a use site.

Each kind of the catalogue's `optimizer`, `schedule`, `decode` and `init` namespaces is one
dataclass whose fields are exactly its params, by the same names (`test_typed_config.py`
checks them against the catalogue), so a backend asks `isinstance(opt, Adam)` and reads
`opt.beta1`, and a param added to the catalogue without its field fails that test.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal, Self, TypeVar

from seqc.resolve.values import CallValue
from seqc.spec.kinds import REGISTRY

KINDS: dict[str, dict[str, type[KindConfig]]] = {}
"""Namespace -> kind name -> its dataclass, in declaration order (filled by subclassing)."""


@dataclass(frozen=True)
class KindConfig:
    """A call of one of the catalogue's kinds, typed. A family (`OptimizerConfig`) names its
    namespace, a leaf (`Adam`) its kind: `class Adam(OptimizerConfig, kind="adam")`."""

    namespace: ClassVar[str]
    kind: ClassVar[str]

    def __init_subclass__(cls, namespace: str | None = None, kind: str | None = None) -> None:
        super().__init_subclass__()
        if namespace is not None:
            cls.namespace = namespace
            KINDS.setdefault(namespace, {})
        if kind is not None:
            cls.kind = kind
            KINDS[cls.namespace][kind] = cls

    @classmethod
    def of(cls, call: CallValue) -> Self:
        """The typed form of a resolved call of this family (every param present: the
        resolver filled in the catalogue's defaults)."""
        known = KINDS[cls.namespace]
        leaf = known.get(call.kind) if call.namespace == cls.namespace else None
        if leaf is None or not issubclass(leaf, cls):
            raise ValueError(f"{cls.namespace} `{call.kind}`: expected one of {', '.join(known)}")
        return _read(leaf, call.args)

    @classmethod
    def from_json(cls, value: Mapping[str, object]) -> Self:
        """The typed form of a call as `to_json` (or `seqc.resolve.values.to_json`) wrote it:
        an artifact's manifest, a run's `eval.json`."""
        args = value["args"]
        assert isinstance(args, Mapping), value
        import seqc.spec.catalogue  # noqa: F401  (fills REGISTRY)

        kind = str(value["kind"])
        # params the catalogue gained since the file was written take their defaults (an
        # artifact exported before `beam` had `lm` still reads)
        spec = REGISTRY.get(cls.namespace, kind)
        known = {} if spec is None else {p.name: p.default for p in spec.params if not p.required}
        return cls.of(CallValue(kind=kind, namespace=cls.namespace, args=known | dict(args)))

    def to_json(self) -> dict[str, object]:
        """`{"kind": ..., "args": {...}}`, the form the resolved call has in JSON
        (`seqc.resolve.values.to_json`), so files written from either read the same."""
        return {
            "kind": self.kind,
            "args": {f.name: _json(getattr(self, f.name)) for f in dataclasses.fields(self)},
        }


T = TypeVar("T")


def _read(cls: type[T], values: Mapping[str, object]) -> T:
    """`cls` with each field read from `values` by name, as its annotation says: a nested call
    becomes its dataclass, a list a tuple, a map a dict, an int where a float is declared a
    float. A missing name is a KeyError: nothing is filled in here."""
    hints = _hints(cls)
    return cls(**{f.name: _convert(values[f.name], hints[f.name]) for f in dataclasses.fields(cls)})


@functools.cache
def _hints(cls: type) -> dict[str, object]:
    return typing.get_type_hints(cls)


def _json(value: object) -> object:
    if isinstance(value, KindConfig):
        return value.to_json()
    if isinstance(value, tuple | list):
        return [_json(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _json(v) for k, v in value.items()}
    return value


def _convert(value: object, hint: object) -> object:
    if isinstance(value, CallValue):
        return _KINDS_BASE[value.namespace].of(value)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    family = _family(hint, args)
    if family is not None and isinstance(value, Mapping) and set(value) == {"kind", "args"}:
        return family.from_json(value)  # a nested call as `to_json` wrote it (a manifest's)
    if origin is tuple and isinstance(value, list | tuple):
        return tuple(_convert(v, args[0]) for v in value)
    if origin is Mapping and isinstance(value, Mapping):
        return {k: _convert(v, args[1]) for k, v in value.items()}
    floats = hint is float or (origin in (typing.Union, types.UnionType) and float in args)
    if floats and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _family(hint: object, args: tuple) -> type[KindConfig] | None:
    """The KindConfig family a field's annotation names (alone or with None), if any."""
    for t in (hint, *args):
        if isinstance(t, type) and issubclass(t, KindConfig):
            return t
    return None


# --- learning-rate schedules -------------------------------------------------------------------


@dataclass(frozen=True)
class ScheduleConfig(KindConfig, namespace="schedule"):
    """A learning rate as a function of the update count (`seqc.run.train.schedule` computes it on
    the host, so every backend steps with the same rates)."""


@dataclass(frozen=True)
class Constant(ScheduleConfig, kind="constant"):
    value: float


@dataclass(frozen=True)
class WarmupRsqrt(ScheduleConfig, kind="warmup_rsqrt"):
    peak: float
    warmup: int


@dataclass(frozen=True)
class LinearWarmup(ScheduleConfig, kind="linear_warmup"):
    peak: float
    warmup: int


@dataclass(frozen=True)
class Cosine(ScheduleConfig, kind="cosine"):
    peak: float
    warmup: int
    decay_steps: int | None
    """None: the rest of the training run after the warmup."""
    final: float


@dataclass(frozen=True)
class LinearDecay(ScheduleConfig, kind="linear_decay"):
    peak: float
    warmup: int
    decay_steps: int | None
    """None: the rest of the training run after the warmup."""
    final: float


@dataclass(frozen=True)
class Exponential(ScheduleConfig, kind="exponential"):
    initial: float
    rate: float
    every: int
    staircase: bool


@dataclass(frozen=True)
class Piecewise(ScheduleConfig, kind="piecewise"):
    boundaries: tuple[int, ...]
    values: tuple[float, ...]


LearningRate = float | ScheduleConfig
"""An optimizer's `lr`: a constant, or a schedule."""


# --- optimizers --------------------------------------------------------------------------------


@dataclass(frozen=True)
class OptimizerConfig(KindConfig, namespace="optimizer"):
    """An update rule and its learning rate. The backends build the rule without the rate
    (`seqc.backends.jax.optim`, `seqc.backends.tf.optim`) and step with the host's."""

    lr: LearningRate

    @property
    def slots(self) -> int:
        """State tensors the rule keeps per param (besides the shared update count): what a
        placement and a mesh's memory check count."""
        raise NotImplementedError(self.kind)


@dataclass(frozen=True)
class Adam(OptimizerConfig, kind="adam"):
    beta1: float
    beta2: float
    eps: float
    weight_decay: float
    """Coupled: added to the gradient (L2), unlike AdamW's."""
    lazy_rows: bool
    """Update only the rows a step gathered (`seqc.compiler.lazy_rows`)."""

    @property
    def slots(self) -> int:
        return 2


@dataclass(frozen=True)
class AdamW(OptimizerConfig, kind="adamw"):
    beta1: float
    beta2: float
    eps: float
    weight_decay: float
    """Decoupled: applied to the weights after Adam's direction."""

    @property
    def slots(self) -> int:
        return 2


@dataclass(frozen=True)
class Sgd(OptimizerConfig, kind="sgd"):
    momentum: float
    """0: plain SGD, no velocity kept."""
    nesterov: bool
    weight_decay: float

    @property
    def slots(self) -> int:
        return 1 if self.momentum else 0


@dataclass(frozen=True)
class Adagrad(OptimizerConfig, kind="adagrad"):
    initial_accumulator: float
    eps: float

    @property
    def slots(self) -> int:
        return 1


@dataclass(frozen=True)
class Adafactor(OptimizerConfig, kind="adafactor"):
    decay_rate: float
    beta1: float | None
    clip_threshold: float
    factored: bool
    scale_by_weight: bool

    @property
    def slots(self) -> int:
        return 1  # factored second moments: rows + columns, about one tensor


# --- decoding ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DecodeConfig(KindConfig, namespace="decode"):
    """How a trained sequence model generates: what every decoder (the host's, a backend's
    in-graph one, an artifact's) reads of a task's `decode`."""

    max_length: int
    """Output tokens at most, when no end-of-sequence comes first."""


@dataclass(frozen=True)
class WarpConfig(KindConfig, namespace="warp"):
    """Test-time speaker normalisation of a speech task's audio (`decode`'s `warp`)."""


@dataclass(frozen=True)
class VoiceWarp(WarpConfig, kind="voice_warp"):
    """Each speaker's audio resampled by the factor the model is most confident under
    (`seqc.run.decoding.voice_warp`)."""

    factors: tuple[float, ...]
    """The candidates, increasing; 1 leaves the audio as it is."""
    by: str
    """The manifest field naming who speaks; "" takes each utterance alone."""
    utterances: int
    """A speaker's first utterances (in the split's order) the factor is chosen on."""


@dataclass(frozen=True)
class Greedy(DecodeConfig, kind="greedy"):
    warp: WarpConfig | None = None
    """A speech task's test-time voice normalisation; None: none."""


@dataclass(frozen=True)
class Sample(DecodeConfig, kind="sample"):
    temperature: float
    top_k: int
    """0: no limit."""
    top_p: float
    """1: every token."""
    seed: int


@dataclass(frozen=True)
class Beam(DecodeConfig, kind="beam"):
    width: int
    length_penalty: float
    """GNMT's alpha; 0 ranks by log-probability alone."""
    lm: str | None = None
    """Shallow fusion's word LM (an artifact folder or a run directory); None: none."""
    lm_weight: float = 0.3
    length_bonus: float = 1.0
    warp: WarpConfig | None = None
    """A speech task's test-time voice normalisation; None: none."""


# --- warm starts -------------------------------------------------------------------------------


@dataclass(frozen=True)
class InitConfig(KindConfig, namespace="init"):
    """Where a warm start (`train.init_from`) takes its initial weights from."""


@dataclass(frozen=True)
class FromCheckpoint(InitConfig, kind="checkpoint"):
    path: str
    """A run directory or a checkpoints folder, relative to the spec."""
    map: Mapping[str, str]
    """Checkpoint pattern -> model pattern."""
    step: int | None
    """None: the newest checkpoint."""


_KINDS_BASE: dict[str, type[KindConfig]] = {
    "schedule": ScheduleConfig,
    "optimizer": OptimizerConfig,
    "decode": DecodeConfig,
    "warp": WarpConfig,
    "init": InitConfig,
}
"""The family that reads a nested call of each namespace."""


# --- the train block ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainConfig:
    """The experiment's `train` block: how the model is optimised, for how long, and what the
    run keeps. One per experiment; every task of a multi-task experiment trains under it."""

    optimizer: OptimizerConfig
    steps: int
    batch_size: int | None
    """None: batch sizes from the input block's buckets."""
    accumulate: int
    """Batches whose gradients are summed before each update (1: every batch updates)."""
    seed: int
    clip_norm: float
    """Global gradient norm clipped to; 0 turns clipping off."""
    compute_dtype: Literal["float32", "bfloat16"]
    checkpoint_every: int
    keep_checkpoints: int
    eval_every: int
    dev_translations: int
    patience: int
    log_every: int
    mix: Mapping[str, float]
    mix_by: Literal["sample", "round_robin", "sum"]
    lr_scale: Mapping[str, float]
    """Task -> its learning rate as a multiple of the schedule's; a task not named: 1."""
    init_from: InitConfig | None

    @classmethod
    def of(cls, train: Mapping[str, object]) -> TrainConfig:
        """The typed form of a resolved `train` block (`resolved.config["train"]`)."""
        return _read(cls, train)
