"""Translating held-out sources and scoring them: corpus BLEU and chrF with sacreBLEU.

The one place a translation is scored, whoever decodes it (a backend's model for `seqc eval`, an
exported artifact for `seqc export`), so every figure is computed the same way: each source is
cut to the longest bucket the model was trained on (less its EOS), ended with EOS and padded to
the decode buffer's multiple (masked, so padding does not change the result).
"""

from __future__ import annotations

from typing import Any

from seqc.backends.api import Generator
from seqc.compiler.signature import buffer_length
from seqc.resolve.values import CallValue


def source_ids(tokenizer: Any, text: str, bound: int) -> list[int]:
    """A source sentence as the model reads it: at most `bound - 1` tokens, EOS, then pad to
    the decode buffer's multiple (one compiled program per bucket, not per length)."""
    ids = [*tokenizer.encode(text)[: bound - 1], tokenizer.eos_id]
    return ids + [tokenizer.pad_id] * (buffer_length(len(ids)) - len(ids))


def corpus_scores(hyps: list[str], refs: list[str]) -> dict[str, float]:
    """Corpus BLEU and chrF of hypotheses against one reference each."""
    import sacrebleu

    return {
        "bleu": float(sacrebleu.corpus_bleu(hyps, [refs]).score),
        "chrf": float(sacrebleu.corpus_chrf(hyps, [refs]).score),
    }


def score_translations(
    decoder: Generator,
    pipeline: Any,
    strategy: CallValue,
    split: str = "dev",
    limit: int = 0,
) -> dict[str, Any]:
    """Decode the first `limit` examples of `split` (all if 0) and score them."""
    examples = pipeline.splits[split].examples
    if limit:
        examples = examples[:limit]
    src_tok, tgt_tok = pipeline.tokenizer, pipeline.target_tokenizer
    bound = max(b.bound for b in pipeline.buckets)
    hyps = [
        tgt_tok.decode(decoder.generate(strategy, [], source_ids(src_tok, ex.source, bound)))
        for ex in examples
    ]
    refs = [ex.target or "" for ex in examples]
    return {
        **corpus_scores(hyps, refs),
        "examples": len(hyps),
        "samples": list(zip([e.source for e in examples[:3]], hyps[:3], refs[:3], strict=True)),
    }
