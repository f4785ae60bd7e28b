"""The one compile entry point: a resolved experiment's task, lowered to what a backend runs.

Every command that needs a model (train, eval, decode, export, place, `show --graph`), every
benchmark and every test goes through `compile_task`, so "lower this task's model" is written
once: the model's op graph, which batch field feeds which of its inputs, the task kind, and the
criterion graphs of its loss (see `seqc.compiler.lower.criterion`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from seqc.compiler.graph import Graph
from seqc.compiler.lower import lower_model
from seqc.compiler.lower.criterion import LABELS as LABEL_INPUT
from seqc.compiler.lower.criterion import LOGITS, MASK, lower_criterion
from seqc.compiler.signature import LABELS, TaskKind, input_fields, task_kind
from seqc.resolve.experiment import ResolvedExperiment
from seqc.resolve.program import Program
from seqc.resolve.values import Symbol
from seqc.spec.errors import UsageError


@dataclass(frozen=True, eq=False)
class CompiledTask:
    """One task of an experiment, compiled."""

    name: str
    kind: TaskKind
    graph: Graph
    """The model's forward graph: inputs by the forward's names, outputs `[logits]`."""
    fields: dict[str, str]
    """Forward input name -> batch field (`ids` -> `inputs`)."""
    train_criterion: Graph
    """logits, labels, mask -> loss, nll_sum, tokens."""
    eval_criterion: Graph
    """The same, and `correct` (token accuracy)."""
    config: Mapping[str, Any]
    """The task's resolved config: input, model, loss, metrics, decode."""

    @property
    def labels(self) -> tuple[str, str]:
        """The batch fields of the labels and their mask."""
        return LABELS[self.kind]

    def inputs(self, arrays: Mapping[str, Any]) -> dict[str, Any]:
        """The forward graph's inputs from a batch's arrays."""
        return {name: arrays[f] for name, f in self.fields.items()}

    def criterion_inputs(self, logits: Any, arrays: Mapping[str, Any]) -> dict[str, Any]:
        """The criterion graph's inputs: these logits and the batch's labels and mask."""
        labels, mask = self.labels
        return {LOGITS: logits, LABEL_INPUT: arrays[labels], MASK: arrays[mask]}


def data_symbols(resolved: ResolvedExperiment, task: str) -> dict[str, Symbol]:
    """The model args known only once the data is read (a character vocabulary's size)."""
    model = resolved.config[task]["model"]
    return {name: v for name, v in model.args.items() if isinstance(v, Symbol)}


def compile_task(program: Program, resolved: ResolvedExperiment, task: str) -> CompiledTask:
    """Lower `task` of a resolved experiment: model graph, input fields, criteria."""
    waiting = data_symbols(resolved, task)
    if waiting:
        name, value = next(iter(waiting.items()))
        raise UsageError(
            f"`{task}.model.{name}` is {value}, known only once the data is read",
            code="data-dependent",
            hint=f"give it: --set {task}.model.{name}=N",
        )
    config = resolved.config[task]
    graph = lower_model(program.layers[config["model"].kind], resolved.models[task], program.layers)
    fields = input_fields(graph)
    logits = graph.ops[graph.outputs[0]].type
    span = resolved.span(f"{task}.loss")
    return CompiledTask(
        name=task,
        kind=task_kind(fields),
        graph=graph,
        fields=fields,
        train_criterion=lower_criterion(config["loss"], logits, accuracy=False, span=span),
        eval_criterion=lower_criterion(config["loss"], logits, accuracy=True, span=span),
        config=config,
    )
