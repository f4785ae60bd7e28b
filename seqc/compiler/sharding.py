"""How a model's params are split over a device mesh: the sharding plan of a compiled task.

The mesh (`distribution.mesh`) names up to four axes besides pipeline stages: `data` (each
device a slice of the batch), `fsdp` (params, gradients and optimizer state split in the ZeRO-3 /
FSDP manner, the batch split too), `expert` (a mixture of experts' experts, GShard style: each
device holds E / n of them; the batch is split on it too, and the tokens dispatched to an
expert go to its device, an all-to-all that XLA makes from the layout the lowering asks for)
and `model` (tensor parallel, Megatron style). A param's partition spec gives, per dimension,
the mesh axis it is split on or None. Specs come from:

1. defaults per layer kind (`DEFAULTS`), which a user rarely needs to touch: q, k, v and the first
   feed-forward matrix split by columns on `model`, the attention output and the second
   feed-forward matrix by rows; embedding tables and the output softmax split on the vocabulary;
2. the user's rules, `distribution.shard = {"blocks.*.mlp.w1.w": [none, "model"]}`: a glob over
   param paths to a spec, overriding the defaults (the last matching rule wins);
3. `fsdp`: every param not already split on it is split on its first free dimension that the
   axis divides (params too small for that stay replicated).

An axis the mesh lacks, or of size 1, is dropped from a spec, so the same rules serve every mesh.
A dimension its axis does not divide is an error at the rule (or at the layer, for a default),
with both numbers. The plan is data: JAX turns it into `NamedSharding`s (`seqc.backends.jax`),
`seqc show --sharding` prints it. Nothing of the model's lowering changes for the sharded case:
the compiler of the backend (XLA's SPMD partitioner) splits the program from the params' and
the batch's shardings.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from seqc.compiler.config import OptimizerConfig
from seqc.compiler.graph import DTYPE_BYTES, Graph
from seqc.compiler.origins import notes_at, where
from seqc.compiler.tables import show_bytes
from seqc.resolve.experiment import ResolvedExperiment
from seqc.resolve.layers.instance import LayerInstance
from seqc.spec.errors import CheckError, did_you_mean
from seqc.spec.ir import Span
from seqc.spec.types import parse_size

if TYPE_CHECKING:
    from seqc.compiler.pipeline.plan import PipelinePlan

AXES = ("stage", "data", "fsdp", "expert", "model")
"""Mesh axes in the order the device array is laid out (the model axis innermost: its devices
exchange the most, so they are neighbours; pipeline stages outermost: they exchange least,
one micro-batch's activations at a time)."""
BATCH_AXES = ("data", "fsdp", "expert")
"""The axes the batch's rows are split over. `expert` too, as GShard does: each device
dispatches its own rows' tokens and an all-to-all takes them to their experts' devices."""

Spec = tuple[str | None, ...]
M = "model"
_COLUMNS: Spec = (None, M)
_ROWS: Spec = (M, None)
_VECTOR: Spec = (M,)
_ATTENTION = {
    "q.w": _COLUMNS,
    "k.w": _COLUMNS,
    "v.w": _COLUMNS,
    "q.b": _VECTOR,
    "k.b": _VECTOR,
    "v.b": _VECTOR,
    "o.w": _ROWS,
}
DEFAULTS: dict[str, dict[str, Spec]] = {
    "SelfAttention": _ATTENTION,
    "CrossAttention": _ATTENTION,
    "FeedForward": {
        "w1.w": _COLUMNS,
        "w1.b": _VECTOR,
        "wg.w": _COLUMNS,
        "wg.b": _VECTOR,
        "w2.w": _ROWS,
    },
    "MoE": {  # experts split on `expert`, each expert's MLP Megatron-style on `model`
        "w1": ("expert", None, M),
        "b1": ("expert", M),
        "w2": ("expert", M, None),
        "b2": ("expert", None),
    },
    "Embedding": {"table": _ROWS},
    "Softmax": {"w": _COLUMNS, "b": _VECTOR},
}
"""Layer kind -> the param's name inside the layer -> its spec (Megatron-style). Everything
else is replicated, or split on `fsdp`."""


@dataclass(frozen=True)
class ParamShard:
    name: str
    shape: tuple[int, ...]
    spec: Spec
    origin: str
    """Where the spec came from: a layer kind's default, a rule, `fsdp`, or `replicated`."""
    itemsize: int = 4

    def device_bytes(self, mesh: Mapping[str, int]) -> int:
        """Bytes of this param on one device."""
        n = math.prod(self.shape) * self.itemsize
        return n // math.prod(mesh[a] for a in self.spec if a is not None)


@dataclass
class ShardingPlan:
    """The mesh and every param's partition spec."""

    mesh: dict[str, int]
    params: dict[str, ParamShard] = field(default_factory=dict)
    span: Span | None = None
    """The spec line of `distribution.mesh`, for errors about the mesh."""
    pipeline: PipelinePlan | None = None
    """The stages of a mesh with a `stage` axis (`seqc.compiler.pipeline`); None without."""

    @property
    def devices(self) -> int:
        return math.prod(self.mesh.values())

    @property
    def trivial(self) -> bool:
        """One device: nothing to shard."""
        return self.devices == 1

    @property
    def axes(self) -> tuple[str, ...]:
        return tuple(self.mesh)

    @property
    def batch_split(self) -> int:
        """Into how many slices each batch's rows are split."""
        return math.prod(self.mesh.get(a, 1) for a in BATCH_AXES)

    def shard_shape(self, name: str) -> tuple[int, ...]:
        p = self.params[name]
        return tuple(d // (self.mesh[a] if a else 1) for d, a in zip(p.shape, p.spec, strict=True))

    def device_bytes(self) -> int:
        return sum(p.device_bytes(self.mesh) for p in self.params.values())

    def training_bytes(self, slots: int) -> int:
        """Bytes per device of what a step keeps: the params, their gradients and `slots`
        optimizer tensors per param (Adam: two), all split alike. Activations come on top."""
        return self.device_bytes() * (2 + slots)


def mesh_of(resolved: ResolvedExperiment) -> dict[str, int]:
    """The experiment's mesh in `AXES` order (axes of size 1 kept: they name the layout)."""
    asked = dict(resolved.config["distribution"]["mesh"])
    return {a: int(asked[a]) for a in AXES if a in asked}


def _layer_kinds(model: LayerInstance) -> dict[str, LayerInstance]:
    """Layer path -> its instance, for every layer of a model's tree."""
    found: dict[str, LayerInstance] = {}
    stack = [model]
    while stack:
        inst = stack.pop()
        found[inst.path] = inst
        stack.extend(inst.children)
    return found


def plan_sharding(
    graph: Graph, resolved: ResolvedExperiment, task: str, *, memory: bool = True
) -> ShardingPlan:
    """The sharding plan of a task's graph on the experiment's mesh; with `memory`, a plan
    whose share per device does not fit the devices listed is refused (`check_memory`)."""
    mesh = mesh_of(resolved)
    dist = resolved.config["distribution"]
    plan = ShardingPlan(mesh, span=where(resolved, "distribution.mesh"))
    live = {a for a, n in mesh.items() if n > 1}
    layers = _layer_kinds(resolved.models[task])
    rules = {str(k): tuple(v) for k, v in dict(dist.get("shard") or {}).items()}
    rule_span = where(resolved, "distribution.shard")
    used: set[str] = set()
    for name, p in graph.params.items():
        shape = tuple(int(d) for d in p.type.shape)
        local = name[len(p.layer) + 1 :] if p.layer else name
        inst = layers.get(p.layer)
        spec: Spec = (None,) * len(shape)
        origin, located = "replicated", inst.span if inst is not None else p.span
        default = DEFAULTS.get(inst.kind, {}).get(local) if inst is not None else None
        if default is not None and len(default) == len(shape):
            spec, origin = default, f"{inst.kind} default"  # type: ignore[union-attr]
        for pattern, rule in rules.items():
            if fnmatch.fnmatchcase(name, pattern):
                used.add(pattern)
                if len(rule) != len(shape):
                    raise CheckError(
                        f"sharding rule `{pattern}` gives {len(rule)} axes to `{name}`, which "
                        f"has {len(shape)} dimensions",
                        span=rule_span,
                        code="bad-shard-rule",
                        expected=f"a list of {len(shape)} (an axis or none each)",
                        found=str(list(rule)),
                    )
                spec, origin, located = rule, f"rule {pattern!r}", rule_span
        spec = tuple(a if a in live else None for a in spec)
        if "fsdp" in live and "fsdp" not in spec:
            free = [i for i, a in enumerate(spec) if a is None and shape[i] % mesh["fsdp"] == 0]
            if free:
                spec = tuple("fsdp" if i == free[0] else a for i, a in enumerate(spec))
                origin = f"{origin}, fsdp" if origin != "replicated" else "fsdp"
        _check_divides(name, shape, spec, mesh, located, origin)
        itemsize = DTYPE_BYTES.get(p.type.dtype, 4)
        plan.params[name] = ParamShard(name, shape, spec, origin, itemsize)
    if "expert" in live and not any("expert" in p.spec for p in plan.params.values()):
        raise CheckError(
            f"the mesh's expert axis ({mesh['expert']}) splits nothing: `{task}`'s model has no "
            "MoE layer",
            span=plan.span,
            code="no-experts",
            hint="drop the expert axis, or use MoE layers in the model",
        )
    unused = [r for r in rules if r not in used]
    if unused:
        near = did_you_mean(unused[0], list(plan.params))
        raise CheckError(
            f"sharding rule `{unused[0]}` matches no param of `{task}`",
            span=rule_span,
            code="unused-shard-rule",
            expected="a glob over the params' layer paths, e.g. `blocks.*.attn.q.w`",
            found=f"`{unused[0]}`",
            suggestion=near,
            hint="name a param by its layer path, or drop the rule: `seqc show FILE -e EXP "
            "--sharding --set distribution.shard={}` lists every param",
        )
    if memory:
        check_memory(plan, resolved)
    return plan


MOST_SLOTS = 2
"""The most state tensors per param an optimizer keeps (Adam's two moments;
`seqc.compiler.config.OptimizerConfig.slots`)."""


def device_memory(resolved: ResolvedExperiment) -> int | None:
    """The memory of the smallest device `distribution.devices` lists, in bytes; None when it
    lists none (the run uses whatever the backend finds)."""
    devices = resolved.config["distribution"]["devices"] or []
    sizes = [parse_size(str(d.args["memory"])) for d in devices if "memory" in d.args]
    known = [n for n in sizes if n is not None]
    return min(known) if known else None


def check_memory(plan: ShardingPlan, resolved: ResolvedExperiment) -> None:
    """A step over a mesh keeps each device's share of the params, their gradients and the
    optimizer's state; more than the devices listed hold is refused at the devices' line,
    before a run that cannot fit starts. (One device's run is not checked here: it is not
    planned over a mesh, and a placement checks its own memory.)"""
    limit = device_memory(resolved)
    if plan.trivial or limit is None or plan.training_bytes(MOST_SLOTS) <= limit:
        return
    if plan.mesh.get("stage", 1) > 1:  # each stage holds its own layers: checked per stage
        return  # (`seqc.compiler.pipeline.plan.check_stage_memory`)
    slots = OptimizerConfig.of(resolved.config["train"]["optimizer"]).slots
    need = plan.training_bytes(slots)
    if need <= limit:
        return
    at = where(resolved, "distribution.devices")
    state = f"gradients and {slots} optimizer tensor(s) per param" if slots else "gradients"
    raise CheckError(
        f"each device of the mesh keeps {show_bytes(need)} of params, {state} "
        f"({need / limit:.0%} of the {show_bytes(limit)} a device has), before any activation",
        span=at,
        code="device-memory",
        expected=f"at most {show_bytes(limit)} per device",
        found=f"{show_bytes(need)} ({show_bytes(plan.device_bytes())} of params)",
        hint="split the params over more devices (an fsdp or model axis in distribution.mesh), "
        "list devices with more memory, or shrink the model",
        notes=notes_at(resolved, at, ("distribution.mesh", "the mesh is set here")),
    )


def _check_divides(
    name: str,
    shape: tuple[int, ...],
    spec: Spec,
    mesh: Mapping[str, int],
    where: Span | None,
    origin: str,
) -> None:
    seen: set[str] = set()
    for dim, (size, axis) in enumerate(zip(shape, spec, strict=True)):
        if axis is None:
            continue
        if axis in seen:
            raise CheckError(
                f"`{name}` is split on mesh axis `{axis}` twice ({origin})",
                span=where,
                code="bad-shard-rule",
                found=str(list(spec)),
            )
        seen.add(axis)
        if axis == "expert" and size % mesh[axis]:
            raise CheckError(
                f"the mesh's expert axis ({mesh[axis]}) does not divide the {size} experts of "
                f"`{name.rsplit('.', 1)[0]}`",
                span=where,
                code="expert-not-divisible",
                expected=f"a number of experts divisible by {mesh[axis]}",
                found=f"{size} experts",
                hint="make the expert axis a divisor of every MoE layer's experts",
            )
        if size % mesh[axis]:
            raise CheckError(
                f"dimension {dim} of `{name}` ({size}) is not divided by mesh axis `{axis}` "
                f"({mesh[axis]}), as its {origin} splits it",
                span=where,
                code="shard-not-divisible",
                expected=f"a size divisible by {mesh[axis]}",
                found=str(size),
                hint="change the mesh, the layer's size, or give the param a rule in "
                "distribution.shard",
            )


def check_devices(plan: ShardingPlan, found: int, what: str) -> None:
    """The mesh's product must be the number of devices a run uses."""
    if plan.devices != found:
        shown = ", ".join(f"{a}: {n}" for a, n in plan.mesh.items())
        raise CheckError(
            f"the mesh {{{shown}}} needs {plan.devices} devices, but {what} has {found}",
            span=plan.span,
            code="mesh-devices",
            expected=f"{plan.devices} devices",
            found=str(found),
            hint="make the mesh's product the number of devices (processes x devices each)",
        )


def check_batches(plan: ShardingPlan, batch_sizes: Any, span: Span | None) -> None:
    """Every batch's rows must split evenly over the batch axes."""
    split = plan.batch_split
    for rows in sorted(set(int(b) for b in batch_sizes)):
        if rows % split:
            raise CheckError(
                f"batches of {rows} rows do not split over the mesh's data axes ({split} slices)",
                span=span,
                code="batch-not-divisible",
                expected=f"batch sizes divisible by {split}",
                found=str(rows),
                hint="change the buckets' batch sizes (or train.batch_size), or the mesh",
            )
