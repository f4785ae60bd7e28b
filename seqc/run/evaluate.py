"""Loss, perplexity and token accuracy of a model over a split (sums over tokens, then divided,
so the figure does not depend on how the split was batched)."""

from __future__ import annotations

import math
from typing import Any

from seqc.backends.api import Model, fetch
from seqc.compiler.lower.sampled import SAMPLED, variant

NORMALIZATION = ("logz_sum", "logz_sq_sum", "raw_nll_sum")


def evaluate(model: Model, params: Any, pipeline: Any, split: str, max_batches: int = 0) -> dict:
    """The split's figures (`summarize`); with log Z's mean and spread, and for a model trained
    to be self-normalised (NCE, SNIS B) the perplexity of its raw scores exp(s)."""
    sums = {"loss_sum": 0.0, "nll_sum": 0.0, "tokens": 0.0, "correct": 0.0}
    sums |= dict.fromkeys(NORMALIZATION, 0.0)
    for i, batch in enumerate(pipeline.batches(split)):
        if max_batches and i >= max_batches:
            break
        out = fetch(model.eval_step(params, batch))
        sums["loss_sum"] += float(out["loss"]) * float(out["tokens"])
        for key in ("nll_sum", "tokens", "correct", *NORMALIZATION):
            sums[key] += float(out.get(key, 0.0))  # a CTC criterion has no per-token argmax
    scores = summarize(sums)
    tokens = max(sums["tokens"], 1.0)
    mean = sums["logz_sum"] / tokens
    scores["log_z_mean"] = mean
    scores["log_z_std"] = math.sqrt(max(sums["logz_sq_sum"] / tokens - mean * mean, 0.0))
    if self_normalized(model.task.config["loss"]):
        scores["raw_perplexity"] = math.exp(min(sums["raw_nll_sum"] / tokens, 50.0))
    return scores


def self_normalized(loss: Any) -> bool:
    """Whether a loss trains exp(s) to be the probability itself (NCE, SNIS B)."""
    return variant(loss) in ("nce", "normalizing") if loss.kind in SAMPLED else False


def summarize(sums: dict[str, float]) -> dict[str, Any]:
    """The figures of summed criterion outputs: per-token loss, nll, perplexity, accuracy."""
    tokens = max(sums["tokens"], 1.0)
    nll = sums["nll_sum"] / tokens
    return {
        "loss": sums["loss_sum"] / tokens,
        "nll": nll,
        "perplexity": math.exp(min(nll, 50.0)),
        "accuracy": sums["correct"] / tokens,
        "tokens": int(sums["tokens"]),
    }
