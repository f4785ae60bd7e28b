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
import optax
from reference_lm import Config, _layer_norm, _positions


def from_seqc(params: dict[str, jax.Array], cfg: Config) -> dict[str, Any]:
    """seqc's params (named by layer path) as this model's tree, q/k/v side by side."""

    def dense(prefix: str) -> dict[str, jax.Array]:
        return {"w": params[f"{prefix}.w"], "b": params[f"{prefix}.b"]}

    def norm(prefix: str) -> dict[str, jax.Array]:
        return {"scale": params[f"{prefix}.scale"], "bias": params[f"{prefix}.bias"]}

    blocks = []
    for i in range(cfg.layers):
        p = f"blocks.{i}"
        qkv = [dense(f"{p}.attn.{n}") for n in ("q", "k", "v")]
        blocks.append(
            {
                "norm1": norm(f"{p}.norm1"),
                "qkv": {
                    "w": jnp.concatenate([x["w"] for x in qkv], axis=1),
                    "b": jnp.concatenate([x["b"] for x in qkv]),
                },
                "o": dense(f"{p}.attn.o"),
                "norm2": norm(f"{p}.norm2"),
                "w1": dense(f"{p}.mlp.w1"),
                "w2": dense(f"{p}.mlp.w2"),
            }
        )
    return {
        "embed": params["embed.table"],
        "blocks": blocks,
        "norm": norm("norm"),
        "out_bias": params["out.b"],
    }


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


def _logits(params: dict[str, Any], ids: jax.Array, cfg: Config) -> jax.Array:
    x = params["embed"][ids] * math.sqrt(cfg.d) + _positions(ids.shape[1], cfg.d)
    for p in params["blocks"]:
        x = x + _attention(p, _layer_norm(p["norm1"], x, cfg.eps), cfg.heads)
        h = _layer_norm(p["norm2"], x, cfg.eps)
        h = jax.nn.gelu(h @ p["w1"]["w"] + p["w1"]["b"], approximate=False)
        x = x + h @ p["w2"]["w"] + p["w2"]["b"]
    x = _layer_norm(params["norm"], x, cfg.eps)
    return x @ params["embed"].T + params["out_bias"]


def loss_fn(params: dict[str, Any], batch: dict[str, jax.Array], cfg: Config) -> jax.Array:
    logp = jax.nn.log_softmax(_logits(params, batch["inputs"], cfg), axis=-1)
    nll = -jnp.take_along_axis(logp, batch["targets"][..., None], axis=-1)[..., 0]
    mask = batch["mask"].astype(jnp.float32)
    return jnp.sum(nll * mask) / jnp.maximum(jnp.sum(mask), 1.0)


class TightLM:
    """`state(params)` -> state; `train_step(state, batch)` -> (state, loss), jitted, donated;
    adam after clipping the global norm, as the spec trains."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.tx = optax.chain(optax.clip_by_global_norm(cfg.clip_norm), optax.adam(cfg.lr))
        self.train_step = jax.jit(self._step, donate_argnums=(0,))
        self.loss = jax.jit(lambda params, batch: loss_fn(params, batch, cfg))

    def state(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"params": params, "opt_state": self.tx.init(params)}

    def _step(
        self, state: dict[str, Any], batch: dict[str, jax.Array]
    ) -> tuple[dict[str, Any], jax.Array]:
        loss, grads = jax.value_and_grad(loss_fn)(state["params"], batch, self.cfg)
        updates, opt_state = self.tx.update(grads, state["opt_state"], state["params"])
        return {
            "params": optax.apply_updates(state["params"], updates),
            "opt_state": opt_state,
        }, loss
