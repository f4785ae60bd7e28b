"""A pipeline's params as they live on its devices: one flat buffer per stage, stacked and split
over the mesh's `stage` axis (`StagedParams`), yet read by name like any model's params.

Why a buffer: a jitted program's arrays all span the same devices, so a param cannot sit on its
stage's devices alone; a [stages, n] array split over the stage axis can, each row a stage's
params end to end (padded to the longest stage, and to a multiple of the fsdp axis, which
splits each row further). A param that several stages read (a tied embedding, read by the
first stage and by the last stage's loss) is kept whole on every device instead (`shared`);
the transpose of that replication sums its gradient over the stages.

`StagedParams` is a pytree (its leaves the buffer and the shared arrays, so optax and jit see
arrays) and a read-only mapping by param name (a slice of the buffer, reshaped), so the run
commands' `state["params"]` reads as every backend's. Checkpoints hold params by name
(`portable`): one written by a pipeline of S stages restores onto any other stage count, or
onto one device, and `seqc export` reads it like any other.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


@dataclass(frozen=True)
class Slot:
    name: str
    stage: int
    offset: int
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class Layout:
    """Where each stage-local param lives in the buffer, and which params are shared."""

    slots: tuple[Slot, ...]
    shared: tuple[str, ...]
    stages: int
    width: int
    """Floats per stage row (the longest stage's, padded to the fsdp axis)."""

    @staticmethod
    def of(
        owners: Mapping[str, set[int]],
        shapes: Mapping[str, tuple[int, ...]],
        dtypes: Mapping[str, Any],
        stages: int,
        multiple: int = 1,
    ) -> Layout:
        """Each float32 param read by one stage packed into that stage's row; the rest shared."""
        used = [0] * stages
        slots, shared = [], []
        for name in shapes:
            owner = owners.get(name, set())
            if len(owner) != 1 or np.dtype(dtypes[name]) != np.float32:
                shared.append(name)
                continue
            (k,) = owner
            slots.append(Slot(name, k, used[k], tuple(shapes[name])))
            used[k] += slots[-1].size
        width = max([*used, 1])
        width = -(-width // multiple) * multiple
        return Layout(tuple(slots), tuple(shared), stages, width)

    @functools.cached_property
    def by_name(self) -> dict[str, Slot]:
        """Built once: every param read while a step is traced looks its slot up here."""
        return {s.name: s for s in self.slots}

    def stage_slots(self, k: int) -> list[Slot]:
        return [s for s in self.slots if s.stage == k]

    def pack(self, params: Mapping[str, Any]) -> tuple[np.ndarray, dict[str, Any]]:
        """Host params by name -> (the [stages, width] buffer, the shared params)."""
        buf = np.zeros((self.stages, self.width), np.float32)
        for s in self.slots:
            buf[s.stage, s.offset : s.offset + s.size] = np.asarray(params[s.name]).ravel()
        return buf, {n: params[n] for n in self.shared}


def unpack_row(row: Any, slots: list[Slot]) -> dict[str, Any]:
    """One stage's params from its row of the buffer (inside a traced stage)."""
    return {s.name: row[s.offset : s.offset + s.size].reshape(s.shape) for s in slots}


@jax.tree_util.register_pytree_node_class
class StagedParams(Mapping[str, Any]):
    """The buffer and the shared params, readable by name (see the module's docstring)."""

    def __init__(self, packed: Any, shared: dict[str, Any], layout: Layout) -> None:
        self.packed = packed
        self.shared = shared
        self.layout = layout

    def tree_flatten(self) -> tuple[tuple[Any, dict[str, Any]], Layout]:
        return (self.packed, self.shared), self.layout

    @classmethod
    def tree_unflatten(cls, layout: Layout, children: tuple[Any, Any]) -> StagedParams:
        return cls(children[0], children[1], layout)

    def __getitem__(self, name: str) -> Any:
        if name in self.shared:
            return self.shared[name]
        s = self.layout.by_name[name]
        return jnp.reshape(self.packed[s.stage, s.offset : s.offset + s.size], s.shape)

    def __iter__(self) -> Iterator[str]:
        yield from (s.name for s in self.layout.slots)
        yield from self.shared

    def __len__(self) -> int:
        return len(self.layout.slots) + len(self.shared)

    def __contains__(self, name: object) -> bool:
        return name in self.shared or name in self.layout.by_name


def _is_staged(x: Any) -> bool:
    return isinstance(x, StagedParams)


def portable(tree: Any, host: bool = False) -> Any:
    """`tree` with every `StagedParams` (the params, and each optimizer moment shaped like
    them) made a dict by name: what a checkpoint holds. With `host`, those as numpy arrays
    (the shapes a restore reads into, whatever sharding the names' slices would have)."""

    def named(x: StagedParams) -> dict[str, Any]:
        if not (host or getattr(x.packed, "is_fully_addressable", True)):  # across processes
            return {k: x[k] for k in x}
        # sliced on the host: slicing the device buffer compiles a program for each slice
        # (about 2 CPU-s at a tiny 4-stage model's first save)
        buf = np.asarray(x.packed)
        rows = {}
        for k in range(x.layout.stages):
            rows |= unpack_row(buf[k], x.layout.stage_slots(k))
        return rows | {k: np.asarray(v) if host else v for k, v in x.shared.items()}

    if not any(_is_staged(x) for x in jax.tree.leaves(tree, is_leaf=_is_staged)):
        return tree
    return jax.tree.map(lambda x: named(x) if _is_staged(x) else x, tree, is_leaf=_is_staged)


def from_portable(like: Any, tree: Any) -> Any:
    """`tree` (params by name where `like` has `StagedParams`) packed as `like`, each array on
    the sharding of `like`'s."""

    if not any(_is_staged(x) for x in jax.tree.leaves(like, is_leaf=_is_staged)):
        return tree

    def back(proto: Any, value: Any) -> Any:
        if not _is_staged(proto):
            sharding = getattr(proto, "sharding", None)
            return jax.device_put(value, sharding) if sharding is not None else value
        buf, shared = proto.layout.pack({k: np.asarray(v) for k, v in value.items()})
        packed = jax.device_put(buf, proto.packed.sharding)
        shared = {
            k: jax.device_put(np.asarray(v), proto.shared[k].sharding) for k, v in shared.items()
        }
        return StagedParams(packed, shared, proto.layout)

    return jax.tree.map(back, like, tree, is_leaf=_is_staged)
