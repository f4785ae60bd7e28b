"""Loss, perplexity and token accuracy of a model over a split (sums over tokens, then divided,
so the figure does not depend on how the split was batched)."""

from __future__ import annotations

import math
from typing import Any

from seqc.backends.api import Model, fetch


def evaluate(model: Model, params: Any, pipeline: Any, split: str, max_batches: int = 0) -> dict:
    sums = {"loss_sum": 0.0, "nll_sum": 0.0, "tokens": 0.0, "correct": 0.0}
    for i, batch in enumerate(pipeline.batches(split)):
        if max_batches and i >= max_batches:
            break
        out = fetch(model.eval_step(params, batch))
        sums["loss_sum"] += float(out["loss"]) * float(out["tokens"])
        sums["nll_sum"] += float(out["nll_sum"])
        sums["tokens"] += float(out["tokens"])
        sums["correct"] += float(out["correct"])
    return summarize(sums)


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
