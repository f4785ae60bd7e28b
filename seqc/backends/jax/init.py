"""Named, seeded initializers: each param's values depend only on the seed and its name.

Folding a hash of the layer path into the key (rather than splitting keys in creation order) keeps
a param's initial values the same when unrelated layers are added or reordered, and lets every
backend reproduce them.
"""

from __future__ import annotations

import hashlib
import math

import jax
import jax.numpy as jnp

from seqc.compiler.graph import Graph, Param


def _key(seed: int, name: str) -> jax.Array:
    digest = int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")
    return jax.random.fold_in(jax.random.PRNGKey(seed), digest)


def init_param(p: Param, seed: int) -> jax.Array:
    shape = tuple(int(d) for d in p.type.shape)
    key = _key(seed, p.name)
    kind, scale = p.init.kind, p.init.scale
    if kind == "zeros":
        return jnp.zeros(shape, jnp.float32)
    if kind == "ones":
        return jnp.ones(shape, jnp.float32)
    if kind == "normal":
        return scale * jax.random.normal(key, shape, jnp.float32)
    if kind == "uniform":
        return jax.random.uniform(key, shape, jnp.float32, -scale, scale)
    if kind == "glorot":
        fan_in, fan_out = shape[-2] if len(shape) > 1 else shape[0], shape[-1]
        limit = scale * math.sqrt(6.0 / (fan_in + fan_out))
        return jax.random.uniform(key, shape, jnp.float32, -limit, limit)
    raise ValueError(f"unknown initializer {kind}")


def init_params(graph: Graph, seed: int) -> dict[str, jax.Array]:
    return {name: init_param(p, seed) for name, p in graph.params.items()}
