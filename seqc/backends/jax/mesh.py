"""A sharding plan (`seqc.compiler.sharding`) on JAX: a `jax.sharding.Mesh` over every device of
every process, and the `NamedSharding` of each param, of the optimizer state (each moment split
as its param), of the batches and of the rest (replicated).

The training step stays one `jax.jit` program: its inputs arrive sharded, its state keeps its
shardings (`out_shardings`), and XLA's SPMD partitioner splits the computation and inserts the
collectives. Batches are global: every process plans the same batch (the data order is a pure
function of seed and step), reads from disk only the rows its devices hold (`local_rows`), and
hands its devices those rows (`global_array`), so a run on any number of processes sees the
same data as on one.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from seqc.compiler.sharding import BATCH_AXES, ShardingPlan


class Sharded:
    """The shardings of one model's state and batches on one mesh."""

    def __init__(self, plan: ShardingPlan, tx: optax.GradientTransformation) -> None:
        self.plan = plan
        devices = np.asarray(jax.devices()[: plan.devices]).reshape(tuple(plan.mesh.values()))
        self.mesh = Mesh(devices, plan.axes)
        self.replicated = NamedSharding(self.mesh, PartitionSpec())
        self.params = {
            name: NamedSharding(self.mesh, PartitionSpec(*p.spec))
            for name, p in plan.params.items()
        }
        self.tx = tx
        self.batch_axes = tuple(a for a in BATCH_AXES if plan.mesh.get(a, 1) > 1) or None

    def batch(self, ndim: int) -> NamedSharding:
        """Rows split over the batch axes; the other dimensions whole."""
        return NamedSharding(self.mesh, PartitionSpec(self.batch_axes, *([None] * (ndim - 1))))

    def local_rows(self, rows: int) -> tuple[int, int] | None:
        """The rows [lo, hi) of a `rows`-row training batch that this process's devices
        hold, when they are one block and not all of it; None otherwise (every row is read)."""
        held = self.batch(2).addressable_devices_indices_map((rows, 1)).values()
        spans = sorted({(ix[0].indices(rows)[0], ix[0].indices(rows)[1]) for ix in held})
        lo, hi = spans[0][0], spans[-1][1]
        contiguous = all(a[1] >= b[0] for a, b in itertools.pairwise(spans))
        if not contiguous or (lo, hi) == (0, rows):
            return None
        return lo, hi

    def opt_state(self, opt_state: Any) -> Any:
        """The optimizer state's shardings: every param-shaped moment as its param, the rest
        (counts) replicated."""
        return optax.tree_map_params(
            self.tx,
            lambda _, sharding: sharding,
            opt_state,
            self.params,
            transform_non_params=lambda _: self.replicated,
            is_leaf=lambda x: isinstance(x, NamedSharding),
        )

    def state(self, state: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "params": self.params,
            "opt_state": self.opt_state(state["opt_state"]),
            "step": self.replicated,
            "rng": self.replicated,
        }

    def put_state(self, params: Mapping[str, Any], seed: int) -> dict[str, Any]:
        """A fresh state with these host params, every array on its shards."""
        put = {k: global_array(np.asarray(v), self.params[k]) for k, v in params.items()}
        shapes = jax.eval_shape(self.tx.init, put)
        opt_shardings = self.opt_state(shapes)
        opt_state = jax.jit(self.tx.init, out_shardings=opt_shardings)(put)
        rep = self.replicated
        return {
            "params": put,
            "opt_state": opt_state,
            "step": global_array(np.zeros((), np.int32), rep),
            "rng": global_array(np.asarray(jax.random.PRNGKey(seed + 1)), rep),
        }

    def put_batch(self, arrays: Mapping[str, np.ndarray], split: bool = True) -> dict[str, Any]:
        """A batch as global arrays: rows split over the batch axes (training), or whole on
        every device (evaluation batches, whose row counts the mesh need not divide)."""
        return {
            k: global_array(np.asarray(v), self.batch(np.ndim(v)) if split else self.replicated)
            for k, v in arrays.items()
        }


def global_array(value: np.ndarray, sharding: NamedSharding) -> jax.Array:
    """A global array from the same host value on every process: each process puts only the
    slices its devices hold."""
    return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])


def local(value: Any) -> Any:
    """A value of a replicated result, readable on this process (a global array spanning other
    processes' devices cannot be read whole)."""
    if isinstance(value, jax.Array) and not value.is_fully_addressable:
        return value.addressable_data(0)
    return value


class CollectiveFailed(RuntimeError):
    """A collective across processes (agreeing to stop, a barrier) that did not complete."""


GLOO_FAILED = re.compile(r"Gloo \w+ failed")
"""How gloo (JAX's CPU collectives across processes) reports a collective another process
left: `UNKNOWN: Gloo AllGather failed: ... Connection reset by peer`, raised as a `ValueError`
(by orbax's barriers too)."""


def lost_peer(error: BaseException) -> bool:
    """Whether `error` is the report of a collective across processes that failed: one of ours,
    the runtime's, or gloo's."""
    failed = (CollectiveFailed, jax.errors.JaxRuntimeError)
    return isinstance(error, failed) or bool(GLOO_FAILED.search(str(error)))


def barrier(name: str) -> None:
    """Every process of a multi-process run waits here (a no-op on one)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        try:
            multihost_utils.sync_global_devices(name)
        except Exception as e:  # jax raises a ValueError for a lost peer
            raise CollectiveFailed(str(e)) from e


def any_process(flag: bool) -> bool:
    """Whether `flag` is set on any process (each calls this, together); `flag` on one."""
    if jax.process_count() == 1:
        return flag
    from jax.experimental import multihost_utils

    try:
        return bool(np.max(multihost_utils.process_allgather(np.int32(flag))))
    except Exception as e:  # jax raises a ValueError here for a lost peer
        raise CollectiveFailed(str(e)) from e
