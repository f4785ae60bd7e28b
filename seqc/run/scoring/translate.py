"""Translating held-out sources and scoring them: corpus BLEU and chrF with sacreBLEU.

The one place a translation is scored, whoever decodes it (a backend's model for `seqc eval`, an
exported artifact for `seqc export`), so every figure is computed the same way: each source is
cut to the longest bucket the model was trained on (less its EOS), ended with EOS and padded to
the decode buffer's multiple (masked, so padding does not change the result).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from seqc.backends.api import Generator
from seqc.compiler.config import DecodeConfig
from seqc.compiler.signature import buffer_length
from seqc.data.pipeline import InputPipeline
from seqc.data.tokenizers import Tokenizer


def source_ids(tokenizer: Tokenizer, text: str, bound: int) -> list[int]:
    """A source sentence as the model reads it: at most `bound - 1` tokens, EOS, then pad to
    the decode buffer's multiple (one compiled program per bucket, not per length)."""
    ids = [*tokenizer.encode(text)[: bound - 1], tokenizer.eos_id]
    return ids + [tokenizer.pad_id] * (buffer_length(len(ids)) - len(ids))


def corpus_scores(hyps: list[str], refs: list[str]) -> dict[str, float]:
    """Corpus BLEU and chrF of hypotheses against one reference each."""
    scores, _ = corpus_scores_signed(hyps, refs)
    return scores


def corpus_scores_signed(
    hyps: list[str], refs: list[str]
) -> tuple[dict[str, float], dict[str, str]]:
    """Corpus BLEU and chrF, and each one's sacreBLEU signature (`nrefs:1|case:mixed|eff:no|
    tok:13a|smooth:exp|version:2.6.0`): the settings a reported figure needs beside it to be
    compared with another paper's or tool's."""
    from sacrebleu.metrics import BLEU, CHRF

    bleu, chrf = BLEU(), CHRF()
    scores = {
        "bleu": float(bleu.corpus_score(hyps, [refs]).score),
        "chrf": float(chrf.corpus_score(hyps, [refs]).score),
    }
    return scores, {"bleu": str(bleu.get_signature()), "chrf": str(chrf.get_signature())}


def score_translations(
    decoder: Generator,
    pipeline: InputPipeline,
    strategy: DecodeConfig,
    split: str = "dev",
    limit: int = 0,
) -> dict[str, Any]:
    """Decode the first `limit` examples of `split` (all if 0) and score them: `bleu`, `chrf`,
    `examples` and three `samples` (source, hypothesis, reference); and, to write beside the
    scores or rescore with other tools, their sacreBLEU `signatures` and every example's
    `sources`, `hypotheses` and `references`, in split order."""
    examples = pipeline.splits[split].examples
    if limit:
        examples = examples[:limit]
    src_tok, tgt_tok = pipeline.tokenizer, pipeline.target_tokenizer
    bound = max(b.bound for b in pipeline.buckets)
    ids = [source_ids(src_tok, ex.source, bound) for ex in examples]
    many = getattr(decoder, "generate_many", None)
    tokens = many(strategy, ids) if many else [decoder.generate(strategy, [], src) for src in ids]
    hyps = [tgt_tok.decode(t) for t in tokens]
    refs = [ex.target or "" for ex in examples]
    sources = [ex.source or "" for ex in examples]
    scores, signatures = corpus_scores_signed(hyps, refs)
    return {
        **scores,
        "examples": len(hyps),
        "samples": list(zip(sources[:3], hyps[:3], refs[:3], strict=True)),
        "signatures": signatures,
        "sources": sources,
        "hypotheses": hyps,
        "references": refs,
    }


TRANSLATION_FILES = ("sources.txt", "hypotheses.txt", "references.txt", "scores.json")
"""What `write_translations` puts in its folder: the first three line up, line N of each is
example N of the split."""


def eval_folder(run_dir: Path, tag: str, split: str, task: str, several_tasks: bool) -> Path:
    """Where an evaluation's translations and scores go: RUN/eval/TAG-SPLIT, where TAG names
    what was scored (a checkpoint's step, an artifact's folder), and -TASK after it in a
    multi-task run, whose tasks are scored by the same checkpoint or by artifacts in folders of
    the same name (RUN/export/TASK/onnx-none): without the task, each task's evaluation would
    replace the one before it."""
    name = f"{tag}-{split}"
    if several_tasks:
        name += f"-{task}"
    return run_dir / "eval" / name


def write_translations(folder: Path, scored: dict[str, Any], facts: dict[str, Any]) -> None:
    """`score_translations`' result as files beside the run, replacing any earlier ones as a
    whole: the sources, detokenized hypotheses and references one per line in split order (to
    rescore or compare with other tools, `sacrebleu references.txt < hypotheses.txt`), and
    `scores.json`: BLEU, chrF, their signatures and the example count, with `facts` (the
    checkpoint, the decode strategy). Raises OSError."""
    from seqc.run.rundir.outputs import write_folder

    record = {
        **facts,
        "bleu": scored["bleu"],
        "chrf": scored["chrf"],
        "signatures": scored["signatures"],
        "examples": scored["examples"],
    }
    sources, hyps, refs, scores = TRANSLATION_FILES
    write_folder(
        folder,
        {
            sources: scored["sources"],
            hyps: scored["hypotheses"],
            refs: scored["references"],
            scores: json.dumps(record, indent=2, default=str) + "\n",
        },
    )
