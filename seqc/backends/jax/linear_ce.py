"""`linear_cross_entropy` on JAX: the output layer and the cross-entropy, a chunk at a time.

What the op computes and why is in `seqc.compiler.lower.fused_loss`. Here: a `jax.lax.scan`
over chunks of positions; each chunk's logits live only inside one iteration, where the loss
and the gradient of the loss with respect to them are formed and at once multiplied back into
the gradients of the hidden, the matrix and the bias. Those gradients are the residuals of a
`jax.custom_vjp`, whose backward pass only scales them. Undifferentiated (evaluation), the scan
computes the sums alone.

The op has two outputs (the criterion's total and the plain NLL's), and its VJP is exact for
both: with label smoothing s, the NLL's gradient with respect to the logits is the criterion's
plus s x weight x (1/V - onehot(label)), whose products with the matrix are a row gather and a
scatter-add, cheap beside the [positions, vocab] product; without smoothing the two coincide.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from seqc.compiler.lower.fused_loss import chunking

F32 = jnp.float32


def linear_cross_entropy(
    h: jax.Array,
    w: jax.Array,
    bias: jax.Array | None,
    labels: jax.Array,
    weights: jax.Array,
    *,
    vocab_axis: int,
    smoothing: float,
    rows: int,
) -> jax.Array:
    """float32 [2]: sum of weights x criterion, and of weights x NLL (see the module)."""
    cfg = Cfg(vocab_axis, float(smoothing), int(rows))
    return _fused(cfg, h, w, bias, labels, weights)


class Cfg(NamedTuple):
    """The op's attributes: one hashable, undifferentiated argument of the custom VJP."""

    vocab_axis: int
    smoothing: float
    rows: int


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _fused(cfg: Cfg, *args: jax.Array | None) -> jax.Array:  # args: h, w, bias, labels, weights
    return _scan(cfg, args, grads=False)[0]


def _fwd(cfg: Cfg, *args: jax.Array | None) -> tuple[jax.Array, tuple]:
    sums, res = _scan(cfg, args, grads=True)
    return sums, (res, *args)


def _bwd(cfg: Cfg, saved: tuple, g: jax.Array) -> tuple:
    vocab_axis, smoothing = cfg.vocab_axis, cfg.smoothing
    (dh, dw, db, per_loss, per_nll), h, w, bias, labels, weights = saved
    g_loss, g_nll = g[0], g[1]
    both = g_loss + g_nll
    dh, dw = both * dh, both * dw
    db = None if bias is None else both * db
    if smoothing:  # the NLL's extra term: s x weight x (1/V - onehot(label)), see the module
        c = g_nll * smoothing * weights.astype(F32)
        wf = w.astype(F32)
        vocab = w.shape[vocab_axis]
        rows_of = wf if vocab_axis == 0 else wf.T  # [V, d]
        dh = dh + c[..., None] * (jnp.mean(rows_of, 0) - rows_of[labels])
        ch = (c[..., None] * h.astype(F32)).reshape(-1, h.shape[-1])
        flat = labels.reshape(-1)
        extra = jnp.broadcast_to(ch.sum(0) / vocab, rows_of.shape)
        extra = extra - jnp.zeros_like(rows_of).at[flat].add(ch)
        dw = dw + (extra if vocab_axis == 0 else extra.T)
        if bias is not None:
            cf = c.reshape(-1)
            db = db + cf.sum() / vocab - jnp.zeros((vocab,), F32).at[flat].add(cf)
    d_weights = g_loss * per_loss + g_nll * per_nll
    return (
        dh.astype(h.dtype),
        dw.astype(w.dtype),
        None if bias is None else db.astype(bias.dtype),
        None,
        d_weights.astype(weights.dtype),
    )


_fused.defvjp(_fwd, _bwd)


def _scan_or_once(body: Any, init: tuple, xs: tuple, n: int) -> tuple:
    """`jax.lax.scan(body, init, xs)`; one chunk (a small batch) is one call, not a loop,
    which XLA compiles faster."""
    if n > 1:
        return jax.lax.scan(body, init, xs)
    carry, ys = body(init, jax.tree.map(lambda x: x[0], xs))
    return carry, jax.tree.map(lambda y: y[None], ys)


def _varying(x: Any, *like: jax.Array | None) -> Any:
    """`x` (fresh zeros, a scan's initial carry) varying over the mesh axes that any of `like`
    varies over: inside `jax.shard_map` (`seqc.backends.jax.data_parallel`) a carry that the
    chunks' values enter must start as varying as they are."""
    axes: set[str] = set()
    for a in like:
        if a is not None:
            t = jax.typeof(a)
            manual = getattr(t, "manual_axis_type", None)  # JAX 0.10; `vma` before it
            axes |= set(manual.varying if manual is not None else getattr(t, "vma", ()) or ())
    return jax.lax.pcast(x, tuple(sorted(axes)), to="varying") if axes else x


def _scan(cfg: Cfg, args: tuple, *, grads: bool) -> tuple[jax.Array, tuple | None]:
    """The sums over every chunk, and with `grads` the residuals: the gradients of the
    criterion's sum with respect to h, w and the bias, and the per-position losses."""
    h, w, bias, labels, weights = args
    vocab_axis, smoothing, rows = cfg
    positions, d = h.shape[:-1], h.shape[-1]
    vocab = w.shape[vocab_axis]
    lead, per, n = chunking(tuple(positions), rows)
    last = positions[-1]
    pad = n * per - last

    def chunked(x: jax.Array, *tail: int) -> jax.Array:
        """[..., last, *tail] -> [n, lead, per, *tail], padded with zeros."""
        x = x.reshape(lead, last, *tail)
        if pad:
            x = jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * len(tail))
        return jnp.moveaxis(x.reshape(lead, n, per, *tail), 1, 0)

    def unchunked(x: jax.Array, *tail: int) -> jax.Array:
        x = jnp.moveaxis(x, 0, 1).reshape(lead, n * per, *tail)[:, :last]
        return x.reshape(*positions, *tail)

    wc = w.astype(h.dtype)  # the products in the compute dtype, accumulated in float32
    b32 = None if bias is None else bias.astype(F32)

    def logits_of(hb: jax.Array) -> jax.Array:  # [k, d] -> float32 [k, V]
        dims = ((1,), (1,)) if vocab_axis == 0 else ((1,), (0,))
        z = jax.lax.dot_general(hb, wc, (dims, ((), ())), preferred_element_type=F32)
        return z if b32 is None else z + b32

    def body(carry: tuple, xs: tuple) -> tuple:
        hb, yb, mb = xs
        hb, yb, mb = hb.reshape(-1, d), yb.reshape(-1), mb.reshape(-1).astype(F32)
        z = logits_of(hb)
        top = jax.lax.stop_gradient(jnp.max(z, -1, keepdims=True))
        e = jnp.exp(z - top)
        total = jnp.sum(e, -1, keepdims=True)
        lse = (jnp.log(total) + top)[:, 0]
        nll = lse - jnp.take_along_axis(z, yb[:, None], -1)[:, 0]
        loss = nll if not smoothing else (1 - smoothing) * nll + smoothing * (lse - z.mean(-1))
        sums = carry[0] + jnp.stack([jnp.sum(mb * loss), jnp.sum(mb * nll)])
        if not grads:
            return (sums,), None
        dz = e / total - (1 - smoothing) * jax.nn.one_hot(yb, vocab, dtype=F32)
        if smoothing:
            dz = dz - smoothing / vocab
        dz = (dz * mb[:, None]).astype(hb.dtype)
        if vocab_axis == 0:  # w [V, d]
            dhb = jnp.dot(dz, wc, preferred_element_type=F32)
            dwb = jnp.dot(dz.T, hb, preferred_element_type=F32)
        else:  # w [d, V]
            dhb = jnp.dot(dz, wc.T, preferred_element_type=F32)
            dwb = jnp.dot(hb.T, dz, preferred_element_type=F32)
        dw_acc = carry[1] + dwb
        db_acc = carry[2] + jnp.sum(dz.astype(F32), 0)
        return (sums, dw_acc, db_acc), (dhb.reshape(lead, per, d), loss, nll)

    xs = (chunked(h, d), chunked(labels), chunked(weights))
    zero = _varying(jnp.zeros((2,), F32), *args)
    if not grads:
        (sums,), _ = _scan_or_once(body, (zero,), xs, n)
        return sums, None
    init = (zero, *_varying((jnp.zeros(w.shape, F32), jnp.zeros((vocab,), F32)), *args))
    (sums, dw, db), (dh, per_loss, per_nll) = _scan_or_once(body, init, xs, n)
    dh = unchunked(dh, d)
    per_loss = unchunked(per_loss.reshape(n, lead, per))
    per_nll = unchunked(per_nll.reshape(n, lead, per))
    return sums, (dh, dw, db, per_loss, per_nll)
