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
BackendOpt = Annotated[str, typer.Option("--backend", help="jax (tf comes with the TF issue).")]


def _session(spec: Path, experiment: str, set_: list[str] | None, cache: Path | None) -> Any:
    from seqc.run.session import open_session

    return open_session(spec, experiment, set_ or [], cache_dir=cache)


def _check_backend(backend: str) -> None:
    if backend != "jax":
        from seqc.spec.errors import UsageError

        raise UsageError(
            f"backend `{backend}` is not available yet",
            code="bad-backend",
            expected="jax",
            found=backend,
        )


def _restore(session: Any, run_dir: Path) -> tuple[Any, Any]:
    from seqc.backends.jax.checkpoint import Checkpoints
    from seqc.backends.jax.train import JaxModel

    if not (run_dir / "checkpoints").is_dir():
        raise FileError(
            f"no checkpoints in {run_dir}",
            path=str(run_dir),
            code="no-checkpoint",
            hint=f"train first: seqc train SPEC -e EXP --run-dir {run_dir}",
        )
    model = JaxModel(session.graph, session.task_config, session.train_config)
    state = Checkpoints(run_dir / "checkpoints").restore(model.init(0))
    return model, state


def _sample_text(session: Any, model: Any, params: Any, prompt: str | None = None) -> str:
    from seqc.run.decode import Decoder

    tok = session.pipeline.tokenizer
    strategy = session.task_config.get("decode")
    if strategy is None:
        from seqc.compiler.values import CallValue

        strategy = CallValue(kind="greedy", namespace="decode", args={"max_length": 48})
    dec = Decoder(model, params, session.pipeline.task, tok.bos_id, tok.eos_id, tok.pad_id)
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
    backend: BackendOpt = "jax",
    progress: Annotated[bool, typer.Option(help="Show the progress bar.")] = True,
    prompt: Annotated[str, typer.Option(help="Prompt of the sample printed at the end.")] = "",
) -> None:
    """Train an experiment; prints dev perplexity before and after, and a decoded sample."""
    from seqc.run.train import train

    _check_backend(backend)
    session = _session(spec, experiment, set_, cache_dir)
    run_dir = run_dir or Path("runs") / experiment
    params = sum(p.size for p in session.graph.params.values())
    err.print(escape(session.pipeline.summary()))
    err.print(f"model {session.resolved.config[session.task]['model'].kind}: {params:,} params")
    result = train(
        session, run_dir, resume=resume, console=err, progress=progress, eval_before=not resume
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
    backend: BackendOpt = "jax",
) -> None:
    """Score the last checkpoint of a run: loss, perplexity, token accuracy; BLEU and chrF of
    decoded translations when the task lists them."""
    from seqc.run.evaluate import evaluate

    _check_backend(backend)
    session = _session(spec, experiment, set_, cache_dir)
    run_dir = run_dir or Path("runs") / experiment
    model, state = _restore(session, run_dir)
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
    backend: BackendOpt = "jax",
) -> None:
    """Generate with the task's decode strategy, from a file or an interactive prompt."""
    _check_backend(backend)
    session = _session(spec, experiment, set_, cache_dir)
    run_dir = run_dir or Path("runs") / experiment
    model, state = _restore(session, run_dir)
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


COMMANDS = {"train": train_cmd, "eval": eval_cmd, "decode": decode_cmd}
