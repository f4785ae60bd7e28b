"""A hand-written Transformer LM in plain JAX + optax: the baseline of `train_throughput.py`.

The same function as the `.seq` model the benchmark compiles with seqc: token embedding scaled
by sqrt(d), sinusoidal positions, `layers` pre-norm causal blocks (self-attention then a GELU
MLP, each with a residual), a final LayerNorm and logits from the tied embedding table plus a
bias; mean cross-entropy over the masked tokens; adam after clipping by global norm. Initial
distributions match seqc's (glorot weights, zero biases, normal(1/sqrt(d)) embeddings), so the
initial losses agree although the random values differ. Nothing here imports seqc.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import optax


@dataclass(frozen=True)
class Config:
    vocab: int = 4000
    d: int = 256
    layers: int = 4
    heads: int = 4
    ff: int = 1024
    lr: float = 1e-3
    clip_norm: float = 1.0
    eps: float = 1e-6


def _glorot(key: jax.Array, d_in: int, d_out: int) -> jax.Array:
    limit = math.sqrt(6.0 / (d_in + d_out))
    return jax.random.uniform(key, (d_in, d_out), jnp.float32, -limit, limit)


def _dense(key: jax.Array, d_in: int, d_out: int) -> dict[str, jax.Array]:
    return {"w": _glorot(key, d_in, d_out), "b": jnp.zeros((d_out,), jnp.float32)}


def _norm(d: int) -> dict[str, jax.Array]:
    return {"scale": jnp.ones((d,), jnp.float32), "bias": jnp.zeros((d,), jnp.float32)}


def init_params(cfg: Config, seed: int) -> dict[str, Any]:
    keys = iter(jax.random.split(jax.random.PRNGKey(seed), 1 + 6 * cfg.layers))
    embed = jax.random.normal(next(keys), (cfg.vocab, cfg.d), jnp.float32) / math.sqrt(cfg.d)
    blocks = []
    for _ in range(cfg.layers):
        blocks.append(
            {
                "norm1": _norm(cfg.d),
                "q": _dense(next(keys), cfg.d, cfg.d),
                "k": _dense(next(keys), cfg.d, cfg.d),
                "v": _dense(next(keys), cfg.d, cfg.d),
                "o": _dense(next(keys), cfg.d, cfg.d),
                "norm2": _norm(cfg.d),
                "w1": _dense(next(keys), cfg.d, cfg.ff),
                "w2": _dense(next(keys), cfg.ff, cfg.d),
            }
        )
    return {
        "embed": embed,
        "blocks": blocks,
        "norm": _norm(cfg.d),
        "out_bias": jnp.zeros((cfg.vocab,), jnp.float32),
    }


def _layer_norm(p: dict[str, jax.Array], x: jax.Array, eps: float) -> jax.Array:
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * p["scale"] + p["bias"]


def _positions(t: int, d: int) -> jax.Array:
    half = d // 2
    inv = jnp.exp(-math.log(10000.0) / max(half - 1, 1) * jnp.arange(half, dtype=jnp.float32))
    angles = jnp.arange(t, dtype=jnp.float32)[:, None] * inv[None, :]
    return jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=-1)


def _attention(p: dict[str, Any], x: jax.Array, heads: int) -> jax.Array:
    b, t, d = x.shape
    hd = d // heads

    def split(y: jax.Array) -> jax.Array:
        return y.reshape(b, t, heads, hd)

    q = split(x @ p["q"]["w"] + p["q"]["b"]) / math.sqrt(hd)
    k = split(x @ p["k"]["w"] + p["k"]["b"])
    v = split(x @ p["v"]["w"] + p["v"]["b"])
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k)
    causal = jnp.tril(jnp.ones((t, t), jnp.bool_))
    scores = jnp.where(causal, scores, -1e9)
    probs = jax.nn.softmax(scores, axis=-1)
    ctx = jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, t, d)
    return ctx @ p["o"]["w"] + p["o"]["b"]


Attention = Callable[[dict[str, Any], jax.Array, int], jax.Array]


def logits(
    params: dict[str, Any], ids: jax.Array, cfg: Config, attention: Attention = _attention
) -> jax.Array:
    """The forward pass; `attention` is one block's attention (`tight_lm.py` gives its own)."""
    x = params["embed"][ids] * math.sqrt(cfg.d)
    x = x + _positions(ids.shape[1], cfg.d)
    for p in params["blocks"]:
        x = x + attention(p, _layer_norm(p["norm1"], x, cfg.eps), cfg.heads)
        h = _layer_norm(p["norm2"], x, cfg.eps)
        h = jax.nn.gelu(h @ p["w1"]["w"] + p["w1"]["b"], approximate=False)
        x = x + h @ p["w2"]["w"] + p["w2"]["b"]
    x = _layer_norm(params["norm"], x, cfg.eps)
    return x @ params["embed"].T + params["out_bias"]


def loss_fn(
    params: dict[str, Any],
    batch: dict[str, jax.Array],
    cfg: Config,
    attention: Attention = _attention,
) -> jax.Array:
    logp = jax.nn.log_softmax(logits(params, batch["inputs"], cfg, attention), axis=-1)
    nll = -jnp.take_along_axis(logp, batch["targets"][..., None], axis=-1)[..., 0]
    mask = batch["mask"].astype(jnp.float32)
    return jnp.sum(nll * mask) / jnp.maximum(jnp.sum(mask), 1.0)


class ReferenceLM:
    """`init(seed)` or `state(params)` -> state; `train_step(state, batch)` -> (state, loss),
    jitted, state donated. `attention` is the block's attention (`tight_lm` fuses q/k/v)."""

    def __init__(self, cfg: Config, attention: Attention = _attention) -> None:
        self.cfg = cfg
        self.attention = attention
        self.tx = optax.chain(optax.clip_by_global_norm(cfg.clip_norm), optax.adam(cfg.lr))
        self.train_step = jax.jit(self._step, donate_argnums=(0,))
        self.loss = jax.jit(lambda params, batch: loss_fn(params, batch, cfg, attention))

    def init(self, seed: int) -> dict[str, Any]:
        return self.state(init_params(self.cfg, seed))

    def state(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"params": params, "opt_state": self.tx.init(params)}

    def _step(
        self, state: dict[str, Any], batch: dict[str, jax.Array]
    ) -> tuple[dict[str, Any], jax.Array]:
        loss, grads = jax.value_and_grad(loss_fn)(state["params"], batch, self.cfg, self.attention)
        updates, opt_state = self.tx.update(grads, state["opt_state"], state["params"])
        params = optax.apply_updates(state["params"], updates)
        return {"params": params, "opt_state": opt_state}, loss
