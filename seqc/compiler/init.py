"""Initial values of a graph's params, on the host: the same arrays for every backend.

Each param's values depend only on the seed and its layer path (a hash of the name seeds its own
generator), not on creation order: adding or reordering unrelated layers leaves a param's
initial values alone, and a run on JAX and one on TF from the same seed start from the same
weights. Drawn with numpy, so no framework is loaded to initialise another one's model.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

from seqc.compiler.graph import Graph, Param
from seqc.spec.errors import CheckError


def _generator(seed: int, name: str) -> np.random.Generator:
    digest = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, digest])


def init_param(p: Param, seed: int) -> np.ndarray:
    shape = tuple(int(d) for d in p.type.shape)
    kind, scale = p.init.kind, p.init.scale
    if kind == "zeros":
        return np.zeros(shape, np.float32)
    if kind == "ones":
        return np.ones(shape, np.float32)
    rng = _generator(seed, p.name)
    if kind == "normal":
        return (scale * rng.standard_normal(shape, np.float32)).astype(np.float32)
    if kind == "uniform":
        return rng.uniform(-scale, scale, shape).astype(np.float32)
    if kind == "glorot":
        fan_in, fan_out = shape[-2] if len(shape) > 1 else shape[0], shape[-1]
        limit = scale * math.sqrt(6.0 / (fan_in + fan_out))
        return rng.uniform(-limit, limit, shape).astype(np.float32)
    raise CheckError(
        f"param `{p.name}` has an unknown initializer `{kind}`",
        span=p.span,
        code="unknown-initializer",
        expected="zeros, ones, normal, uniform or glorot",
        found=kind,
    )


def init_params(graph: Graph, seed: int) -> dict[str, np.ndarray]:
    """Every param of the graph, by layer path, float32."""
    return {name: init_param(p, seed) for name, p in graph.params.items()}
