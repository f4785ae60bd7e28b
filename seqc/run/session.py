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
from seqc.compiler.graph import Graph
from seqc.data.pipeline import InputPipeline
from seqc.resolve.experiment import ResolvedExperiment, resolve
from seqc.resolve.layers import LayerInstance
from seqc.resolve.program import Program, load_program
from seqc.spec.errors import CheckError, Note, UsageError


@dataclass
class Session:
    program: Program
    resolved: ResolvedExperiment
    task: str
    pipeline: InputPipeline
    compiled: CompiledTask

    @property
    def graph(self) -> Graph:
        return self.compiled.graph

    @property
    def task_config(self) -> Any:
        return self.resolved.config[self.task]

    @property
    def train_config(self) -> Any:
        return self.resolved.config["train"]


def _one_task(resolved: ResolvedExperiment) -> str:
    if len(resolved.tasks) > 1:
        raise UsageError(
            f"experiment `{resolved.name}` trains {len(resolved.tasks)} tasks together; "
            "multi-task training is not implemented yet",
            code="not-implemented",
            hint="train one task per experiment for now",
        )
    return resolved.tasks[0]


def open_session(
    spec: Path,
    experiment: str,
    overrides: list[str] | None = None,
    cache_dir: Path | None = None,
    splits: tuple[str, ...] = ("train", "dev", "test"),
) -> Session:
    program = load_program(spec)
    first = resolve(program, experiment, overrides)
    task = _one_task(first)
    kwargs = {"cache_dir": cache_dir} if cache_dir is not None else {}
    available = tuple(s for s in splits if first.config[task]["input"].get(s) is not None)
    pipeline = InputPipeline.for_task(first, task, splits=available, **kwargs)
    symbols = {f"{pipeline.name}.vocab_size": pipeline.vocab_size}
    resolved = resolve(program, experiment, overrides, symbols)
    compiled = compile_task(program, resolved, task)
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
    return Session(program, resolved, task, pipeline, compiled)


def compile_experiment(
    spec: Path,
    experiment: str,
    overrides: list[str] | None = None,
    cache_dir: Path | None = None,
) -> tuple[ResolvedExperiment, CompiledTask]:
    """The experiment's task compiled without reading the data when the spec states every
    size; with it (through `open_session`) when a model param waits on the data."""
    program = load_program(spec)
    resolved = resolve(program, experiment, overrides)
    task = _one_task(resolved)
    if data_symbols(resolved, task):
        session = open_session(spec, experiment, overrides, cache_dir=cache_dir)
        return session.resolved, session.compiled
    return resolved, compile_task(program, resolved, task)


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
