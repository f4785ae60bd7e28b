"""`seqc train`, `seqc eval` and `seqc decode`: the run commands, mounted by `seqc.cli`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from seqc.spec.errors import FileError

err = Console(stderr=True, highlight=False)
out = Console(highlight=False)

FileArg = Annotated[Path, typer.Argument(help="A .seq file.", show_default=False)]
ExpOpt = Annotated[str, typer.Option("-e", "--experiment", help="Registry name of an experiment.")]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a value: --set train.steps=200 (repeatable)."),
]
RunOpt = Annotated[
    Path | None,
    typer.Option("--run-dir", help="Run directory (default: runs/<experiment>)."),
]
CacheOpt = Annotated[
    Path | None, typer.Option("--cache-dir", help="Tokenizer cache (default .cache/tokenizers).")
]
BackendOpt = Annotated[
    str | None,
    typer.Option("--backend", help="jax or tf (default: the experiment's `backend`)."),
]
CheckpointOpt = Annotated[
    Path | None,
    typer.Option(
        "--checkpoint",
        help="Weights to load: a run directory or checkpoints folder written by either backend "
        "(default: the run directory's).",
    ),
]


def _session(spec: Path, experiment: str, set_: list[str] | None, cache: Path | None) -> Any:
    from seqc.run.session import open_session

    return open_session(spec, experiment, set_ or [], cache_dir=cache)


def _check_backend(backend: str | None) -> None:
    """Fail on a bad --backend before the data is read, not after."""
    if backend is not None:
        from seqc.backends.select import check_backend

        check_backend(backend)


def _backend(session: Any, backend: str | None) -> str:
    from seqc.backends.select import check_backend

    return check_backend(backend or session.resolved.config["backend"])


def _restore(session: Any, source: Path, backend: str) -> tuple[Any, Any]:
    """The model on `backend` with the weights of `source`, written by either backend."""
    from seqc.backends import select
    from seqc.backends.weights import match_params, read_weights

    if not source.exists():
        raise FileError(
            f"no run directory or checkpoint at {source}",
            path=str(source),
            code="no-checkpoint",
            hint=f"train first: seqc train SPEC -e EXP --run-dir {source}",
        )
    weights = read_weights(source)
    params = match_params(session.graph, weights)
    model = select.make_model(backend, session.graph, session.task_config, session.train_config)
    state = select.with_params(backend, model, params)
    if weights.backend != backend:
        err.print(
            f"loaded the {select.NAMES[weights.backend]} checkpoint (step {weights.step}) into "
            f"{select.NAMES[backend]}, tensor by tensor by layer path"
        )
    return model, state


def _sample_text(session: Any, model: Any, params: Any, prompt: str | None = None) -> str:
    from seqc.run.decode import decoder_for

    tok = session.pipeline.tokenizer
    strategy = session.task_config.get("decode")
    if strategy is None:
        from seqc.compiler.values import CallValue

        strategy = CallValue(kind="greedy", namespace="decode", args={"max_length": 48})
    dec = decoder_for(model, params, session.pipeline.task, tok.bos_id, tok.eos_id, tok.pad_id)
    if session.pipeline.task == "lm":
        start = tok.encode(prompt or "")
        ids = [*start, *dec.generate(strategy, start, stop_at_eos=False)]
        lines, line = [], []
        for i in ids:  # an LM's EOS ends a line of the corpus: print it as a line break
            if i == tok.eos_id:
                lines.append(tok.decode(line))
                line = []
            else:
                line.append(i)
        return "\n".join([*lines, tok.decode(line)])
    if not prompt:  # translate a held-out sentence rather than an empty one
        split = "dev" if "dev" in session.pipeline.splits else "train"
        prompt = session.pipeline.splits[split].examples[0].source
    src = [*tok.encode(prompt), tok.eos_id]
    translation = session.pipeline.target_tokenizer.decode(dec.generate(strategy, [], src))
    return f"{prompt} -> {translation}"


def train_cmd(
    spec: FileArg,
    experiment: ExpOpt,
    set_: SetOpt = None,
    run_dir: RunOpt = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue from the last checkpoint.")
    ] = False,
    cache_dir: CacheOpt = None,
    backend: BackendOpt = None,
    progress: Annotated[bool, typer.Option(help="Show the progress bar.")] = True,
    prompt: Annotated[str, typer.Option(help="Prompt of the sample printed at the end.")] = "",
) -> None:
    """Train an experiment; prints dev perplexity before and after, and a decoded sample."""
    from seqc.run.train import train

    _check_backend(backend)
    session = _session(spec, experiment, set_, cache_dir)
    backend = _backend(session, backend)
    run_dir = run_dir or Path("runs") / experiment
    params = sum(p.size for p in session.graph.params.values())
    err.print(escape(session.pipeline.summary()))
    err.print(f"model {session.resolved.config[session.task]['model'].kind}: {params:,} params")
    err.print(f"backend: {backend}")
    result = train(
        session,
        run_dir,
        resume=resume,
        console=err,
        progress=progress,
        eval_before=not resume,
        backend=backend,
    )
    if result.dev_before:
        out.print(f"dev perplexity before training: {result.dev_before['perplexity']:.2f}")
    if result.dev_after:
        out.print(
            f"dev perplexity after {result.steps} steps: {result.dev_after['perplexity']:.2f}"
        )
    sample = _sample_text(session, result.model, result.state["params"], prompt or None)
    out.print(f"sample: {escape(sample)}")
    out.print(f"run directory: {run_dir}")


def eval_cmd(
    spec: FileArg,
    experiment: ExpOpt,
    run_dir: RunOpt = None,
    split: Annotated[str, typer.Option(help="dev or test.")] = "dev",
    limit: Annotated[
        int, typer.Option(help="Translate only the first N examples for BLEU/chrF (0: all).")
    ] = 200,
    set_: SetOpt = None,
    cache_dir: CacheOpt = None,
    backend: BackendOpt = None,
    checkpoint: CheckpointOpt = None,
) -> None:
    """Score the last checkpoint of a run: loss, perplexity, token accuracy; BLEU and chrF of
    decoded translations when the task lists them."""
    from seqc.run.evaluate import evaluate

    _check_backend(backend)
    session = _session(spec, experiment, set_, cache_dir)
    run_dir = run_dir or Path("runs") / experiment
    model, state = _restore(session, checkpoint or run_dir, _backend(session, backend))
    scores = evaluate(model, state["params"], session.pipeline, split)
    for k, v in scores.items():
        out.print(f"{split}_{k}: {v:.4f}" if isinstance(v, float) else f"{split}_{k}: {v}")
    metrics = {m.kind for m in session.task_config["metrics"]}
    if session.pipeline.task == "seq2seq" and metrics & {"bleu", "chrf"}:
        from seqc.compiler.values import CallValue
        from seqc.run.translate import score_translations

        strategy = session.task_config.get("decode") or CallValue(
            kind="greedy", namespace="decode", args={"max_length": 64}
        )
        t = score_translations(model, state["params"], session.pipeline, strategy, split, limit)
        for src, hyp, ref in t["samples"]:
            err.print(f"  src: {escape(src)}\n  hyp: {escape(hyp)}\n  ref: {escape(ref)}")
        out.print(f"{split}_bleu: {t['bleu']:.2f}  ({t['examples']} examples)")
        out.print(f"{split}_chrf: {t['chrf']:.2f}")


def decode_cmd(
    spec: FileArg,
    experiment: ExpOpt,
    run_dir: RunOpt = None,
    input_file: Annotated[
        Path | None, typer.Option("--input", help="One prompt/source per line; - for stdin.")
    ] = None,
    set_: SetOpt = None,
    cache_dir: CacheOpt = None,
    backend: BackendOpt = None,
    checkpoint: CheckpointOpt = None,
) -> None:
    """Generate with the task's decode strategy, from a file or an interactive prompt."""
    _check_backend(backend)
    session = _session(spec, experiment, set_, cache_dir)
    run_dir = run_dir or Path("runs") / experiment
    model, state = _restore(session, checkpoint or run_dir, _backend(session, backend))
    if input_file is not None:
        try:
            lines = (sys.stdin if str(input_file) == "-" else input_file.open()).read()
        except OSError as e:
            raise FileError(
                f"cannot read {input_file}: {e.strerror}", path=str(input_file), code="unreadable"
            ) from None
        for line in lines.splitlines():
            out.print(escape(_sample_text(session, model, state["params"], line)))
        return
    err.print("type a prompt and press enter; an empty line or Ctrl-D ends")
    while True:
        try:
            line = input("> ")
        except EOFError:
            break
        if not line.strip():
            break
        out.print(escape(_sample_text(session, model, state["params"], line)))


def convert_cmd(
    source: Annotated[
        Path, typer.Argument(help="A run directory or checkpoints folder.", show_default=False)
    ],
    to: Annotated[str, typer.Option("--to", help="Backend format to write: jax or tf.")],
    out_dir: Annotated[Path, typer.Option("--out", help="New folder for the converted weights.")],
    step: Annotated[
        int | None, typer.Option(help="Step of the checkpoint (default: the latest).")
    ] = None,
) -> None:
    """Write a checkpoint's weights in the other backend's format, tensor by tensor by layer
    path; the result loads with --checkpoint in eval, decode and export."""
    import numpy as np

    from seqc.backends.select import NAMES, check_backend
    from seqc.backends.weights import read_weights, write_weights

    check_backend(to)
    weights = read_weights(source, step)
    write_weights(weights, out_dir, to)
    back = read_weights(out_dir)
    worst = max(
        (float(np.max(np.abs(back.params[k] - v), initial=0.0)) for k, v in weights.params.items()),
        default=0.0,
    )
    if set(back.params) != set(weights.params) or worst != 0.0:
        raise FileError(
            f"the converted weights at {out_dir} differ from the source (max |diff| {worst})",
            path=str(out_dir),
            code="convert-failed",
        )
    size = sum(v.nbytes for v in weights.params.values())
    out.print(
        f"converted {len(weights.params)} tensors ({size / 2**20:.1f} MiB) of step {weights.step} "
        f"from {NAMES[weights.backend]} to {NAMES[to]}: {out_dir}"
    )
    if weights.full_state:
        err.print("the optimizer state stays behind: the converted checkpoint holds weights only")


EXPORT_FORMATS = ("savedmodel",)


def export_cmd(
    spec: FileArg,
    experiment: ExpOpt,
    run_dir: RunOpt = None,
    checkpoint: CheckpointOpt = None,
    format_: Annotated[
        list[str] | None,
        typer.Option("--format", help="savedmodel (repeatable; ONNX and TFLite come next)."),
    ] = None,
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Folder for the artifacts (default RUN/export).")
    ] = None,
    set_: SetOpt = None,
    cache_dir: CacheOpt = None,
) -> None:
    """Export a trained model's weights (from either backend) as deployment artifacts, checked
    for parity against the model on the spec's own dev data."""
    from seqc.backends.weights import match_params, read_weights
    from seqc.run.export import export_savedmodel_checked
    from seqc.spec.errors import UsageError

    formats = format_ or ["savedmodel"]
    for f in formats:
        if f not in EXPORT_FORMATS:
            raise UsageError(
                f"unknown or not yet available export format `{f}`",
                code="bad-format",
                expected=", ".join(EXPORT_FORMATS),
                found=f,
            )
    session = _session(spec, experiment, set_, cache_dir)
    run_dir = run_dir or Path("runs") / experiment
    source = checkpoint or run_dir
    if not source.exists():
        raise FileError(
            f"no run directory or checkpoint at {source}",
            path=str(source),
            code="no-checkpoint",
            hint=f"train first: seqc train SPEC -e EXP --run-dir {source}",
        )
    weights = read_weights(source)
    params = match_params(session.graph, weights)
    target = out_dir or run_dir / "export"
    report = export_savedmodel_checked(session, params, weights, target / "savedmodel")
    out.print(
        f"savedmodel: {report['path']}  signatures {', '.join(report['signatures'])}  "
        f"max |logit diff| vs TF model {report['max_abs_err_tf']:.2e}, "
        f"vs JAX {report['max_abs_err_jax']:.2e} on {report['batches']} dev batches"
    )


COMMANDS = {
    "train": train_cmd,
    "eval": eval_cmd,
    "decode": decode_cmd,
    "convert": convert_cmd,
    "export": export_cmd,
}
