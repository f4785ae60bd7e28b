"""From a spec to everything a run needs: the resolved experiment, data and compiled task.

The data is read before the model is compiled because some model params depend on it (the
vocabulary size of a character tokenizer): the experiment is resolved once to find its input,
and again with the data's figures bound. Commands that need no data (`seqc place`) compile
without reading it when the spec states every size (`compile_experiment`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seqc.compiler.compile import CompiledTask, compile_task, data_symbols
from seqc.compiler.config import TrainConfig
from seqc.compiler.graph import Graph
from seqc.compiler.min_length import min_audio_samples
from seqc.compiler.multitask import MultiTask, compile_tasks
from seqc.data.pipeline import InputPipeline
from seqc.data.tokenizers import same_tokenizer
from seqc.resolve.experiment import ResolvedExperiment, resolve
from seqc.resolve.layers.instance import LayerInstance
from seqc.resolve.program import Program, load_program
from seqc.resolve.shares import find_layer
from seqc.spec.errors import CheckError, Note, UsageError, did_you_mean


@dataclass
class Session:
    """One task of an experiment, ready to run: its data and its compiled model. In a
    multi-task experiment, one task's view of the joint model (`MultiTaskSession`): its graph's
    params carry the multi-task names, and `others` names the params only the other tasks read."""

    program: Program
    resolved: ResolvedExperiment
    task: str
    pipeline: InputPipeline
    compiled: CompiledTask
    others: frozenset[str] = frozenset()
    """Params of the joint model this task does not read (a checkpoint of the joint model
    holds them; a model of this task alone does not)."""

    @property
    def graph(self) -> Graph:
        return self.compiled.graph

    @property
    def task_config(self) -> Any:
        return self.resolved.config[self.task]

    @property
    def train_config(self) -> TrainConfig:
        return self.compiled.train


@dataclass
class MultiTaskSession:
    """Every task of a multi-task experiment: each one's session, and the tasks compiled
    together (`seqc.compiler.multitask`)."""

    program: Program
    resolved: ResolvedExperiment
    sessions: dict[str, Session]
    multi: MultiTask

    @property
    def train_config(self) -> TrainConfig:
        return self.multi.train

    @property
    def tasks(self) -> list[str]:
        return list(self.sessions)


def several_tasks(resolved: ResolvedExperiment) -> bool:
    return len(resolved.tasks) > 1


def _which_task(resolved: ResolvedExperiment, task: str | None) -> str:
    """The task a one-task command runs: the named one, or the experiment's only one."""
    if task is not None:
        if task not in resolved.tasks:
            raise UsageError(
                f"experiment `{resolved.name}` has no task `{task}`",
                code="unknown-task",
                expected=", ".join(resolved.tasks),
                found=task,
                suggestion=did_you_mean(task, resolved.tasks),
            )
        return task
    if several_tasks(resolved):
        raise UsageError(
            f"experiment `{resolved.name}` trains {len(resolved.tasks)} tasks "
            f"({', '.join(resolved.tasks)}); this command runs one",
            code="which-task",
            hint=f"name it: --task {resolved.tasks[0]}",
        )
    return resolved.tasks[0]


def open_session(
    spec: Path,
    experiment: str,
    overrides: list[str] | None = None,
    cache_dir: Path | None = None,
    splits: tuple[str, ...] = ("train", "dev", "test"),
    task: str | None = None,
) -> Session:
    """The session of one task: the experiment's only one, or `task` (a multi-task
    experiment's task is compiled with the others, for the shared layers' names)."""
    program = load_program(spec)
    first = resolve(program, experiment, overrides)
    name = _which_task(first, task)
    if several_tasks(first):
        return open_multitask(spec, experiment, overrides, cache_dir, splits).sessions[name]
    kwargs = {"cache_dir": cache_dir} if cache_dir is not None else {}
    pipeline = _pipeline(first, name, splits, kwargs)
    symbols = {f"{pipeline.name}.vocab_size": pipeline.vocab_size}
    resolved = resolve(program, experiment, overrides, symbols)
    compiled = compile_task(program, resolved, name)
    _check_task(resolved, name, compiled, pipeline)
    return Session(program, resolved, name, pipeline, compiled)


def open_multitask(
    spec: Path,
    experiment: str,
    overrides: list[str] | None = None,
    cache_dir: Path | None = None,
    splits: tuple[str, ...] = ("train", "dev", "test"),
) -> MultiTaskSession:
    """Every task of an experiment with its data, compiled together. Tasks reading the same
    input block share its pipeline (read and tokenised once)."""
    program = load_program(spec)
    first = resolve(program, experiment, overrides)
    kwargs = {"cache_dir": cache_dir} if cache_dir is not None else {}
    pipelines: dict[str, InputPipeline] = {}
    by_task: dict[str, InputPipeline] = {}
    for t in first.tasks:
        key = str(first.config[t]["input"].get("name", t))
        if key not in pipelines:
            pipelines[key] = _pipeline(first, t, splits, kwargs)
        by_task[t] = pipelines[key]
    symbols = {f"{p.name}.vocab_size": p.vocab_size for p in pipelines.values()}
    resolved = resolve(program, experiment, overrides, symbols)
    multi = compile_tasks(program, resolved)
    owners = multi.owners()
    sessions = {}
    for t, compiled in multi.tasks.items():
        _check_task(resolved, t, compiled, by_task[t])
        others = frozenset(n for n, users in owners.items() if t not in users)
        sessions[t] = Session(program, resolved, t, by_task[t], compiled, others)
    check_shared_tokenizers(resolved, multi, by_task)
    return MultiTaskSession(program, resolved, sessions, multi)


def open_sessions(
    spec: Path,
    experiment: str,
    overrides: list[str] | None = None,
    cache_dir: Path | None = None,
    task: str | None = None,
) -> list[Session]:
    """The sessions a per-task command runs: the named task's, or every task's of the
    experiment (compiled together when there are several)."""
    if task is not None or not several_tasks(resolve(load_program(spec), experiment, overrides)):
        return [open_session(spec, experiment, overrides, cache_dir=cache_dir, task=task)]
    return list(open_multitask(spec, experiment, overrides, cache_dir).sessions.values())


def open_training(
    spec: Path,
    experiment: str,
    overrides: list[str] | None = None,
    cache_dir: Path | None = None,
) -> Session | MultiTaskSession:
    """What `seqc train` trains: the one task's session, or every task's together."""
    if several_tasks(resolve(load_program(spec), experiment, overrides)):
        return open_multitask(spec, experiment, overrides, cache_dir)
    return open_session(spec, experiment, overrides, cache_dir=cache_dir)


def _pipeline(
    resolved: ResolvedExperiment, task: str, splits: tuple[str, ...], kwargs: dict[str, Any]
) -> InputPipeline:
    available = tuple(s for s in splits if resolved.config[task]["input"].get(s) is not None)
    return InputPipeline.for_task(resolved, task, splits=available, **kwargs)


def _check_task(
    resolved: ResolvedExperiment, task: str, compiled: CompiledTask, pipeline: InputPipeline
) -> None:
    if compiled.kind != pipeline.task:
        what = {"lm": "a language model", "seq2seq": "an encoder-decoder"}
        raise CheckError(
            f"task `{task}`'s model is {what[compiled.kind]}, but its input `{pipeline.name}` "
            f"holds data for {what[pipeline.task]}",
            span=resolved.span(f"{task}.model"),
            code="task-mismatch",
            hint="an encoder-decoder reads `src`; its input needs targets (pairs of texts)",
        )
    _check_positions(resolved.models[task], pipeline)
    _check_vocabularies(resolved, task, pipeline)
    # speech: every utterance at least the model's shortest input, where data and model meet
    pipeline.require_samples(min_audio_samples(compiled.graph))


def check_shared_tokenizers(
    resolved: ResolvedExperiment, multi: MultiTask, pipelines: dict[str, InputPipeline]
) -> None:
    """A shared layer with a row per token id (an embedding, an output layer) means the same
    token to every task that uses it only when their tokenizers are the same: reported at the
    share, naming both inputs."""
    for share, uses in multi.shares.items():
        tasks = [u.split(".", 1)[0] for u in uses]
        layers = []
        for u in uses:
            task, path = u.split(".", 1)
            found = find_layer(resolved.models[task], path)
            layers += _instances(found) if found is not None else []
        if not any(i.kind in VOCABULARY for i in layers):
            continue
        first = pipelines[tasks[0]]
        for j, t in enumerate(tasks[1:], start=1):
            other = pipelines[t]
            if not same_tokenizer(first.tokenizer, other.tokenizer):
                raise CheckError(
                    f"share `{share}` holds a vocabulary table, but tasks `{tasks[0]}` and `{t}` "
                    f"read inputs with different tokenizers (`{first.name}`, `{other.name}`): "
                    "the same id would be another token in each",
                    span=resolved.span(f"share.{share}.{j}"),
                    code="share-vocabulary",
                    hint="give the inputs one tokenizer: the same settings and training text (a "
                    "joint tokenizer of a parallel corpus reads its columns in file order, so "
                    "both directions of one file share it)",
                )


def compile_experiment(
    spec: Path,
    experiment: str,
    overrides: list[str] | None = None,
    cache_dir: Path | None = None,
    task: str | None = None,
) -> tuple[ResolvedExperiment, CompiledTask]:
    """The experiment's task compiled without reading the data when the spec states every
    size; with it (through `open_session`) when a model param waits on the data."""
    program = load_program(spec)
    resolved = resolve(program, experiment, overrides)
    name = _which_task(resolved, task)
    if several_tasks(resolved):
        return resolved, compile_multitask(spec, experiment, overrides, cache_dir)[1].tasks[name]
    if data_symbols(resolved, name):
        session = open_session(spec, experiment, overrides, cache_dir=cache_dir)
        return session.resolved, session.compiled
    return resolved, compile_task(program, resolved, name)


def compile_multitask(
    spec: Path,
    experiment: str,
    overrides: list[str] | None = None,
    cache_dir: Path | None = None,
) -> tuple[ResolvedExperiment, MultiTask]:
    """Every task of the experiment compiled together, reading the data only when a model
    param waits on it (a multi-task `seqc place` or `show --graph`)."""
    program = load_program(spec)
    resolved = resolve(program, experiment, overrides)
    if any(data_symbols(resolved, t) for t in resolved.tasks):
        joint = open_multitask(spec, experiment, overrides, cache_dir)
        return joint.resolved, joint.multi
    return resolved, compile_tasks(program, resolved)


POSITIONAL = ("SinusoidalPosition", "LearnedPosition")
VOCABULARY = ("Embedding", "Softmax")
"""Layers with a row (or column) per token id: a vocabulary smaller than the tokenizer's would
read past the table (NaN or garbage) or never predict the ids past it."""


def _instances(model: LayerInstance) -> list[LayerInstance]:
    """Every layer of a model's tree, in the order it is declared."""
    found, stack = [], [model]
    while stack:
        inst = stack.pop()
        stack.extend(reversed(inst.children))
        found.append(inst)
    return found


def _check_vocabularies(resolved: ResolvedExperiment, task: str, pipeline: InputPipeline) -> None:
    """Every embedding and output layer covers the ids the data holds: at least the smaller
    tokenizer's vocabulary (the source's and the target's may differ), reported at the layer,
    with a note at the model argument that gave the size."""
    need = min(pipeline.vocab_size, pipeline.target_vocab_size)
    model_args = resolved.config[task]["model"].args
    for inst in _instances(resolved.models[task]):
        vocab = inst.args.get("vocab")
        if inst.kind in VOCABULARY and isinstance(vocab, int) and vocab < need:
            notes = [
                Note(span, f"`{task}.model.{name}` = {vocab} is set here")
                for name, value in model_args.items()
                if value == vocab and (span := resolved.span(f"{task}.model.{name}")) is not None
            ]
            raise CheckError(
                f"`{inst.path}` has a vocabulary of {vocab}, but the tokenizer of "
                f"`{pipeline.name}` gives {need} ids",
                span=inst.span,
                code="vocab-too-small",
                expected=f"vocab >= {need}",
                found=str(vocab),
                hint="pass the input's size, e.g. `vocab = input.vocab_size`",
                notes=notes[:1],
            )


def _check_positions(model: LayerInstance, pipeline: InputPipeline) -> None:
    """A position layer must cover the longest sequence the data will feed it.

    Past its table a gather returns NaN rather than failing, so this is checked here, where the
    batch lengths are known, and reported at the layer's line.
    """
    longest = max(
        (b.bound for split in pipeline.splits.values() for b in split.batcher.buckets),
        default=0,
    )
    for inst in _instances(model):
        if inst.kind in POSITIONAL and inst.args.get("max_length", longest) < longest:
            raise CheckError(
                f"`{inst.path}` covers {inst.args['max_length']} positions, but batches of "
                f"`{pipeline.name}` are up to {longest} tokens long",
                span=inst.span,
                code="positions-too-short",
                hint="raise the layer's max_length, or lower the input's buckets / max_length",
            )
