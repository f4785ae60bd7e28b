"""From a spec to everything a run needs: the resolved experiment, data, op graph and model.

The data is read before the model is lowered because some model params depend on it (the
vocabulary size of a character tokenizer): the experiment is resolved once to find its input,
and again with the data's figures bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from seqc.compiler.graph import Graph
from seqc.compiler.layers import LayerInstance
from seqc.compiler.lower import lower_model
from seqc.compiler.program import Program, load_program
from seqc.compiler.resolve import ResolvedExperiment, resolve
from seqc.data.pipeline import InputPipeline
from seqc.spec.errors import CheckError, UsageError


@dataclass
class Session:
    program: Program
    resolved: ResolvedExperiment
    task: str
    pipeline: InputPipeline
    graph: Graph

    @property
    def task_config(self) -> dict:
        return self.resolved.config[self.task]

    @property
    def train_config(self) -> dict:
        return self.resolved.config["train"]


def open_session(
    spec: Path,
    experiment: str,
    overrides: list[str] | None = None,
    cache_dir: Path | None = None,
    splits: tuple[str, ...] = ("train", "dev", "test"),
) -> Session:
    program = load_program(spec)
    first = resolve(program, experiment, overrides)
    if len(first.tasks) > 1:
        raise UsageError(
            f"experiment `{experiment}` trains {len(first.tasks)} tasks together; multi-task "
            "training is not implemented yet",
            code="not-implemented",
            hint="train one task per experiment for now",
        )
    task = first.tasks[0]
    kwargs = {"cache_dir": cache_dir} if cache_dir is not None else {}
    available = tuple(s for s in splits if first.config[task]["input"].get(s) is not None)
    pipeline = InputPipeline.for_task(first, task, splits=available, **kwargs)
    symbols = {f"{pipeline.name}.vocab_size": pipeline.vocab_size}
    resolved = resolve(program, experiment, overrides, symbols)
    decl = program.layers[resolved.config[task]["model"].kind]
    graph = lower_model(decl, resolved.models[task], program.layers)
    _check_positions(resolved.models[task], pipeline)
    return Session(program, resolved, task, pipeline, graph)


POSITIONAL = ("SinusoidalPosition", "LearnedPosition")


def _check_positions(model: LayerInstance, pipeline: InputPipeline) -> None:
    """A position layer must cover the longest sequence the data will feed it.

    Past its table a gather returns NaN rather than failing, so this is checked here, where the
    batch lengths are known, and reported at the layer's line.
    """
    longest = max(
        (b.bound for split in pipeline.splits.values() for b in split.batcher.buckets),
        default=0,
    )
    stack = [model]
    while stack:
        inst = stack.pop()
        stack.extend(inst.children)
        if inst.kind in POSITIONAL and inst.args.get("max_length", longest) < longest:
            raise CheckError(
                f"`{inst.path}` covers {inst.args['max_length']} positions, but batches of "
                f"`{pipeline.name}` are up to {longest} tokens long",
                span=inst.span,
                code="positions-too-short",
                hint="raise the layer's max_length, or lower the input's buckets / max_length",
            )
