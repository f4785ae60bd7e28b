"""Training criteria on logits: masked cross-entropy with label smoothing.

The mirror of `seqc.backends.jax.loss`, term for term, so that both backends optimize the same
number.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from seqc.compiler.values import CallValue


def cross_entropy(
    logits: tf.Tensor, labels: tf.Tensor, smoothing: float
) -> tuple[tf.Tensor, tf.Tensor]:
    """Per-token criterion and plain negative log-likelihood, both [B, T] float32, from one
    log-softmax: (1 - s) on the label and s spread evenly over the vocabulary."""
    logp = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
    labels = tf.cast(labels, tf.int32)
    nll = -tf.gather(logp, labels[..., None], axis=-1, batch_dims=labels.shape.rank)[..., 0]
    if not smoothing:
        return nll, nll
    return (1.0 - smoothing) * nll - smoothing * tf.reduce_mean(logp, axis=-1), nll


def task_loss(
    loss: CallValue,
    logits: tf.Tensor,
    labels: tf.Tensor,
    mask: tf.Tensor,
    accuracy: bool = True,
) -> dict[str, Any]:
    """The task's criterion and the sums the metrics need (summed over tokens, not averaged);
    `accuracy=False` leaves out `correct`, as on JAX."""
    if loss.kind != "cross_entropy":
        raise ValueError(f"loss {loss.kind} is not implemented on TensorFlow yet")
    labels = tf.cast(labels, tf.int32)
    per_tok, nll_tok = cross_entropy(logits, labels, float(loss.args["label_smoothing"]))
    m = tf.cast(mask, tf.float32)
    tokens = tf.reduce_sum(m)
    total = tf.reduce_sum(per_tok * m)
    if loss.args.get("reduction") == "sequence":
        rows = tf.reduce_sum(tf.cast(tf.reduce_any(m > 0, axis=-1), tf.float32))
        value = total / tf.maximum(rows, 1.0)
    else:
        value = total / tf.maximum(tokens, 1.0)
    nll = tf.reduce_sum(nll_tok * m)
    out = {"loss": value, "nll_sum": nll, "tokens": tokens}
    if accuracy:
        hits = tf.cast(
            tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), labels), tf.float32
        )
        out["correct"] = tf.reduce_sum(hits * m)
    return out
