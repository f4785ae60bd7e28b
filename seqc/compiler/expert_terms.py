"""What a mixture of experts adds to a training step: its auxiliary losses, summed into the
task's loss, and the figures a run logs (the fraction of assignments each `MoE` layer dropped,
each expert's share of them).

Why through the criterion graph: every backend's step already runs "training graph, then
training criterion" and reads the criterion's named outputs as its metrics, so the training
graph hands each layer's values on as extra outputs (`with_expert_outputs`), the criterion
takes them as inputs and adds the losses to its own (`with_expert_terms`), and no backend has
a line about experts. Evaluation, decoding and exports run the inference form, which has
none of this (`seqc.compiler.lower.moe`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from seqc.compiler.graph import ExpertTerms, Graph, GraphBuilder, TensorType

FIELDS = ("aux_loss", "dropped", "load")
"""The values each layer hands on, in this order: `ExpertTerms`' fields."""


@dataclass(frozen=True)
class WithExperts:
    """A training forward's result when the model has experts: what the criterion reads as the
    model's output (logits, or a pair for joint CTC) and the layers' values, in `FIELDS` order
    per layer."""

    main: Any
    terms: tuple[Any, ...]


PREFIX = "moe."
"""What the experts' metrics' names begin with (`metric_name`)."""


def metric_name(layer: str, what: str) -> str:
    """The metric of one layer's figure: `moe.blocks.0.mlp.dropped`."""
    return f"{PREFIX}{layer}.{what}"


def is_figure(name: str) -> bool:
    """Whether a step's metric is one of the experts' figures."""
    return name.startswith(PREFIX)


def input_name(i: int) -> str:
    return f"expert_term{i}"


def with_expert_outputs(graph: Graph) -> Graph:
    """The training graph with each expert layer's values as outputs after its own."""
    extra = [getattr(t, f) for t in graph.experts for f in FIELDS]
    assert all(v is not None for v in extra), "the training form computes every term"
    return dataclasses.replace(graph, outputs=[*graph.outputs, *extra])


def split(outputs: Sequence[Any], experts: Sequence[ExpertTerms]) -> tuple[list[Any], tuple]:
    """A training graph's outputs parted into the model's own and the experts' values."""
    cut = len(outputs) - len(FIELDS) * len(experts)
    return list(outputs[:cut]), tuple(outputs[cut:])


def with_expert_terms(criterion: Graph, training: Graph, names: Sequence[str]) -> Graph:
    """`criterion` (whose outputs are named `names`, its loss first) taking the expert layers'
    values of `training` as inputs: its loss plus each layer's weighted auxiliary loss, and
    each layer's figures as further named outputs."""
    b = GraphBuilder()
    b.graph = dataclasses.replace(
        criterion,
        inputs=dict(criterion.inputs),
        ops=list(criterion.ops),
        outputs=list(criterion.outputs),
    )
    b.layer, b.span = "loss", criterion.ops[criterion.outputs[0]].span
    loss = b.graph.outputs[0]
    out_names = list(names[: len(criterion.outputs)])
    extra: list[int] = []
    i = 0
    for layer in training.experts:
        for field_name in FIELDS:
            value = getattr(layer, field_name)
            t = training.ops[value].type
            vid = b.input(input_name(i), TensorType("float32", t.shape))
            i += 1
            if field_name == "aux_loss":
                loss = b.binary("add", loss, vid)
            extra.append(b.unary("identity", vid))
            out_names.append(metric_name(layer.layer, field_name))
    b.graph.outputs = [loss, *b.graph.outputs[1:], *extra]
    b.graph.output_names = tuple(out_names)
    return b.graph


def expert_inputs(terms: Sequence[Any]) -> dict[str, Any]:
    """The criterion's inputs of the experts' values (`with_expert_terms`)."""
    return {input_name(i): v for i, v in enumerate(terms)}
