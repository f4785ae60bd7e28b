"""`seqc eval --artifact DIR`: an exported translator or recogniser scored on a split, as its
checkpoint is.

Why: what a user ships is the artifact (ONNX or TFLite, fp32 or int8), and the figure that
matters is its BLEU (or WER) on the test split next to the checkpoint's, decoded with the same
strategy and scored by the same code (`score_translations`, `seqc.run.scoring.asr_eval`):
export's own gates translate a few dev sentences or transcribe a few dev utterances greedily,
enough to catch a broken file, not to report a result. The hypotheses and scores go to
RUN/eval/ARTIFACT-SPLIT (`onnx-dynamic-test`; -TASK after it in a multi-task run), beside the
checkpoint's. A speech artifact takes `--by FIELD` and `--manifest FILE` as a checkpoint does.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from seqc.run.report import PlainReporter, Reporter
from seqc.run.session import Session, several_tasks
from seqc.spec.errors import UsageError

if TYPE_CHECKING:
    from seqc.run.export.artifact import Artifact


def eval_artifact(
    session: Session,
    path: Path,
    split: str,
    limit: int,
    run_dir: Path,
    reporter: Reporter | None = None,
    by: list[str] | None = None,
    label: str | None = None,
) -> Path:
    """Translate `split` (its first `limit` examples; 0: all) with the artifact at `path`,
    report BLEU and chrF with sacreBLEU's signatures, and write the translations; or, for a
    speech artifact, transcribe it and report WER and CER (per group of each field in `by`
    too). The folder written: RUN/eval/ARTIFACT-SPLIT, LABEL in place of SPLIT when given
    (`seqc eval --manifest`'s own)."""
    from seqc.run.decoding.text_decoder import fallback_strategy, from_artifact
    from seqc.run.export.artifact import check_against, load_artifact
    from seqc.run.rundir.lock import unwritable
    from seqc.run.scoring.translate import eval_folder, score_translations, write_translations

    reporter = reporter or PlainReporter()
    kind = session.pipeline.task
    if kind not in ("seq2seq", "asr"):
        raise UsageError(
            f"seqc eval --artifact scores translation and speech artifacts; task "
            f"`{session.task}` is {kind}",
            code="artifact-eval-task",
            hint="seqc export reports an artifact's dev quality for every task kind",
        )
    if split not in session.pipeline.splits:
        raise UsageError(
            f"the spec's input has no {split} split",
            code="no-split",
            hint=f"one of: {', '.join(session.pipeline.splits)}",
        )
    # a misspelt field, or a task without transcripts: said before anything is loaded
    from seqc.run.scoring.breakdown import check_by

    examples = session.pipeline.splits[split].examples
    check_by(by or [], kind, session.task, examples, split)
    art = load_artifact(path)
    check_against(art, session)
    if kind == "asr":
        return _eval_speech(session, art, split, limit, run_dir, reporter, by or [], label)
    gen = from_artifact(art)
    strategy = session.compiled.decode or fallback_strategy()
    step = (art.manifest.get("checkpoint") or {}).get("step")
    reporter.info(
        f"translating {split} with {art.format} ({art.manifest['quantize']}) from {path}, "
        f"exported from checkpoint step {step}"
    )
    t = score_translations(gen.decoder, session.pipeline, strategy, split, limit)
    for src, hyp, ref in t["samples"]:
        reporter.info(f"  src: {src}\n  hyp: {hyp}\n  ref: {ref}")
    sig = t["signatures"]
    reporter.result(f"{split}_bleu: {t['bleu']:.2f}  ({t['examples']} examples; {sig['bleu']})")
    reporter.result(f"{split}_chrf: {t['chrf']:.2f}  ({sig['chrf']})")
    tag = path.resolve().name
    several = several_tasks(session.resolved)
    folder = eval_folder(run_dir, tag, label or split, session.task, several)
    facts = {
        "task": session.task,
        "split": split,
        "limit": limit,
        "artifact": art.record(),
        "decode": strategy.to_json(),
    }
    try:
        write_translations(folder, t, facts)
    except OSError as e:
        raise unwritable(run_dir, e) from None
    reporter.result(f"{split} hypotheses and scores: {folder}")
    return folder


def _eval_speech(
    session: Session,
    art: Artifact,
    split: str,
    limit: int,
    run_dir: Path,
    reporter: Reporter,
    by: list[str],
    label: str | None,
) -> Path:
    from seqc.run.scoring.asr_eval import evaluate_speech_artifact
    from seqc.run.scoring.translate import eval_folder

    step = (art.manifest.get("checkpoint") or {}).get("step")
    reporter.info(
        f"transcribing {split} with {art.format} ({art.manifest['quantize']}) from {art.path}, "
        f"exported from checkpoint step {step}"
    )
    tag = art.path.resolve().name
    several = several_tasks(session.resolved)
    folder = eval_folder(run_dir, tag, label or split, session.task, several)
    evaluate_speech_artifact(session, art, split, limit, by, run_dir, folder, reporter)
    return folder
