"""One task's `seqc export`: every planned artifact built from the same trained weights and the
same context (`prepare`), and the figures its table shows beside the trained model's.

The table itself is the caller's to lay out (`seqc.cli.export`): this returns its rows, the
trained model's figures on the same sample, and what that sample was."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from seqc.data.staging import staged
from seqc.data.targets import output_folder
from seqc.run.export.build import Row, export_one, no_sentence_scorer
from seqc.run.export.context import Context, prepare
from seqc.run.export.plan import Job, folder_name
from seqc.run.report import PlainReporter, Reporter
from seqc.run.session import Session
from seqc.run.weights.restore import checked_weights


@dataclass(frozen=True)
class Exported:
    """What one task's export built, and what its figures are measured against."""

    rows: list[Row]
    reference: dict[str, float]
    """The trained model's figures on the same sample (and its raw-score perplexity, when a
    scoring artifact was built)."""
    latency: str
    """What the latency column times: `x32` positions, or `2 s` of a speech model's audio."""
    sample: str
    """What the quality column was measured on (`sample_of`)."""


def export_task(
    session: Session,
    jobs: list[Job],
    source: Path,
    target: Path,
    batches: int,
    bleu: int,
    wer: int = 0,
    reporter: Reporter | None = None,
) -> Exported:
    """Build each of `jobs` from the weights at `source` into its folder of `target`, each
    gated and measured on `batches` dev batches (BLEU on `bleu` dev sentences, WER on `wer`
    utterances, where the task has them)."""
    reporter = reporter or PlainReporter()
    if any(job.sentences for job in jobs) and session.compiled.kind != "lm":
        raise no_sentence_scorer(session.task)  # before the weights and the dev data load
    weights, params = checked_weights(session, source, reporter)
    ctx = prepare(session, params, weights, batches, bleu, wer)
    rows = []
    output_folder(target, "--out")
    # what each format builds once and converts in every quantization (TFLite's SavedModel)
    with staged(target, "shared") as shared:
        for job in jobs:
            fmt, q, norm, keep, scorer = job
            kept = f", {', '.join(keep)} in float" if keep else ""
            kept += ", sentence scorer" if scorer else ""
            reporter.info(f"exporting {fmt} ({q}{'' if norm else ', raw scores'}{kept}) ...")
            folder = target / folder_name(job)
            rows.append(export_one(ctx, fmt, q, folder, norm, keep, shared, scorer))
    scoring = ctx.scoring_view.reference_quality if ctx.scoring_view is not None else {}
    return Exported(
        rows, ctx.reference_quality | scoring, "2 s" if ctx.speech else "x32", sample_of(ctx)
    )


def sample_of(ctx: Context) -> str:
    """What the export table's quality column was measured on: a few dev batches (and
    sentences or utterances), a check that the artifact keeps the model's quality; `seqc eval`
    scores the whole split, so its figures differ from these."""
    n = len(ctx.batches)
    parts = [f"{n} dev batch{'es' if n != 1 else ''} of at most 8 rows"]
    if ctx.bleu_examples and ctx.task_kind == "seq2seq":
        parts.append(f"BLEU on {ctx.bleu_examples} dev sentences")
    if ctx.wer_examples and ctx.speech:
        parts.append(f"WER on {ctx.wer_examples} dev utterances")
    return ", ".join(parts)
