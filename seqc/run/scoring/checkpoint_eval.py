"""A checkpoint scored on a split, as `seqc eval` reports it: loss, perplexity and token
accuracy; WER and CER of transcripts for a speech task, BLEU and chrF of translations (with
sacreBLEU's signatures) for a translation task that lists them, the translations and scores
written to RUN/eval/STEP-SPLIT (-TASK after it in a multi-task run) where a reported figure can
be checked and rescored.

The figures are results (stdout); which weights were scored and the sample decodings are said
on the side, so `seqc eval ... > scores.txt` keeps only the figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from seqc.backends import registry
from seqc.backends.api import Weights
from seqc.compiler.config import DecodeConfig
from seqc.run.report import PlainReporter, Reporter
from seqc.run.session import Session
from seqc.run.weights.restore import restore


def evaluate_checkpoint(
    session: Session,
    source: Path,
    backend: str,
    split: str,
    limit: int,
    run_dir: Path,
    reporter: Reporter | None = None,
    by: list[str] | None = None,
    label: str | None = None,
) -> dict[str, Any]:
    """Score the weights at `source` on `split` (decoding its first `limit` examples for
    BLEU/chrF or WER/CER; 0: all) on `backend`, and report each figure; a speech task's WER and
    CER also per group of each manifest field in `by`. `label` names the data in the folder the
    transcripts go to in place of the split's name (`seqc eval --manifest`'s own). Returns the
    figures reported: the split's loss and the like, `wer` and `cer`, `bleu` and `chrf`."""
    from seqc.run.scoring.evaluate import evaluate

    reporter = reporter or PlainReporter()
    restored = restore(session, source, backend, reporter)
    model, params, weights = restored.model, restored.state["params"], restored.weights
    # which weights were scored: a run still training has newer checkpoints by the time a
    # figure is read
    reporter.result(
        f"checkpoint: step {weights.step} of {weights.path} ({registry.title(weights.backend)})"
    )
    # a misspelt field, or a task without transcripts: said before any scoring
    from seqc.run.scoring.breakdown import check_by

    pipeline = session.pipeline
    check_by(by or [], pipeline.task, session.task, pipeline.splits[split].examples, split)
    scores = evaluate(model, params, session.pipeline, split)
    for k, v in scores.items():
        reporter.result(f"{split}_{k}: {v:.4f}" if isinstance(v, float) else f"{split}_{k}: {v}")
    metrics = {m.kind for m in session.task_config["metrics"]}
    if session.pipeline.task == "asr" and metrics & {"wer", "cer"}:
        from seqc.run.scoring.asr_eval import evaluate_speech

        folder = eval_dir(run_dir, session, weights, label or split)
        w = evaluate_speech(
            session, model, params, weights, split, limit, by or [], run_dir, folder, reporter
        )
        scores |= {"wer": w["wer"], "cer": w["cer"]}
    if session.pipeline.task == "seq2seq" and metrics & {"bleu", "chrf"}:
        from seqc.run.decoding.decoders import decoder_for
        from seqc.run.decoding.defaults import default_strategy
        from seqc.run.scoring.translate import score_translations

        strategy = session.compiled.decode or default_strategy()
        tok = session.pipeline.target_tokenizer
        decoder = decoder_for(model, params, tok.bos_id, tok.eos_id, tok.pad_id)
        t = score_translations(decoder, session.pipeline, strategy, split, limit)
        for src, hyp, ref in t["samples"]:
            reporter.info(f"  src: {src}\n  hyp: {hyp}\n  ref: {ref}")
        sig = t["signatures"]
        reporter.result(f"{split}_bleu: {t['bleu']:.2f}  ({t['examples']} examples; {sig['bleu']})")
        reporter.result(f"{split}_chrf: {t['chrf']:.2f}  ({sig['chrf']})")
        folder = write_eval(run_dir, session, weights, split, limit, strategy, t, label)
        reporter.result(f"{split} hypotheses and scores: {folder}")
        scores |= {"bleu": t["bleu"], "chrf": t["chrf"]}
    return scores


def write_eval(
    run_dir: Path,
    session: Session,
    weights: Weights,
    split: str,
    limit: int,
    strategy: DecodeConfig,
    scored: dict[str, Any],
    label: str | None = None,
) -> Path:
    """Write the translations and their scores to RUN/eval/STEP-SPLIT (-TASK in a multi-task
    run), where a reported figure can be checked and rescored; a later eval of the same
    checkpoint and split replaces the folder whole."""
    from seqc.run.rundir.lock import unwritable
    from seqc.run.scoring.translate import write_translations

    folder = eval_dir(run_dir, session, weights, label or split)
    facts = {
        "task": session.task,
        "split": split,
        "limit": limit,
        "checkpoint": {"step": weights.step, "path": str(weights.path), "backend": weights.backend},
        "decode": strategy.to_json(),
    }
    try:
        write_translations(folder, scored, facts)
    except OSError as e:
        raise unwritable(run_dir, e) from None
    return folder


def eval_dir(run_dir: Path, session: Session, weights: Weights, split: str) -> Path:
    """Where the evaluation of `weights` on `split` is written: RUN/eval/TAG-SPLIT(-TASK)."""
    from seqc.run.scoring.translate import eval_folder
    from seqc.run.session import several_tasks

    tag = checkpoint_tag(run_dir, Path(weights.path), weights.step)
    return eval_folder(run_dir, tag, split, session.task, several_tasks(session.resolved))


def checkpoint_tag(run_dir: Path, source: Path, step: int) -> str:
    """What names an evaluated checkpoint in RUN/eval: its step for the run's own checkpoints,
    else its folder and step (`last-3-step-1750` of `seqc average`, which shares its newest
    step with a checkpoint of the run and must not replace that one's evaluation)."""
    own = (run_dir / "checkpoints").resolve()
    where = source.resolve()
    if where == own or own in where.parents:
        return str(step)
    return where.name if where.name.endswith(f"-{step}") else f"{where.name}-{step}"
