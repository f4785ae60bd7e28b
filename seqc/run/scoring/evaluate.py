"""Loss, perplexity and token accuracy of a model over a split (sums over tokens, then divided,
so the figure does not depend on how the split was batched).

The one place that chooses which figures a task reports: `summarize` for `seqc eval`, the dev
evaluations of training (the lines before and after it, each step's) and `seqc export`'s
quality column alike, and `headline` for the one figure a line prints. A CTC model reports its
criterion's loss only (WER and CER come beside it, `seqc.run.scoring.transcribe`): its `nll_sum`
sums over every alignment of a whole transcript, so exp(nll / tokens) is no next-token perplexity
(an untrained model's is 1e17 and more), and it has no per-token argmax to count as accuracy
nor a softmax whose log Z means anything. An attention decoder (LAS, and joint CTC + attention,
whose evaluation criterion is the decoder's cross-entropy) keeps perplexity, accuracy and log Z.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from seqc.backends.api import Model, fetch
from seqc.compiler.lower.sampled import SAMPLED, variant
from seqc.resolve.values import CallValue

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
    ctc = bool(model.task.ctc)
    scores = summarize(sums, ctc=ctc)
    if ctc:  # no softmax over next tokens: log Z and raw scores mean nothing
        return scores
    tokens = max(sums["tokens"], 1.0)
    mean = sums["logz_sum"] / tokens
    scores["log_z_mean"] = mean
    scores["log_z_std"] = math.sqrt(max(sums["logz_sq_sum"] / tokens - mean * mean, 0.0))
    if self_normalized(model.task.config["loss"]):
        scores["raw_perplexity"] = math.exp(min(sums["raw_nll_sum"] / tokens, 50.0))
    return scores


def self_normalized(loss: CallValue) -> bool:
    """Whether a loss trains exp(s) to be the probability itself (NCE, SNIS B)."""
    return variant(loss) in ("nce", "normalizing") if loss.kind in SAMPLED else False


def summarize(sums: Mapping[str, float], *, ctc: bool = False) -> dict[str, Any]:
    """The figures of summed criterion outputs: per-token loss, nll, perplexity, accuracy; of a
    CTC criterion's (`ctc`), the loss alone (see the module doc)."""
    tokens = max(sums["tokens"], 1.0)
    loss = sums.get("loss_sum", 0.0) / tokens
    if ctc:
        return {"loss": loss, "tokens": int(sums["tokens"])}
    nll = sums["nll_sum"] / tokens
    return {
        "loss": loss,
        "nll": nll,
        "perplexity": math.exp(min(nll, 50.0)),
        "accuracy": sums.get("correct", 0.0) / tokens,
        "tokens": int(sums["tokens"]),
    }


HEADLINES = ("perplexity", "loss")
"""The figure a line that prints one shows, the first a task reports: perplexity, else (CTC) the
criterion's loss."""


def headline(figures: Mapping[str, Any]) -> tuple[str, float]:
    """(name, value) of the one figure that sums up a split's evaluation (`HEADLINES`), as the
    lines before and after training and at each dev evaluation print it."""
    for name in HEADLINES:
        if name in figures:
            return name, float(figures[name])
    raise KeyError(f"no figure among {', '.join(HEADLINES)} in {sorted(figures)}")
