"""`seqc export`: trained weights as deployment artifacts, each checked against the model, and
the table of their sizes, latencies, quality and parity.

The work is `seqc.run.export` (`plan` says which artifacts, `task.export_task` builds one task's);
this command picks the jobs from the flags or the spec's `export { }` block and lays out the
table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from seqc.cli.console import ConsoleReporter, err, out
from seqc.cli.guard import guarded
from seqc.cli.options import (
    CheckpointOpt,
    ExpOpt,
    FileArg,
    RunDirOpt,
    SetOpt,
    TaskOpt,
    TokenizerCacheOpt,
)
from seqc.run.export.build import Row
from seqc.run.export.task import Exported


@guarded
def export_cmd(
    spec: FileArg,
    experiment: ExpOpt,
    run_dir: RunDirOpt = None,
    checkpoint: CheckpointOpt = None,
    format_: Annotated[
        list[str] | None,
        typer.Option("--format", help="onnx, tflite or savedmodel (repeatable; default onnx)."),
    ] = None,
    quantize: Annotated[
        list[str] | None,
        typer.Option(
            "--quantize",
            help="none, dynamic, int8 or fp16 (repeatable; each format takes those it has).",
        ),
    ] = None,
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Folder for the artifacts (default RUN/export).")
    ] = None,
    bleu: Annotated[
        int, typer.Option(help="Translate this many dev examples per artifact for BLEU.")
    ] = 20,
    batches: Annotated[int, typer.Option(help="Dev batches for parity and perplexity.")] = 2,
    wer: Annotated[
        int,
        typer.Option(
            help="Transcribe this many dev utterances per artifact for WER and CER (speech)."
        ),
    ] = 200,
    normalize: Annotated[
        bool,
        typer.Option(
            help="--no-normalize: export the raw score of a given next token (one output row "
            "per token) instead of the logits, for a self-normalised model (nce, snis B).",
        ),
    ] = True,
    sentences: Annotated[
        bool,
        typer.Option(
            "--sentences",
            help="Add a language model's sentence scorer to its ONNX artifacts (sequence.onnx:"
            " whole sentences scored in one call, for n-best rescoring; twice the size).",
        ),
    ] = False,
    keep_float: Annotated[
        list[str] | None,
        typer.Option(
            "--keep-float",
            help="A layer (path, as `seqc show --graph` lists them) that the TFLite int8 "
            "artifacts leave in float, such as a speech front end (repeatable).",
        ),
    ] = None,
    set_: SetOpt = None,
    cache_dir: TokenizerCacheOpt = None,
    task: TaskOpt = None,
) -> None:
    """Export trained weights (of either backend) as deployment artifacts: an encoder and a
    decoder-step graph with explicit caches, checked against the trained model on dev data.
    Without --format, the formats the experiment's `export { }` block lists (else ONNX). A
    multi-task run: one set of artifacts per task (in RUN/export/TASK), or --task's; each holds
    its task's graph and only the weights that task reads."""
    from seqc.data.targets import output_folder
    from seqc.run.export.plan import check_layers, from_spec, plan
    from seqc.run.export.task import export_task
    from seqc.run.session import open_sessions

    if out_dir is not None:
        output_folder(out_dir, "--out")  # before the data and the model load
    sessions = open_sessions(spec, experiment, set_ or [], cache_dir=cache_dir, task=task)
    run_dir = run_dir or Path("runs") / experiment
    keep = tuple(keep_float or ())
    reporter = ConsoleReporter()
    for session in sessions:
        if format_ or quantize or not normalize or keep or sentences:
            jobs = plan(
                format_ or ["onnx"], quantize or ["none"], normalize, keep, sentences=sentences
            )
            check_layers(session, keep)
        else:
            jobs = from_spec(session) or plan(["onnx"], ["none"])
        target = out_dir or run_dir / "export"
        if session.others or len(sessions) > 1:
            target = target / session.task
            err.print(f"task {session.task}:")
        source = checkpoint or run_dir
        done = export_task(session, jobs, source, target, batches, bleu, wer, reporter)
        _print_table(done)


def _print_table(done: Exported) -> None:
    """The export table: each artifact's size (and its ratio to the fp32 one of its format),
    latency, dev quality and parity, titled with the trained model's figures on the same
    sample; then each artifact's folder."""
    from rich.table import Table

    reference = ", ".join(f"{k} {v:.2f}" for k, v in done.reference.items())
    table = Table(
        title=f"exports (quality on {done.sample}, not the whole split as `seqc eval` scores "
        f"it; the trained model on the same: {reference})"
    )
    for col in (
        "format",
        "quantize",
        "size",
        "x fp32",
        f"latency b1 {done.latency}",
        "quality",
        "parity",
    ):
        table.add_column(col, justify="right" if col not in ("format", "quantize") else "left")
    fp32 = {r.format: r.size_bytes for r in done.rows if r.quantize == "none"}
    for r in done.rows:
        ratio = f"{r.size_bytes / fp32[r.format]:.2f}" if r.format in fp32 else "-"
        quality = ", ".join(f"{k} {v:.2f}" for k, v in r.quality.items())
        table.add_row(
            r.format,
            _quantized(r),
            f"{r.size_bytes / 2**20:.2f} MiB",
            ratio,
            f"{r.latency_ms:.1f} ms",
            quality,
            f"{r.parity:.1e}",
        )
    out.print(table)
    for r in done.rows:
        out.print(f"{r.format}-{r.quantize}: {r.path}")


def _quantized(row: Row) -> str:
    kept = row.extra.get("keep_float")
    return f"{row.quantize} ({', '.join(kept)} float)" if kept else row.quantize


COMMANDS = {"export": export_cmd}
"""This module's commands by name (`seqc.cli.app.LAZY_COMMANDS`)."""
