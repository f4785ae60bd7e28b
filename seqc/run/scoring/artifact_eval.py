"""`seqc eval --artifact DIR`: an exported translator scored on a split, as its checkpoint is.

Why: what a user ships is the artifact (ONNX or TFLite, fp32 or int8), and the figure that
matters is its BLEU on the test split next to the checkpoint's, decoded with the same strategy
and scored by the same code (`score_translations`): export's own BLEU gate translates a few dev
sentences greedily, enough to catch a broken file, not to report a result. The translations and
scores go to RUN/eval/ARTIFACT-SPLIT (`onnx-dynamic-test`; -TASK after it in a multi-task run),
beside the checkpoint's.
"""

from __future__ import annotations

from pathlib import Path

from seqc.run.report import PlainReporter, Reporter
from seqc.run.session import Session, several_tasks
from seqc.spec.errors import UsageError


def eval_artifact(
    session: Session,
    path: Path,
    split: str,
    limit: int,
    run_dir: Path,
    reporter: Reporter | None = None,
) -> Path:
    """Translate `split` (its first `limit` examples; 0: all) with the artifact at `path`,
    report BLEU and chrF with sacreBLEU's signatures, and write the translations; the folder."""
    from seqc.run.decoding.text_decoder import fallback_strategy, from_artifact
    from seqc.run.export.artifact import check_against, load_artifact
    from seqc.run.rundir.lock import unwritable
    from seqc.run.scoring.translate import eval_folder, score_translations, write_translations

    reporter = reporter or PlainReporter()
    if session.pipeline.task != "seq2seq":
        raise UsageError(
            f"seqc eval --artifact scores translation artifacts; task `{session.task}` is "
            f"{session.pipeline.task}",
            code="artifact-eval-task",
            hint="seqc export reports an artifact's dev quality for every task kind "
            "(--wer N for speech)",
        )
    if split not in session.pipeline.splits:
        raise UsageError(
            f"the spec's input has no {split} split",
            code="no-split",
            hint=f"one of: {', '.join(session.pipeline.splits)}",
        )
    art = load_artifact(path)
    check_against(art, session)
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
    folder = eval_folder(run_dir, tag, split, session.task, several_tasks(session.resolved))
    facts = {
        "task": session.task,
        "split": split,
        "limit": limit,
        "artifact": {
            "path": str(path),
            "format": art.format,
            "quantize": art.manifest.get("quantize"),
            "checkpoint": art.manifest.get("checkpoint"),
        },
        "decode": strategy.to_json(),
    }
    try:
        write_translations(folder, t, facts)
    except OSError as e:
        raise unwritable(run_dir, e) from None
    reporter.result(f"{split} hypotheses and scores: {folder}")
    return folder
