"""Several tasks compiled as one model: each task's graphs, with shared layers' params named once.

A multi-task experiment lowers each task's model on its own (`compile_task`), then renames its
params and layers: a layer bound by a share (`share { encoder = [en_es.encoder, ...] }`,
`seqc.resolve.shares`) takes the share's name (`encoder.0.attn.q.w`), every other one its task's
(`en_es.decoder.0.attn.q.w`). Since initial values are drawn per name (`seqc.compiler.init`),
a shared param starts equal in every task's graph, and the union of the tasks' params is the
model: one tensor per name, which every task that reads it updates.

The uses of a share must hold the same weights: the same layer kind and the same params with the
same shapes; a difference is reported at the use, naming both tasks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from seqc.compiler.compile import CompiledTask, compile_task
from seqc.compiler.config import TrainConfig
from seqc.compiler.graph import Graph, Head, Param
from seqc.resolve.experiment import ResolvedExperiment
from seqc.resolve.layers.instance import LayerInstance
from seqc.resolve.program import Program
from seqc.resolve.shares import find_layer
from seqc.spec.errors import CheckError, Note

Rename = Callable[[str], str]


@dataclass(frozen=True, eq=False)
class MultiTask:
    """The tasks of one experiment compiled together."""

    tasks: dict[str, CompiledTask]
    """Each task compiled, its params and layers renamed (task name or share name first)."""
    shares: dict[str, list[str]]
    """Share name -> the `task.layer` uses it binds."""

    @property
    def names(self) -> list[str]:
        return list(self.tasks)

    @property
    def train(self) -> TrainConfig:
        """The experiment's `train` block: every task trains under it (each carries it)."""
        return next(iter(self.tasks.values())).train

    @property
    def params(self) -> dict[str, Param]:
        """Every param of the model, once: the union of the tasks' (training and eval) graphs."""
        out: dict[str, Param] = {}
        for task in self.tasks.values():
            for g in task_graphs(task):
                out.update(g.params)
        return out

    def reads(self, task: str) -> list[str]:
        """The params `task` reads, in its graphs' order (what its optimizer updates)."""
        return list(dict.fromkeys(n for g in task_graphs(self.tasks[task]) for n in g.params))

    def owners(self) -> dict[str, list[str]]:
        """Param -> the tasks that read it (two or more for a shared layer's)."""
        out: dict[str, list[str]] = {}
        for name in self.tasks:
            for p in self.reads(name):
                out.setdefault(p, []).append(name)
        return out

    def union_graph(self) -> Graph:
        """One graph holding every task's forward: inputs `task.input`, one output per task (in
        task order), each shared param once. What a placement or a printout of a multi-task
        step reads; each task's own graph is what a backend runs."""
        merged = Graph()
        for name, task in self.tasks.items():
            g, base = task.graph, len(merged.ops)
            for op in g.ops:
                attrs = dict(op.attrs)
                if op.kind == "input":
                    attrs["name"] = f"{name}.{op.attrs['name']}"
                merged.ops.append(
                    dataclasses.replace(
                        op,
                        id=op.id + base,
                        inputs=tuple(i + base for i in op.inputs),
                        attrs=attrs,
                    )
                )
            merged.inputs.update({f"{name}.{k}": v + base for k, v in g.inputs.items()})
            merged.params.update(g.params)
            merged.subgraphs.update(g.subgraphs)
            merged.outputs.extend(o + base for o in g.outputs)
        return merged


def task_graphs(task: CompiledTask) -> list[Graph]:
    """The graphs of a task that read params: forward, training forward, training criterion."""
    graphs = [task.graph, task.train_criterion, task.eval_criterion]
    if task.train_graph is not None:
        graphs.append(task.train_graph)
    return graphs


def renamer(task: str, shared: dict[str, str]) -> Rename:
    """Layer path (or param name) in `task`'s model -> its name in the multi-task model.
    `shared` maps a layer path of this task to the share that binds it."""

    def rename(path: str) -> str:
        for layer, share in shared.items():
            if path == layer:
                return share
            if path.startswith(layer + "."):
                return share + path[len(layer) :]
        return f"{task}.{path}" if path else task

    return rename


def rename_graph(graph: Graph, rename: Rename) -> Graph:
    """A copy of `graph` with every param and layer path renamed (scan bodies too)."""
    ops = []
    for op in graph.ops:
        attrs = dict(op.attrs)
        if op.kind == "param":
            attrs["name"] = rename(op.attrs["name"])
        if op.kind == "scan":
            attrs["body"] = rename(op.attrs["body"])
        ops.append(
            dataclasses.replace(op, attrs=attrs, layer=rename(op.layer) if op.layer else op.layer)
        )
    params = {
        rename(n): dataclasses.replace(p, name=rename(n), layer=rename(p.layer))
        for n, p in graph.params.items()
    }
    head = graph.head
    if head is not None:
        head = Head(
            hidden=head.hidden,
            logits=head.logits,
            weight=rename(head.weight),
            vocab_axis=head.vocab_axis,
            bias=None if head.bias is None else rename(head.bias),
            layer=rename(head.layer),
            span=head.span,
        )
    return Graph(
        inputs=dict(graph.inputs),
        params=params,
        ops=ops,
        outputs=list(graph.outputs),
        subgraphs={rename(k): rename_graph(v, rename) for k, v in graph.subgraphs.items()},
        head=head,
        experts=[dataclasses.replace(t, layer=rename(t.layer)) for t in graph.experts],
        output_names=graph.output_names,
    )


def rename_task(task: CompiledTask, rename: Rename) -> CompiledTask:
    train_graph = None if task.train_graph is None else rename_graph(task.train_graph, rename)
    lowered = task.lowered_train_graph
    return dataclasses.replace(
        task,
        lowered_train_graph=None if lowered is None else rename_graph(lowered, rename),
        graph=rename_graph(task.graph, rename),
        train_criterion=rename_graph(task.train_criterion, rename),
        lowered_train_criterion=None
        if task.lowered_train_criterion is None
        else rename_graph(task.lowered_train_criterion, rename),
        eval_criterion=rename_graph(task.eval_criterion, rename),
        train_graph=train_graph,
    )


def compile_tasks(program: Program, resolved: ResolvedExperiment) -> MultiTask:
    """Every task of the experiment compiled, shared layers checked and named once."""
    shares: dict[str, list[str]] = {k: list(v) for k, v in resolved.config.get("share", {}).items()}
    by_task: dict[str, dict[str, str]] = {t: {} for t in resolved.tasks}
    for share, uses in shares.items():
        for use in uses:
            task, layer = use.split(".", 1)
            by_task[task][layer] = share
    tasks: dict[str, CompiledTask] = {}
    for t in resolved.tasks:
        tasks[t] = rename_task(compile_task(program, resolved, t), renamer(t, by_task[t]))
    multi = MultiTask(tasks=tasks, shares=shares)
    _check_shares(multi, resolved)
    return multi


def _check_shares(multi: MultiTask, resolved: ResolvedExperiment) -> None:
    """Every use of a share holds the same weights: one layer kind, the same params, the same
    shapes. Reported at the later use, with a note at the first."""
    for share, uses in multi.shares.items():
        first = None
        for i, use in enumerate(uses):
            task, layer = use.split(".", 1)
            inst = find_layer(resolved.models[task], layer)
            assert inst is not None  # the share was checked when resolved
            params = {
                n: p.type.shape
                for g in task_graphs(multi.tasks[task])
                for n, p in g.params.items()
                if n == share or n.startswith(share + ".")
            }
            span = resolved.span(f"share.{share}.{i}")
            if first is None:
                first = (task, inst, params, span)
                continue
            t0, inst0, params0, span0 = first
            notes = (
                [Note(span0, f"`{t0}.{uses[0].split('.', 1)[1]}` is shared here")] if span0 else []
            )
            if inst.kind != inst0.kind or inst.repeat != inst0.repeat:

                def what(x: LayerInstance) -> str:
                    return f"repeat({x.repeat}) {x.kind}" if x.repeat else x.kind

                raise CheckError(
                    f"share `{share}` binds a {what(inst0)} in task `{t0}` and a {what(inst)} in "
                    f"task `{task}`; shared layers must be the same kind",
                    span=span,
                    code="share-mismatch",
                    expected=what(inst0),
                    found=what(inst),
                    notes=notes,
                )
            diff = [
                f"`{n}`: {list(params0[n])} in `{t0}`, {list(params[n])} in `{task}`"
                if n in params0 and n in params
                else f"`{n}` only in `{t0 if n in params0 else task}`"
                for n in sorted(set(params0) | set(params))
                if params0.get(n) != params.get(n)
            ]
            if diff:
                shown = "".join(f"\n  - {d}" for d in diff[:6])
                raise CheckError(
                    f"share `{share}` holds different weights in tasks `{t0}` and `{task}`:{shown}",
                    span=span,
                    code="share-mismatch",
                    hint="give both tasks' layers the same sizes (model args), or share less",
                    notes=notes,
                )
