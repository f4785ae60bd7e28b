"""The dev figures a training run logs beside its loss: BLEU and chrF of a translator, WER and
CER of a recogniser, for a task that lists them among its metrics, and the line each step
prints. Perplexity alone is a poor guide late in training; these are what early stopping and
the dev curves follow.
"""

from __future__ import annotations

import time
from typing import Any

from seqc.run.scoring.evaluate import headline
from seqc.run.train.stepper import Unit


def dev_line(dev: dict[str, Any]) -> str:
    """One task's dev figures as the step line prints them: the headline figure (perplexity,
    or a CTC model's loss; `seqc.run.scoring.evaluate.headline`), then WER or BLEU if measured."""
    name, value = headline(dev)
    text = f"{name} {value:.2f}"
    if "wer" in dev:
        text += f" (wer {dev['wer']:.2f}, cer {dev['cer']:.2f})"
    if "bleu" in dev:
        text += f" (bleu {dev['bleu']:.2f}, chrf {dev['chrf']:.2f})"
    return text


def translation_scores(unit: Unit, params: Any, examples: int) -> dict[str, float]:
    """BLEU and chrF of the first `examples` dev translations, for a translation task that lists
    them among its metrics: what early stopping and the dev curve follow (perplexity is a poor
    proxy for BLEU late in training, when label smoothing and length matter)."""
    session = unit.session
    if session.pipeline.task != "seq2seq" or not examples:
        return {}
    if not {m.kind for m in session.task_config["metrics"]} & {"bleu", "chrf"}:
        return {}
    from seqc.run.decoding.decoders import decoder_for
    from seqc.run.decoding.text_decoder import fallback_strategy
    from seqc.run.scoring.translate import score_translations

    tok = session.pipeline.target_tokenizer
    decoder = decoder_for(unit.model, params, tok.bos_id, tok.eos_id, tok.pad_id)
    strategy = session.compiled.decode or fallback_strategy()
    t0 = time.perf_counter()
    scores = score_translations(decoder, session.pipeline, strategy, "dev", examples)
    seconds = time.perf_counter() - t0
    return {
        "bleu": scores["bleu"],
        "chrf": scores["chrf"],
        "translations": scores["examples"],
        "translate_s": seconds,
    }


ATTENTION_DEV_UTTERANCES = 100
"""Dev utterances an attention decoder transcribes at each evaluation during training (it decodes
one utterance at a time); a CTC model transcribes the whole dev split in one pass per batch."""


def error_rates(unit: Unit, params: Any) -> dict[str, float]:
    """WER and CER on dev for a speech task that lists them among its metrics."""
    session = unit.session
    if session.pipeline.task != "asr":
        return {}
    if not {m.kind for m in session.task_config["metrics"]} & {"wer", "cer"}:
        return {}
    from seqc.run.scoring.normalised import without_warp
    from seqc.run.scoring.transcribe import score_model

    limit = 0 if unit.model.task.ctc else ATTENTION_DEV_UTTERANCES
    # a voice warp's search would cost each evaluation a forward per candidate factor
    strategy = without_warp(session.compiled.decode)
    scores = score_model(unit.model, params, session.pipeline, "dev", strategy, limit)
    return {"wer": scores["wer"], "cer": scores["cer"]}
