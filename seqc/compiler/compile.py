"""The one compile entry point: a resolved experiment's task, lowered to what a backend runs.

Every command that needs a model (train, eval, decode, export, place, `show --graph`), every
benchmark and every test goes through `compile_task`, so "lower this task's model" is written
once: the model's op graph, which batch field feeds which of its inputs, the task kind, and the
criterion graphs of its loss (see `seqc.compiler.lower.criterion`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from seqc.compiler.config import DecodeConfig, TrainConfig
from seqc.compiler.expert_terms import (
    FIELDS,
    WithExperts,
    expert_inputs,
    with_expert_outputs,
    with_expert_terms,
)
from seqc.compiler.expert_terms import split as split_experts
from seqc.compiler.graph import Graph
from seqc.compiler.lower import lower_model
from seqc.compiler.lower.criterion import EVAL_OUTPUTS, LOGITS, MASK, lower_criterion
from seqc.compiler.lower.criterion import LABELS as LABEL_INPUT
from seqc.compiler.lower.ctc import (
    CTC_LABELS as CTC_LABEL_INPUT,
)
from seqc.compiler.lower.ctc import (
    CTC_LOGITS,
    CTC_MASK,
    fold_frame_mask,
    fold_joint,
    lower_ctc,
    lower_joint_ctc,
)
from seqc.compiler.lower.fused_loss import fusable, lower_fused_cross_entropy
from seqc.compiler.lower.sampled import (
    CANDIDATES,
    CANDIDATES_LOG_E,
    HIDDEN,
    LABELS_LOG_E,
    SAMPLED,
    lower_sampled,
)
from seqc.compiler.passes import DEFAULT_PASSES, LOSS_PASS, PassReport, run_passes
from seqc.compiler.passes.base import report
from seqc.compiler.signature import CTC_LABELS, LABELS, TaskKind, input_fields, task_kind
from seqc.resolve.experiment import ResolvedExperiment
from seqc.resolve.program import Program
from seqc.resolve.values import CallValue, Symbol
from seqc.spec.errors import CheckError, UsageError


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
    """logits, labels, mask -> loss, nll_sum, tokens. For a sampled loss, the output layer's
    input instead of the logits, and the step's candidates (`seqc.compiler.lower.sampled`);
    so too under the `fuse_loss` pass, which computes the output layer in the criterion
    (`seqc.compiler.lower.fused_loss`)."""
    eval_criterion: Graph
    """The same, and `correct` (token accuracy)."""
    config: Mapping[str, Any]
    """The task's resolved config: input, model, loss, metrics, decode (what the compiler and
    the run read; a backend reads the typed `train` and `decode` and the properties below)."""
    train: TrainConfig
    """The experiment's `train` block, typed (`seqc.compiler.config`)."""
    decode: DecodeConfig | None
    """The task's `decode`, typed; None for a task that only scores."""
    train_graph: Graph | None = None
    """The forward graph a training step runs: `graph` itself, or for a sampled loss the graph
    up to the output layer's input (the full logits are never built in training), after the
    experiment's compiler passes (`compile { passes }`, `seqc.compiler.passes`)."""
    pass_reports: tuple[PassReport, ...] = ()
    """What each of those passes changed (`seqc show --graph --passes`)."""
    lowered_train_graph: Graph | None = None
    """`train_graph` before the passes (None: `graph`)."""
    lowered_train_criterion: Graph | None = None
    """`train_criterion` before the `fuse_loss` pass (None: the pass did not apply)."""

    def without_passes(self) -> CompiledTask:
        """This task training the graph as lowered: what a placed run trains, since a
        placement plan names the ops of that graph (`seqc place` plans it)."""
        return dataclasses.replace(
            self,
            train_graph=self.lowered_train_graph,
            pass_reports=(),
            lowered_train_graph=None,
            train_criterion=self.lowered_train_criterion or self.train_criterion,
            lowered_train_criterion=None,
        )

    @property
    def sampled(self) -> bool:
        """True when the training criterion scores sampled candidates, not the full logits."""
        return self.config["loss"].kind in SAMPLED

    @property
    def per_sequence(self) -> bool:
        """True when the loss sums per sequence then averages over sequences (`reduction =
        "sequence"`), not over tokens: a data-parallel step weighs its replicas by rows."""
        loss = self.config["loss"]
        return "reduction" in loss.args and loss.args["reduction"] == "sequence"

    @property
    def training_graph(self) -> Graph:
        return self.train_graph if self.train_graph is not None else self.graph

    @property
    def joint_ctc(self) -> bool:
        """True for joint CTC + attention: training reads the decoder's and the CTC logits."""
        return self.config["loss"].kind == "joint_ctc"

    @property
    def experts(self) -> int:
        """How many mixture-of-experts layers the model has (`seqc.compiler.lower.moe`)."""
        return len(self.graph.experts)

    def model_output(self, outputs: Sequence[Any]) -> Any:
        """What a forward pass hands the criterion: the logits, or for joint CTC + attention in
        training (whose training graph has both) the pair (decoder logits, CTC logits); for
        the training graph of a model with experts, that with the experts' values
        (`WithExperts`)."""
        if self.experts and len(outputs) > len(FIELDS) * self.experts:  # the training graph's
            main, terms = split_experts(outputs, self.graph.experts)
            return WithExperts(self.model_output(main), terms)
        if self.joint_ctc and len(outputs) == 2:
            return (outputs[0], outputs[1])
        return outputs[0]

    @property
    def ctc(self) -> bool:
        """True for a CTC model: its logits are per frame, its labels the transcript's tokens."""
        return self.config["loss"].kind == "ctc"

    @property
    def labels(self) -> tuple[str, str]:
        """The batch fields of the labels and their mask."""
        return CTC_LABELS if self.ctc else LABELS[self.kind]

    def inputs(self, arrays: Mapping[str, Any]) -> dict[str, Any]:
        """The forward graph's inputs from a batch's arrays."""
        return {name: arrays[f] for name, f in self.fields.items()}

    def criterion_inputs(self, logits: Any, arrays: Mapping[str, Any]) -> dict[str, Any]:
        """The criterion graph's inputs: these logits and the batch's labels and mask."""
        if isinstance(logits, WithExperts):
            return self.criterion_inputs(logits.main, arrays) | expert_inputs(logits.terms)
        labels, mask = self.labels
        if isinstance(logits, tuple):  # joint CTC + attention in training
            decoder, ctc = logits
            ctc_labels, ctc_mask = CTC_LABELS
            return {
                LOGITS: decoder,
                LABEL_INPUT: arrays[labels],
                MASK: arrays[mask],
                CTC_LOGITS: ctc,
                CTC_LABEL_INPUT: arrays[ctc_labels],
                CTC_MASK: arrays[ctc_mask],
            }
        return {LOGITS: logits, LABEL_INPUT: arrays[labels], MASK: arrays[mask]}

    def train_criterion_inputs(self, outputs: Any, arrays: Mapping[str, Any]) -> dict[str, Any]:
        """The training criterion's inputs: what the training graph gave (logits, or the output
        layer's input for a sampled loss), the labels and mask, and the step's candidates."""
        inputs = self.criterion_inputs(outputs, arrays)
        if HIDDEN in self.train_criterion.inputs:  # sampled, or the fused output layer's
            inputs[HIDDEN] = inputs.pop(LOGITS)
        if not self.sampled:
            return inputs
        return inputs | {k: arrays[k] for k in (CANDIDATES, CANDIDATES_LOG_E, LABELS_LOG_E)}


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
    decl, instance = program.layers[config["model"].kind], resolved.models[task]
    graph = lower_model(decl, instance, program.layers)
    # A model with experts trains another form of them (capacity, auxiliary losses): the
    # training graph is lowered from that form, over the same params.
    base = (
        lower_model(decl, instance, program.layers, training_form=True) if graph.experts else graph
    )
    fields = input_fields(graph)
    span = resolved.span(f"{task}.loss")
    loss = config["loss"]
    joint_outputs: list[int] = []
    if loss.kind == "ctc":
        fold_frame_mask(graph, span)
        if base is not graph:
            fold_frame_mask(base, span)
    elif loss.kind == "joint_ctc":
        joint_outputs = list(fold_joint(graph, span))
        graph.outputs = joint_outputs[:1]  # inference, evaluation, export: the decoder
        if base is not graph:
            joint_outputs = list(fold_joint(base, span))
            base.outputs = joint_outputs[:1]
    logits = graph.ops[graph.outputs[0]].type
    train_graph: Graph | None
    if loss.kind == "ctc":
        train = lower_ctc(loss, logits, span)
        evaluation, train_graph = train, None
    elif loss.kind == "joint_ctc":
        ctc_logits = graph.ops[joint_outputs[1]].type
        train = lower_joint_ctc(loss, logits, ctc_logits, span)
        decoder_only = CallValue(
            kind="cross_entropy",
            namespace="loss",
            args={"label_smoothing": loss.args["label_smoothing"], "reduction": "token"},
        )
        evaluation = lower_criterion(decoder_only, logits, accuracy=True, span=span)
        train_graph = dataclasses.replace(base, outputs=joint_outputs)
    elif loss.kind in SAMPLED:
        train = lower_sampled(loss, graph, span)  # checks the model ends in a Softmax
        assert base.head is not None
        train_graph = base.upto(base.head.hidden)
        # evaluation scores with the full softmax: the likelihood, whatever trained the model
        full = CallValue(
            kind="cross_entropy",
            namespace="loss",
            args={"label_smoothing": 0.0, "reduction": "token"},
        )
        evaluation = lower_criterion(full, logits, accuracy=True, span=span)
    else:
        train = lower_criterion(loss, logits, accuracy=False, span=span)
        evaluation = lower_criterion(loss, logits, accuracy=True, span=span)
        train_graph = None
    names = resolved.config.get("compile", {}).get("passes", DEFAULT_PASSES)
    reports: list[PassReport] = []
    lowered_train_graph = train_graph
    if LOSS_PASS in names and train_graph is None and fusable(loss, graph):
        assert base.head is not None
        unfused = train
        train = lower_fused_cross_entropy(loss, graph, span)
        train_graph = base.upto(base.head.hidden)
        reports.append(report(LOSS_PASS, [base, unfused], [train_graph, train]))
        lowered_train_criterion: Graph | None = unfused
    else:
        lowered_train_criterion = None
    if base.experts:
        train_graph = with_expert_outputs(train_graph or base)
        train = with_expert_terms(train, train_graph, EVAL_OUTPUTS)
        lowered_train_graph = with_expert_outputs(lowered_train_graph or base)
        if lowered_train_criterion is not None:
            lowered_train_criterion = with_expert_terms(
                lowered_train_criterion, lowered_train_graph, EVAL_OUTPUTS
            )
    if names:  # the training step runs the passed graph; the rest (eval, decode, export) not
        train_graph, more = run_passes(train_graph or graph, names)
        reports += more
    decode = None if config["decode"] is None else DecodeConfig.of(config["decode"])
    if getattr(decode, "warp", None) is not None and loss.kind != "ctc":
        raise CheckError(
            f"task `{task}` decodes with a voice warp, which normalises speech for a CTC "
            f"model's frame posteriors; this task's loss is `{loss.kind}`, not `ctc`",
            span=resolved.span(f"{task}.decode"),
            code="warp-needs-ctc",
            hint="drop `warp = ...` from the task's decode, or use it on a CTC speech task",
        )
    return CompiledTask(
        name=task,
        kind=task_kind(fields),
        graph=graph,
        fields=fields,
        train_criterion=train,
        eval_criterion=evaluation,
        config=config,
        train=TrainConfig.of(resolved.config["train"]),
        decode=decode,
        train_graph=train_graph,
        pass_reports=tuple(reports),
        lowered_train_graph=lowered_train_graph,
        lowered_train_criterion=lowered_train_criterion,
    )
