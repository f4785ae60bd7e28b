"""The JAX backend's interpreter context (`Ctx`: symbol sizes, rng, training flag, compute dtype)
and the dtype table its primitives cast with (`DTYPES`).

Its own module in every backend, so the three read alike: in TF both the primitive table and the
recurrence it runs (`seqc.backends.tf.scan`) need it, in ONNX both the table and the walk that
emits a scan's body (`seqc.backends.onnx.emit`), and a module of their own keeps those pairs
from importing each other. JAX runs its scan inside `ops`, so here it is layout, not necessity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from seqc.backends import interpret
from seqc.backends.dims import size as _size

DTYPES = {
    "float32": jnp.float32,
    "bfloat16": jnp.bfloat16,
    "float16": jnp.float16,
    "int32": jnp.int32,
    "int64": jnp.int64,
    "bool": jnp.bool_,
}


@dataclass
class Ctx(interpret.Ctx):
    """The interpreter's context, with JAX's randomness and compute dtype."""

    rng: jax.Array | None = None
    compute_dtype: Any = jnp.float32
    counter: int = 0
    rows: tuple[Any, int] | None = None
    """(index, count) when this program computes one device's rows of a batch split `count`
    ways (`seqc.backends.jax.data_parallel`): random masks are drawn for the whole batch and
    this device keeps its rows, so they do not depend on how the batch is split."""

    keeps: Any = None
    """The training step's keep probabilities (1 - rate) of its dropouts, an argument of the
    step in the order of `rates` (`seqc.backends.jax.train.Noise`). Why not constants of the
    program: the trials of a sweep that differ only in dropout then compile one step, which a
    compilation cache shares between them (`seqc.run.sweep.compile_cache`)."""
    rates: tuple[float, ...] = ()
    mesh: Any = None
    """The step's `jax.sharding.Mesh` when it runs as one SPMD program over several devices
    (None on one device, and inside `shard_map`, where each device runs its own program)."""

    def laid_out(self, x: jax.Array, layout: tuple[str | None, ...]) -> jax.Array:
        """`x` constrained to a layout by role (`seqc.compiler.lower.moe.LAYOUT`): "experts"
        on the mesh's `expert` axis, "rows" on its other batch axes, None whole. The
        identity without a mesh, or where the mesh has none of those axes."""
        if self.mesh is None:
            return x
        from jax.sharding import NamedSharding, PartitionSpec

        from seqc.compiler.sharding import BATCH_AXES

        live = {a for a, n in self.mesh.shape.items() if n > 1}
        rows = tuple(a for a in BATCH_AXES if a in live and a != "expert") or None
        roles = {"experts": "expert" if "expert" in live else None, "rows": rows, None: None}
        spec = PartitionSpec(*(roles[r] for r in layout))
        if all(s is None for s in spec):
            return x
        return jax.lax.with_sharding_constraint(x, NamedSharding(self.mesh, spec))

    def keep(self, rate: float) -> Any:
        """A dropout's keep probability: the step's argument for `rate`, or the constant."""
        if self.keeps is None or rate not in self.rates:
            return 1.0 - rate
        return self.keeps[self.rates.index(rate)]

    def next_key(self) -> jax.Array:
        assert self.rng is not None, "dropout in training needs an rng"
        self.counter += 1
        return jax.random.fold_in(self.rng, self.counter)

    def shape(self, shape: tuple, exact: bool = False) -> tuple[int, ...]:
        """Sizes of a shape's dims. A dim no input binds (a convolution's output length,
        "((N-400)//160+1)") is -1, which a reshape infers (one such dim at most); with `exact`
        (a shape nothing can infer: `fill`'s) it is computed from the bound ones."""
        return tuple(_size(d, self.dims, exact) for d in shape)
