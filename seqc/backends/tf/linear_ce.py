"""`linear_cross_entropy` on TensorFlow: the output layer and the cross-entropy, a chunk at a time.

What the op computes and why is in `seqc.compiler.lower.fused_loss`; the JAX twin
(`seqc.backends.jax.linear_ce`) says how the gradients ride as residuals and why the VJP is
exact for both outputs. Here the chunks are unrolled in the graph (at most `MAX_CHUNKS`), which
both XLA and TF's executor take, and a `tf.custom_gradient` scales the gradients the forward
pass formed. When the positions' shape is not static (a `tf.function` traced for any bucket),
the op is one chunk: the same numbers and the fused gradient, with whole logits.
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from seqc.compiler.lower.fused_loss import chunking

MAX_CHUNKS = 32
"""Unrolled chunks at most; past it, chunks grow."""


def linear_cross_entropy(
    h: tf.Tensor,
    w: tf.Tensor,
    bias: tf.Tensor | None,
    labels: tf.Tensor,
    weights: tf.Tensor,
    *,
    vocab_axis: int,
    smoothing: float,
    rows: int,
) -> tf.Tensor:
    """float32 [2]: sum of weights x criterion, and of weights x NLL."""
    w = tf.convert_to_tensor(w)  # a variable is read here, outside the custom gradient
    bias = None if bias is None else tf.convert_to_tensor(bias)
    h, weights = tf.convert_to_tensor(h), tf.convert_to_tensor(weights)
    labels = tf.cast(labels, tf.int32)
    s = float(smoothing)
    vocab = w.shape[vocab_axis]
    d = h.shape[-1] if h.shape[-1] is not None else tf.shape(h)[-1]
    positions = tf.shape(h)[:-1]
    lead, last, per, n = -1, -1, -1, 1  # a shape known only when run: one chunk
    if h.shape[:-1].is_fully_defined():
        lead, per, n = chunking(tuple(h.shape[:-1]), rows, MAX_CHUNKS)
        last = h.shape[-2]

    def pieces(x: tf.Tensor, *tail: int) -> list[tf.Tensor]:
        """x [..., last, *tail] as n chunks [lead * per, *tail], padded with zeros."""
        if n == 1:
            return [tf.reshape(x, (-1, *tail))]
        x = tf.reshape(x, (lead, last, *tail))
        pad = n * per - last
        if pad:
            x = tf.pad(x, [[0, 0], [0, pad]] + [[0, 0]] * len(tail))
        return [tf.reshape(x[:, i * per : (i + 1) * per], (-1, *tail)) for i in range(n)]

    def whole(parts: list[tf.Tensor], *tail: int) -> tf.Tensor:
        if n == 1:
            return tf.reshape(parts[0], tf.concat([positions, list(tail)], 0))
        x = tf.concat([tf.reshape(p, (lead, per, *tail)) for p in parts], 1)[:, :last]
        return tf.reshape(x, (*h.shape[:-1], *tail))

    def logits_of(hb: tf.Tensor, wc: tf.Tensor) -> tf.Tensor:
        z = tf.matmul(hb, wc, transpose_b=vocab_axis == 0)
        z = tf.cast(z, tf.float32)
        return z if bias is None else z + tf.cast(bias, tf.float32)

    @tf.custom_gradient
    def fused(*args: tf.Tensor) -> tuple[tf.Tensor, Callable[[tf.Tensor], list[tf.Tensor]]]:
        hh, ww = args[0], args[1]
        wc = tf.cast(ww, hh.dtype)
        hs, ys, ms = pieces(hh, d), pieces(labels), pieces(tf.cast(args[-1], tf.float32))
        dw = tf.zeros(ww.shape, tf.float32)
        db = tf.zeros((vocab,), tf.float32)
        sums = tf.zeros((2,), tf.float32)
        dhs, losses, nlls = [], [], []
        for hb, yb, mb in zip(hs, ys, ms, strict=True):
            z = logits_of(hb, wc)
            top = tf.reduce_max(z, -1, keepdims=True)
            e = tf.exp(z - top)
            total = tf.reduce_sum(e, -1, keepdims=True)
            lse = (tf.math.log(total) + top)[:, 0]
            nll = lse - tf.gather(z, yb, batch_dims=1)
            loss = nll if not s else (1 - s) * nll + s * (lse - tf.reduce_mean(z, -1))
            sums += tf.stack([tf.reduce_sum(mb * loss), tf.reduce_sum(mb * nll)])
            dz = e / total - (1 - s) * tf.one_hot(yb, vocab, dtype=tf.float32)
            if s:
                dz -= s / vocab
            dz = tf.cast(dz * mb[:, None], hb.dtype)
            if vocab_axis == 0:  # w [V, d]
                dhs.append(tf.matmul(dz, wc))
                dw += tf.cast(tf.matmul(dz, hb, transpose_a=True), tf.float32)
            else:  # w [d, V]
                dhs.append(tf.matmul(dz, wc, transpose_b=True))
                dw += tf.cast(tf.matmul(hb, dz, transpose_a=True), tf.float32)
            db += tf.reduce_sum(tf.cast(dz, tf.float32), 0)
            losses.append(loss)
            nlls.append(nll)
        dh = tf.cast(whole(dhs, d), tf.float32)
        per_loss, per_nll = whole(losses), whole(nlls)

        def grad(g: tf.Tensor) -> list[tf.Tensor]:
            g_loss, g_nll = g[0], g[1]
            both = g_loss + g_nll
            gh, gw, gb = both * dh, both * dw, both * db
            if s:  # the NLL's extra term (see the JAX twin)
                c = g_nll * s * tf.cast(args[-1], tf.float32)
                rows_of = tf.cast(ww if vocab_axis == 0 else tf.transpose(ww), tf.float32)
                gh += c[..., None] * (tf.reduce_mean(rows_of, 0) - tf.gather(rows_of, labels))
                ch = tf.reshape(c[..., None] * tf.cast(hh, tf.float32), (-1, d))
                flat = tf.reshape(labels, (-1, 1))
                extra = tf.reduce_sum(ch, 0) / vocab - tf.scatter_nd(flat, ch, (vocab, d))
                gw += extra if vocab_axis == 0 else tf.transpose(extra)
                cf = tf.reshape(c, (-1,))
                gb += tf.reduce_sum(cf) / vocab - tf.scatter_nd(flat, cf, (vocab,))
            out = [tf.cast(gh, hh.dtype), tf.cast(gw, ww.dtype)]
            if bias is not None:
                out.append(tf.cast(gb, args[2].dtype))
            out.append(tf.cast(g_loss * per_loss + g_nll * per_nll, args[-1].dtype))
            return out

        return sums, grad

    args = [h, w] + ([] if bias is None else [bias]) + [weights]
    return fused(*args)
