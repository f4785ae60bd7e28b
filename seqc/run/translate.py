"""Corpus BLEU and chrF (sacreBLEU) of a model's decoded output on held-out examples."""

from __future__ import annotations

from typing import Any

from seqc.compiler.values import CallValue
from seqc.run.decode import decoder_for


def score_translations(
    model: Any, params: Any, pipeline: Any, strategy: CallValue, split: str = "dev", limit: int = 0
) -> dict[str, Any]:
    """Decode the first `limit` examples of `split` (all if 0) and score them."""
    import sacrebleu

    examples = pipeline.splits[split].examples
    if limit:
        examples = examples[:limit]
    src_tok, tgt_tok = pipeline.tokenizer, pipeline.target_tokenizer
    dec = decoder_for(model, params, "seq2seq", tgt_tok.bos_id, tgt_tok.eos_id, tgt_tok.pad_id)
    bound = max(b.bound for b in pipeline.buckets)
    hyps, refs = [], []
    for ex in examples:
        src = [*src_tok.encode(ex.source)[: bound - 1], src_tok.eos_id]
        padded = src + [src_tok.pad_id] * (-len(src) % 16)
        hyps.append(tgt_tok.decode(dec.generate(strategy, [], padded)))
        refs.append(ex.target or "")
    bleu = sacrebleu.corpus_bleu(hyps, [refs])
    chrf = sacrebleu.corpus_chrf(hyps, [refs])
    return {
        "bleu": float(bleu.score),
        "chrf": float(chrf.score),
        "examples": len(hyps),
        "samples": list(zip([e.source for e in examples[:3]], hyps[:3], refs[:3], strict=True)),
    }
