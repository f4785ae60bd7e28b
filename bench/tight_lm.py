"""A tight hand-written Transformer LM in JAX + optax: the contender seqc's passes must beat.

The model of `reference_lm.py` (the same function, to the last bias), written the way a
performance-minded person writes it: one fused [d, 3d] q/k/v matrix per layer read in one
product and split, the attention scale folded into the queries' product, nothing else
different. Its params are built from seqc's (the fused matrix is the concatenation of seqc's
`attn.q`, `attn.k` and `attn.v`), so `passes_throughput.py` can check that it computes seqc's
loss on seqc's own initial params before timing anything. Nothing here imports seqc.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import reference_lm
from reference_lm import Config


def from_reference(params: dict[str, Any]) -> dict[str, Any]:
    """The reference model's params (`reference_lm.py`'s tree; `train_throughput.py` maps
    seqc's into it) with each block's q, k and v side by side in one matrix."""
    blocks = []
    for p in params["blocks"]:
        qkv = [p[n] for n in ("q", "k", "v")]
        fused = {
            "w": jnp.concatenate([x["w"] for x in qkv], axis=1),
            "b": jnp.concatenate([x["b"] for x in qkv]),
        }
        blocks.append({k: v for k, v in p.items() if k not in ("q", "k", "v")} | {"qkv": fused})
    return {**params, "blocks": blocks}


def _attention(p: dict[str, Any], x: jax.Array, heads: int) -> jax.Array:
    b, t, d = x.shape
    hd = d // heads
    qkv = (x @ p["qkv"]["w"] + p["qkv"]["b"]).reshape(b, t, 3, heads, hd)
    q, k, v = qkv[:, :, 0] * (1.0 / math.sqrt(hd)), qkv[:, :, 1], qkv[:, :, 2]
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k)
    causal = jnp.tril(jnp.ones((t, t), jnp.bool_))
    probs = jax.nn.softmax(jnp.where(causal, scores, -1e9), axis=-1)
    ctx = jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, t, d)
    return ctx @ p["o"]["w"] + p["o"]["b"]


class TightLM(reference_lm.ReferenceLM):
    """The reference's training (adam after clipping the global norm, as the spec trains)
    with this model's attention; its params come from `from_reference`."""

    def __init__(self, cfg: Config) -> None:
        super().__init__(cfg, _attention)
