"""Training criteria on logits: masked cross-entropy with label smoothing."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from seqc.compiler.values import CallValue


def cross_entropy(
    logits: jax.Array, labels: jax.Array, smoothing: float
) -> tuple[jax.Array, jax.Array]:
    """Per-token criterion and plain negative log-likelihood, both [B, T] float32.

    With smoothing s the target is (1 - s) on the label and s spread evenly over the vocabulary;
    the loss is that criterion, while perplexity uses the plain NLL. Both come from one
    log-softmax: over a [B, T, V] tensor a second one is a measurable part of a step.
    """
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    nll = -jnp.take_along_axis(logp, labels[..., None], axis=-1)[..., 0]
    if not smoothing:
        return nll, nll
    return (1.0 - smoothing) * nll - smoothing * jnp.mean(logp, axis=-1), nll


def task_loss(
    loss: CallValue,
    logits: jax.Array,
    labels: jax.Array,
    mask: jax.Array,
    accuracy: bool = True,
) -> dict[str, Any]:
    """The task's criterion and the sums the metrics need (summed over tokens, not averaged,
    so batches of different sizes combine exactly).

    `accuracy=False` leaves out `correct`: its argmax over the vocabulary is a slow reduction on
    XLA's CPU backend (about 5-10% of a small Transformer LM's training step at vocab 4000) and
    the training loop never reads it; evaluation does.
    """
    if loss.kind != "cross_entropy":
        raise ValueError(f"loss {loss.kind} is not implemented on JAX yet")
    per_tok, nll_tok = cross_entropy(logits, labels, float(loss.args["label_smoothing"]))
    m = mask.astype(jnp.float32)
    tokens = jnp.sum(m)
    total = jnp.sum(per_tok * m)
    if loss.args.get("reduction") == "sequence":
        value = total / jnp.maximum(jnp.sum(jnp.any(m > 0, axis=-1)), 1.0)
    else:
        value = total / jnp.maximum(tokens, 1.0)
    nll = jnp.sum(nll_tok * m)
    out = {"loss": value, "nll_sum": nll, "tokens": tokens}
    if accuracy:
        out["correct"] = jnp.sum((jnp.argmax(logits, axis=-1) == labels) * m)
    return out
