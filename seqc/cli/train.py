"""`seqc train`, `seqc eval` and `seqc decode`: the run commands, mounted by `seqc.cli`."""

from __future__ import annotations

import dataclasses
import os
import shlex
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from seqc.run.average import average_cmd
from seqc.run.calibrate import calibrate_cmd
from seqc.run.console import err, out
from seqc.run.generators import (
    from_artifact,
    from_session,
    hypotheses,
    hypothesis,
    sample_text,
    transcribe_file,
)
from seqc.run.launch import launch_cmd
from seqc.run.outputs import LineFile, one_line
from seqc.run.place import place_cmd
from seqc.run.profile import profile_cmd
from seqc.spec.errors import FileError, UsageError

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
TaskOpt = Annotated[
    str | None,
    typer.Option(
        "--task",
        help="A task of a multi-task experiment (default: its only task; eval and export take "
        "every task).",
    ),
]
CheckpointOpt = Annotated[
    Path | None,
    typer.Option(
        "--checkpoint",
        help="Weights to load: a run directory or checkpoints folder written by either backend "
        "(default: the run directory's).",
    ),
]


def _session(
    spec: Path,
    experiment: str,
    set_: list[str] | None,
    cache: Path | None,
    task: str | None = None,
) -> Any:
    from seqc.run.session import open_session

    return open_session(spec, experiment, set_ or [], cache_dir=cache, task=task)


def _sessions(
    spec: Path, experiment: str, set_: list[str] | None, cache: Path | None, task: str | None
) -> list[Any]:
    """The named task's session, or every task's (a multi-task experiment without --task)."""
    from seqc.run.session import open_sessions

    return open_sessions(spec, experiment, set_ or [], cache_dir=cache, task=task)


def _check_backend(backend: str | None) -> None:
    """Fail on a bad --backend before the data is read, not after."""
    if backend is not None:
        from seqc.backends.registry import check_backend

        check_backend(backend)


def _backend(session: Any, backend: str | None) -> str:
    from seqc.backends.registry import check_backend

    return check_backend(backend or session.resolved.config["backend"])


def _weights(session: Any, source: Path) -> tuple[Any, dict[str, Any]]:
    """The weights at `source` (a run directory or checkpoints of either backend), checked
    against the session's model."""
    from seqc.backends.weights import match_params, names_weights, read_weights
    from seqc.run.identity import check_use, run_of
    from seqc.run.rundir import no_run

    if not names_weights(source):
        raise no_run(source)
    run = run_of(source)
    if run is not None:  # a run's weights: with its own model and tokenizer only
        check_use(run, session)
    weights = read_weights(source)
    for why in weights.skipped:
        err.print(f"warning: {why}; using step {weights.step}", soft_wrap=True)
    if session.others:  # one task of a multi-task model: the other tasks' params stay behind
        kept = {k: v for k, v in weights.params.items() if k not in session.others}
        weights = dataclasses.replace(weights, params=kept)
    return weights, match_params(session.graph, weights)


def _restore(session: Any, source: Path, backend: str) -> tuple[Any, Any]:
    """The model on `backend` with the weights of `source`, written by either backend."""
    model, state, _ = _restore_weights(session, source, backend)
    return model, state


def _restore_weights(session: Any, source: Path, backend: str) -> tuple[Any, Any, Any]:
    """`_restore`, and the `Weights` read: their step and path name what was evaluated."""
    from seqc.backends import registry

    weights, params = _weights(session, source)
    model = registry.backend(backend).model(session.compiled, session.train_config)
    state = model.with_params(params)
    if weights.backend != backend:
        err.print(
            f"loaded the {registry.title(weights.backend)} checkpoint (step {weights.step}) into "
            f"{registry.title(backend)}, tensor by tensor by layer path",
            soft_wrap=True,
        )
    return model, state, weights


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
    dev_eval: Annotated[
        bool,
        typer.Option(
            help="Evaluate on dev before and after training (--no-dev-eval: skip both; at a "
            "large vocabulary each takes minutes). `train.eval_every` sets those in between."
        ),
    ] = True,
    prompt: Annotated[str, typer.Option(help="Prompt of the sample printed at the end.")] = "",
    coordinator: Annotated[
        str | None,
        typer.Option(help="HOST:PORT of process 0, for a run of several processes."),
    ] = None,
    num_processes: Annotated[
        int | None, typer.Option(help="Processes in the run (default: 1, or the cluster's).")
    ] = None,
    process_id: Annotated[int | None, typer.Option(help="This process's rank.")] = None,
) -> None:
    """Train an experiment; prints dev perplexity (a CTC model's: loss) before and after, and
    a decoded sample.

    A run of several processes (`seqc launch`, or one `seqc train` per process with
    --coordinator, --num-processes, --process-id, or a cluster's environment) trains one model:
    process 0 owns the run directory and prints."""
    from seqc.backends import registry
    from seqc.run.cluster import cluster_from
    from seqc.run.interrupt import Interrupted
    from seqc.run.train import CheckpointNoSpace, train
    from seqc.run.train_checks import check_strategy

    _check_backend(backend)
    cluster = cluster_from(coordinator, num_processes, process_id)
    resolved = _resolved(spec, experiment, set_)
    name = backend or str(resolved.config["backend"])
    engine = registry.backend(name)
    # what the spec alone decides is refused before the processes join or the data is read
    check_strategy(resolved, engine, cluster)
    engine.start(cluster)  # before any computation; a parameter server serves here
    if cluster.several and not cluster.primary:
        engine.barrier("seqc-data")  # process 0 prepares the data's caches first
    from seqc.run.session import Joint, open_training

    session = open_training(spec, experiment, set_ or [], cache_dir)
    if cluster.several and cluster.primary:
        engine.barrier("seqc-data")
    say = err.print if cluster.primary else (lambda *a, **k: None)
    shout = out.print if cluster.primary else (lambda *a, **k: None)
    run_dir = run_dir or Path("runs") / experiment
    tasks = list(session.sessions.values()) if isinstance(session, Joint) else [session]
    for one in tasks:
        params = sum(p.size for p in one.graph.params.values())
        head = f"task {one.task}: " if len(tasks) > 1 else ""
        say(f"{head}{one.pipeline.summary()}")
        say(f"{head}model {one.task_config['model'].kind}: {params:,} params")
    if isinstance(session, Joint):
        total = sum(p.size for p in session.multi.params.values())
        shared = sum(
            session.multi.params[n].size
            for n, users in session.multi.owners().items()
            if len(users) > 1
        )
        say(f"multi-task model: {total:,} params, {shared:,} of them shared")
    say(f"backend: {name}" + (f", {cluster.num_processes} processes" if cluster.several else ""))
    try:
        result = train(
            session,
            run_dir,
            resume=resume,
            console=err,
            progress=progress and cluster.primary,
            eval_before=dev_eval and not resume,
            eval_after=dev_eval,
            backend=name,
            cluster=cluster,
        )
    except Interrupted as stop:
        again = _train_again(spec, experiment, run_dir, backend, set_, cluster)
        say(
            f"{stop!s}: checkpoint {stop.step} written to {run_dir / 'checkpoints'}\n"
            f"resume with: {shlex.join([*again, '--resume'])}",
            soft_wrap=True,
        )
        raise typer.Exit(stop.exit_code) from None
    except CheckpointNoSpace as full:  # the command that goes on, once there is room
        again = _train_again(spec, experiment, run_dir, backend, set_, cluster)
        resume = ["--resume"] if full.last is not None else []
        full.hint = f"free space on {full.device}, then run: {shlex.join([*again, *resume])}"
        raise
    later = f"after {result.steps} steps"
    for task, before in (result.tasks_before or {}).items():
        shout(f"{task}: {_headline(before, 'before training')}")
    for task, after in (result.tasks_after or {}).items():
        shout(f"{task}: {_headline(after, later)}")
    if result.dev_before:
        shout(_headline(result.dev_before, "before training"))
    if result.dev_after:
        shout(_headline(result.dev_after, later))
        if "raw_perplexity" in result.dev_after:  # NCE, SNIS B: scored without the softmax
            after = result.dev_after
            shout(
                f"dev perplexity of the raw scores exp(s): {after['raw_perplexity']:.2f} "
                f"(log Z {after['log_z_mean']:+.3f} +- {after['log_z_std']:.3f})"
            )
    if cluster.primary:
        for one in tasks:
            model, params = result.model, result.state["params"]
            if isinstance(session, Joint):
                model, params = model.view(one.task), model.task_params(one.task, params)
            gen = from_session(one, model, params)
            head = f"{one.task} " if len(tasks) > 1 else ""
            shout(f"{head}sample: {sample_text(gen, prompt or None)}")
    shout(f"run directory: {run_dir}")


def _train_again(
    spec: Path,
    experiment: str,
    run_dir: Path,
    backend: str | None,
    set_: list[str] | None,
    cluster: Any,
) -> list[str]:
    """The command line that runs this training again (add `--resume` to continue it): under
    `seqc launch` when it started the run."""
    again = ["seqc", "train", str(spec), "-e", experiment, "--run-dir", str(run_dir)]
    if backend:
        again += ["--backend", backend]
    if cluster.several and "SEQC_NUM_PROCESSES" in os.environ:  # started by seqc launch
        workers = len(cluster.spec.get("worker", [])) or cluster.num_processes
        servers = len(cluster.spec.get("ps", []))
        again[1:1] = ["launch", "-n", str(workers), *(["--ps", str(servers)] * bool(servers))]
        again.insert(again.index("train"), "--")
    for value in set_ or []:
        again += ["--set", value]
    return again


def _headline(dev: dict[str, Any], when: str) -> str:
    """`dev perplexity before training: 71.82`, or a CTC model's `dev loss after 4 steps:
    41.20`: the figure `seqc.run.evaluate.headline` picks."""
    from seqc.run.evaluate import headline

    name, value = headline(dev)
    return f"dev {name} {when}: {value:.2f}"


def _resolved(spec: Path, experiment: str, set_: list[str] | None) -> Any:
    """The resolved experiment, read before its data: its `backend` (a run's processes must
    join before any of them computes) and what it refuses on the spec alone."""
    from seqc.resolve.experiment import resolve
    from seqc.resolve.program import load_program

    return resolve(load_program(spec), experiment, set_ or [])


DEV_LIMIT = 200
"""How many examples `seqc eval` decodes by default on a split other than test."""


def eval_cmd(
    spec: FileArg,
    experiment: ExpOpt,
    run_dir: RunOpt = None,
    split: Annotated[str, typer.Option(help="dev or test.")] = "dev",
    limit: Annotated[
        int | None,
        typer.Option(
            help="Decode only the first N examples for BLEU/chrF or WER/CER (0: all; default: "
            f"all of test, the first {DEV_LIMIT} of dev).",
            show_default=False,
        ),
    ] = None,
    set_: SetOpt = None,
    cache_dir: CacheOpt = None,
    backend: BackendOpt = None,
    checkpoint: CheckpointOpt = None,
    task: TaskOpt = None,
    artifact: Annotated[
        Path | None,
        typer.Option(
            help="Translate with this exported artifact instead of a checkpoint (its BLEU and "
            "chrF; translations in RUN/eval/ARTIFACT-SPLIT, -TASK after it in a multi-task run).",
        ),
    ] = None,
) -> None:
    """Score the last checkpoint of a run: loss, perplexity, token accuracy; BLEU and chrF of
    decoded translations when the task lists them, with sacreBLEU's signatures, the
    hypotheses written to RUN/eval/STEP-SPLIT/. A multi-task run: every task, or --task.
    With --artifact: an exported translator's BLEU and chrF on the split, decoded as the
    checkpoint's are."""
    _check_backend(backend)
    run_dir = run_dir or Path("runs") / experiment
    if limit is None:  # a test figure is reported on the whole split; dev is a quick look
        limit = 0 if split == "test" else DEV_LIMIT
    if artifact is not None:
        from seqc.run.artifact import load_artifact
        from seqc.run.artifact_eval import eval_artifact

        if checkpoint is not None:
            raise UsageError(
                "--artifact and --checkpoint both name what to translate with; give one",
                code="conflicting-options",
            )
        named = task or _artifact_task(
            spec, experiment, set_, load_artifact(artifact).manifest.get("task")
        )
        session = _session(spec, experiment, set_, cache_dir, named)
        eval_artifact(session, artifact, split, limit, run_dir)
        return
    sessions = _sessions(spec, experiment, set_, cache_dir, task)
    for session in sessions:
        if len(sessions) > 1:
            out.print(f"task {session.task}:")
        _eval_one(session, checkpoint or run_dir, backend, split, limit, run_dir)


def _eval_one(
    session: Any, source: Path, backend: str | None, split: str, limit: int, run_dir: Path
) -> None:
    from seqc.backends.registry import title as registry_title
    from seqc.run.evaluate import evaluate

    model, state, weights = _restore_weights(session, source, _backend(session, backend))
    # which weights were scored: a run still training has newer checkpoints by the time a
    # figure is read
    out.print(
        f"checkpoint: step {weights.step} of {weights.path} ({registry_title(weights.backend)})",
        soft_wrap=True,
    )
    scores = evaluate(model, state["params"], session.pipeline, split)
    for k, v in scores.items():
        out.print(f"{split}_{k}: {v:.4f}" if isinstance(v, float) else f"{split}_{k}: {v}")
    metrics = {m.kind for m in session.task_config["metrics"]}
    if session.pipeline.task == "asr" and metrics & {"wer", "cer"}:
        from seqc.run.transcribe import score_model

        strategy = session.task_config.get("decode")
        w = score_model(model, state["params"], session.pipeline, split, strategy, limit)
        for hyp, ref in w["samples"]:
            err.print(f"  hyp: {hyp}\n  ref: {ref}")
        out.print(f"{split}_wer: {w['wer']:.2f}  ({w['examples']} utterances, {w['words']} words)")
        out.print(f"{split}_cer: {w['cer']:.2f}")
    if session.pipeline.task == "seq2seq" and metrics & {"bleu", "chrf"}:
        from seqc.resolve.values import CallValue
        from seqc.run.translate import score_translations

        strategy = session.task_config.get("decode") or CallValue(
            kind="greedy", namespace="decode", args={"max_length": 64}
        )
        from seqc.run.decode import decoder_for

        tok = session.pipeline.target_tokenizer
        decoder = decoder_for(model, state["params"], tok.bos_id, tok.eos_id, tok.pad_id)
        t = score_translations(decoder, session.pipeline, strategy, split, limit)
        for src, hyp, ref in t["samples"]:
            err.print(f"  src: {src}\n  hyp: {hyp}\n  ref: {ref}")
        sig = t["signatures"]
        out.print(f"{split}_bleu: {t['bleu']:.2f}  ({t['examples']} examples; {sig['bleu']})")
        out.print(f"{split}_chrf: {t['chrf']:.2f}  ({sig['chrf']})")
        folder = _write_eval(run_dir, session, weights, split, limit, strategy, t)
        out.print(f"{split} hypotheses and scores: {folder}", soft_wrap=True)


def _write_eval(
    run_dir: Path,
    session: Any,
    weights: Any,
    split: str,
    limit: int,
    strategy: Any,
    scored: dict[str, Any],
) -> Path:
    """Write the translations and their scores to RUN/eval/STEP-SPLIT (-TASK in a multi-task
    run), where a reported figure can be checked and rescored; a later eval of the same
    checkpoint and split replaces the folder whole."""
    from seqc.resolve.values import to_json
    from seqc.run.lock import unwritable
    from seqc.run.session import several_tasks
    from seqc.run.translate import eval_folder, write_translations

    tag = _checkpoint_tag(run_dir, Path(weights.path), weights.step)
    folder = eval_folder(run_dir, tag, split, session.task, several_tasks(session.resolved))
    facts = {
        "task": session.task,
        "split": split,
        "limit": limit,
        "checkpoint": {"step": weights.step, "path": str(weights.path), "backend": weights.backend},
        "decode": to_json(strategy),
    }
    try:
        write_translations(folder, scored, facts)
    except OSError as e:
        raise unwritable(run_dir, e) from None
    return folder


def _checkpoint_tag(run_dir: Path, source: Path, step: int) -> str:
    """What names an evaluated checkpoint in RUN/eval: its step for the run's own checkpoints,
    else its folder and step (`last-3-step-1750` of `seqc average`, which shares its newest
    step with a checkpoint of the run and must not replace that one's evaluation)."""
    own = (run_dir / "checkpoints").resolve()
    where = source.resolve()
    if where == own or own in where.parents:
        return str(step)
    return where.name if where.name.endswith(f"-{step}") else f"{where.name}-{step}"


def decode_cmd(
    spec: Annotated[
        Path | None,
        typer.Argument(help="A .seq file (optional with --artifact).", show_default=False),
    ] = None,
    experiment: Annotated[
        str | None, typer.Option("-e", "--experiment", help="Registry name of an experiment.")
    ] = None,
    run_dir: RunOpt = None,
    input_files: Annotated[
        list[Path] | None,
        typer.Option(
            "--input",
            help="One prompt/source per line; - for stdin. A speech model: a wav file to "
            "transcribe (16-bit PCM mono at the model's sample rate), or a wav on stdin (-). "
            "Repeatable: the files in order, a transcript per wav.",
        ),
    ] = None,
    set_: SetOpt = None,
    cache_dir: CacheOpt = None,
    backend: BackendOpt = None,
    checkpoint: CheckpointOpt = None,
    task: TaskOpt = None,
    artifact: Annotated[
        Path | None,
        typer.Option(
            "--artifact",
            help="Decode with an exported artifact (ONNX via onnxruntime, TFLite via LiteRT, "
            "SavedModel via TF) instead of a checkpoint; the spec is then optional.",
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            help="Write one hypothesis per input line to this file (atomically), as stdout "
            "gets when it is not a terminal.",
        ),
    ] = None,
) -> None:
    """Generate with the task's decode strategy, from a file or an interactive prompt; a
    speech model transcribes the wav file given as --input.

    On a terminal each line shows `source -> hypothesis`; into a pipe or a file (`> out.txt`)
    or with --output, only the hypotheses, one line per input line (an empty one for an empty
    source), ready for sacreBLEU: notes go to stderr."""

    _check_backend(backend)
    if output is not None and not input_files:
        raise UsageError(
            "--output needs --input: the file holds one hypothesis per input line",
            code="missing-option",
            hint="seqc decode ... --input sources.txt --output hypotheses.txt",
        )
    inputs = _decode_inputs(input_files or [])  # read before the model loads: errors first
    target = LineFile(output) if output is not None else None  # an unwritable path fails now
    try:
        gen = _decode_generator(
            spec, experiment, run_dir, set_, cache_dir, backend, checkpoint, task, artifact
        )
        _decode_lines(gen, inputs, target)
    except BaseException:
        if target is not None:
            target.abort()
        raise
    if target is not None:
        target.commit()
        err.print(f"wrote {target.lines} lines to {output}", soft_wrap=True)


def _decode_generator(
    spec: Path | None,
    experiment: str | None,
    run_dir: Path | None,
    set_: list[str] | None,
    cache_dir: Path | None,
    backend: str | None,
    checkpoint: Path | None,
    task: str | None,
    artifact: Path | None,
) -> Any:
    """The generator `seqc decode` runs: an artifact's, or a checkpoint's on a backend."""

    if artifact is not None:
        from seqc.run.artifact import check_against, load_artifact

        art = load_artifact(artifact)
        if spec is not None:
            if experiment is None:
                raise UsageError("with a spec, name its experiment: -e EXP", code="missing-option")
            # a multi-task experiment's artifact says which task it holds
            named = task or _artifact_task(spec, experiment, set_, art.manifest.get("task"))
            check_against(art, _session(spec, experiment, set_, cache_dir, named))
        gen = from_artifact(art)
        err.print(
            f"decoding with {art.format} ({art.manifest['quantize']}) from {artifact}",
            soft_wrap=True,
        )
    else:
        if spec is None or experiment is None:
            raise UsageError(
                "decode needs a spec and an experiment, or --artifact",
                code="missing-option",
                hint="seqc decode SPEC -e EXP [--run-dir D], or seqc decode --artifact DIR",
            )
        session = _session(spec, experiment, set_, cache_dir, task)
        run_dir = run_dir or Path("runs") / experiment
        model, state = _restore(session, checkpoint or run_dir, _backend(session, backend))
        gen = from_session(session, model, state["params"])
    return gen


@dataclasses.dataclass
class _DecodeInputs:
    """What `seqc decode --input` was given: wav files (paths, or bytes from stdin) or the
    lines of text files, in order; neither: an interactive prompt."""

    wavs: list[Any] = dataclasses.field(default_factory=list)
    lines: list[str] | None = None


def _decode_inputs(paths: list[Path]) -> _DecodeInputs:
    """Every `--input` read and classified: a `.wav` file, a wav on standard input (it starts
    with RIFF), else text. One kind per call (a transcript per wav, or a hypothesis per line);
    standard input once."""
    from seqc.data.audio import RIFF, WavBytes

    inputs = _DecodeInputs()
    if [str(p) for p in paths].count("-") > 1:
        raise UsageError(
            "--input - is given twice: standard input can be read once",
            code="bad-input",
            hint="give - once, and the other inputs as files",
        )
    for path in paths:
        if str(path) == "-":
            data = _read_input(path)
            if data.startswith(RIFF):
                inputs.wavs.append(WavBytes("<stdin>", data))
            else:
                inputs.lines = [*(inputs.lines or []), *_text_lines(path, data)]
        elif path.suffix.lower() == ".wav":
            inputs.wavs.append(path)
        elif (data := _read_input(path)).startswith(RIFF):  # a wav by another name
            inputs.wavs.append(WavBytes(str(path), data))
        else:
            inputs.lines = [*(inputs.lines or []), *_text_lines(path, data)]
    if inputs.wavs and inputs.lines is not None:
        raise UsageError(
            "--input names both audio and text: a call decodes one kind",
            code="mixed-inputs",
            found=", ".join(str(p) for p in paths),
            hint="transcribe the wav files in one call and decode the text files in another",
        )
    return inputs


def _decode_lines(gen: Any, inputs: _DecodeInputs, target: LineFile | None) -> None:
    """Transcribe the wavs, or decode the input lines or an interactive prompt's. Into `target`,
    or into a stdout that is not a terminal, the bare hypotheses one per line (fairseq and
    Marian do the same), so `> out.txt` scores and pipes; a terminal gets `source -> hypothesis`
    (a wav's name and its transcript, when there are several)."""
    plain = target is not None or not sys.stdout.isatty()
    lines = inputs.lines

    def emit(line: str) -> None:
        if target is not None:
            target.write(line)
        else:
            sys.stdout.write(one_line(line) + "\n")
            sys.stdout.flush()  # a pipe's reader sees each line as it is decoded

    if gen.task == "asr" or inputs.wavs:
        if lines is not None:  # a speech model reads audio: text in a wav's place
            transcribe_file(gen, None, text=True)
        wavs = inputs.wavs or [None]
        for wav in wavs:
            transcript = transcribe_file(gen, wav)
            if plain:
                emit(transcript)
            else:
                out.print(f"{wav}: {transcript}" if len(wavs) > 1 else transcript)
        return
    if lines is not None and plain:
        for text in hypotheses(gen, lines):
            emit(text)
        return
    if lines is not None:  # an empty source stays empty: no held-out sentence stands in for it
        for line in lines:
            out.print(sample_text(gen, line) if line.strip() or gen.task == "lm" else "")
        return
    err.print("type a prompt and press enter; an empty line or Ctrl-D ends")
    while True:
        try:
            if plain:  # the prompt goes to the terminal, not into the redirected output
                err.print("> ", end="")
            line = input() if plain else input("> ")
        except EOFError:
            break
        if not line.strip():
            break
        if plain:
            emit(hypothesis(gen, line))
        else:
            out.print(sample_text(gen, line))


def _artifact_task(
    spec: Path, experiment: str, set_: list[str] | None, held: str | None
) -> str | None:
    """The task an artifact holds, when it is one of the experiment's several tasks (a
    one-task experiment takes its task; another experiment's artifact is refused later)."""
    from seqc.resolve.experiment import resolve
    from seqc.resolve.program import load_program

    tasks = resolve(load_program(spec), experiment, set_ or []).tasks
    return held if len(tasks) > 1 and held in tasks else None


def _read_input(path: Path) -> bytes:
    """The bytes of a decode input: a file, or `-` for standard input."""
    try:
        return sys.stdin.buffer.read() if str(path) == "-" else path.read_bytes()
    except OSError as e:
        raise FileError(
            f"cannot read {path}: {e.strerror}", path=str(path), code="unreadable"
        ) from None


def _text_lines(path: Path, data: bytes) -> list[str]:
    """The lines of a decode input, UTF-8; an undecodable byte is an error at its line. Lines
    end at a newline (LF or CRLF) only, as `wc -l` and sacreBLEU count them: a form feed or
    U+2028 inside a line would shift every later hypothesis."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise FileError(
            f"{path} is not UTF-8 text: byte 0x{data[e.start]:02x} at line {line}",
            path=f"{path}:{line}",
            code="not-utf8",
            hint="convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)",
        ) from None
    lines = text.split("\n")
    if lines[-1] == "":  # the last line's own newline ends it; it does not start another
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


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

    from seqc.backends.registry import check_backend, title
    from seqc.backends.weights import read_weights, write_weights
    from seqc.data.targets import new_folder

    check_backend(to)
    new_folder(out_dir, "--out", "the converted weights")  # before any weight is read
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
        f"from {title(weights.backend)} to {title(to)}: {out_dir}"
    )
    if weights.full_state:
        err.print("the optimizer state stays behind: the converted checkpoint holds weights only")


def export_cmd(
    spec: FileArg,
    experiment: ExpOpt,
    run_dir: RunOpt = None,
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
    keep_float: Annotated[
        list[str] | None,
        typer.Option(
            "--keep-float",
            help="A layer (path, as `seqc show --graph` lists them) that the TFLite int8 "
            "artifacts leave in float, such as a speech front end (repeatable).",
        ),
    ] = None,
    set_: SetOpt = None,
    cache_dir: CacheOpt = None,
    task: TaskOpt = None,
) -> None:
    """Export trained weights (of either backend) as deployment artifacts: an encoder and a
    decoder-step graph with explicit caches, checked against the trained model on dev data.
    Without --format, the formats the experiment's `export { }` block lists (else ONNX). A
    multi-task run: one set of artifacts per task (in RUN/export/TASK), or --task's; each holds
    its task's graph and only the weights that task reads."""
    from seqc.data.targets import output_folder
    from seqc.run.export import check_layers, from_spec, plan

    if out_dir is not None:
        output_folder(out_dir, "--out")  # before the data and the model load
    sessions = _sessions(spec, experiment, set_, cache_dir, task)
    run_dir = run_dir or Path("runs") / experiment
    keep = tuple(keep_float or ())
    for session in sessions:
        if format_ or quantize or not normalize or keep:
            jobs = plan(format_ or ["onnx"], quantize or ["none"], normalize, keep)
            check_layers(session, keep)
        else:
            jobs = from_spec(session) or plan(["onnx"], ["none"])
        target = out_dir or run_dir / "export"
        if session.others or len(sessions) > 1:
            target = target / session.task
            err.print(f"task {session.task}:")
        _export_task(session, jobs, checkpoint or run_dir, target, batches, bleu, wer)


def _export_task(
    session: Any,
    jobs: list[Any],
    source: Path,
    target: Path,
    batches: int,
    bleu: int,
    wer: int = 0,
) -> None:
    from seqc.run.export import export_one, folder_name, prepare

    weights, params = _weights(session, source)
    ctx = prepare(session, params, weights, batches, bleu, wer)
    rows = []
    for job in jobs:
        fmt, q, norm, keep = job
        kept = f", {', '.join(keep)} in float" if keep else ""
        err.print(f"exporting {fmt} ({q}{'' if norm else ', raw scores'}{kept}) ...")
        rows.append(export_one(ctx, fmt, q, target / folder_name(job), norm, keep))
    scoring = ctx._scoring.reference_quality if ctx._scoring is not None else {}
    _export_table(
        rows, ctx.reference_quality | scoring, "2 s" if ctx.speech else "x32", _sample(ctx)
    )


def _sample(ctx: Any) -> str:
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


def _quantized(row: Any) -> str:
    kept = row.extra.get("keep_float")
    return f"{row.quantize} ({', '.join(kept)} float)" if kept else row.quantize


def _export_table(
    rows: list[Any], reference: dict[str, float], length: str = "x32", sample: str = "dev"
) -> None:
    from rich.table import Table

    table = Table(
        title=f"exports (quality on {sample}, not the whole split as `seqc eval` scores it; "
        "the trained model on the same: "
        + ", ".join(f"{k} {v:.2f}" for k, v in reference.items())
        + ")"
    )
    for col in (
        "format",
        "quantize",
        "size",
        "x fp32",
        f"latency b1 {length}",
        "quality",
        "parity",
    ):
        table.add_column(col, justify="right" if col not in ("format", "quantize") else "left")
    fp32 = {r.format: r.size_bytes for r in rows if r.quantize == "none"}
    for r in rows:
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
    for r in rows:
        out.print(f"{r.format}-{r.quantize}: {r.path}")


COMMANDS = {
    "train": train_cmd,
    "eval": eval_cmd,
    "decode": decode_cmd,
    "convert": convert_cmd,
    "average": average_cmd,
    "export": export_cmd,
    "place": place_cmd,
    "profile": profile_cmd,
    "calibrate": calibrate_cmd,
    "launch": launch_cmd,
}
