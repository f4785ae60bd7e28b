"""`share { NAME = [task.layer, ...] }`: layers that several tasks of an experiment train as one.

Why sharing is declared by the experiment and not by a model: the same task trains alone in one
experiment (a single-direction baseline) and beside others in another (both directions in one
model), so which weights are common is a property of training the tasks together. A share names
each task's child layer once (`en_es.encoder`); the model keeps its own declaration, so its
forward and shapes check as they always do, and the compiler then checks that every use holds
the same weights (kinds, param names and shapes: `seqc.compiler.multitask`). The shared layer's
weights are named by the share's name (`encoder.0.attn.q.w`), every other param by its task
(`en_es.decoder.0...`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from seqc.resolve.layers.instance import LayerInstance
from seqc.spec import ir
from seqc.spec.errors import CheckError, ResolveError, did_you_mean


@dataclass(frozen=True)
class Use:
    """One task's layer that a share binds: `task.path`, and the line that named it."""

    task: str
    path: str
    span: ir.Span | None

    def __str__(self) -> str:
        return f"{self.task}.{self.path}"


def _dotted(e: ir.Expr) -> str | None:
    if isinstance(e, ir.Name):
        return e.id
    if isinstance(e, ir.Attr):
        head = _dotted(e.obj)
        return None if head is None else f"{head}.{e.name}"
    return None


def find_layer(model: LayerInstance, path: str) -> LayerInstance | None:
    """The layer at `path` in a model's tree, or None."""
    stack = [model]
    while stack:
        inst = stack.pop()
        if inst.path == path:
            return inst
        stack.extend(inst.children)
    return None


def _children(model: LayerInstance) -> list[str]:
    found, stack = [], list(model.children)
    while stack:
        inst = stack.pop()
        found.append(inst.path)
        stack.extend(inst.children)
    return sorted(found)


def read_shares(
    stmts: list[tuple[tuple[str, ...], ir.Expr | None, ir.Span | None]],
    tasks: list[str],
    models: Mapping[str, LayerInstance],
) -> dict[str, list[Use]]:
    """The experiment's shares, each checked: a list of at least two `task.layer` uses, of
    distinct tasks of this experiment, each naming a layer of that task's model, no layer in two
    shares (nor a layer inside another share's)."""
    shares: dict[str, list[Use]] = {}
    owner: dict[tuple[str, str], str] = {}
    # An experiment that extends another adds shares to its parent's; one of the same name
    # replaces the parent's (the last statement of a name wins, as for any setting).
    last = {path[1:2]: (path, value, span) for path, value, span in stmts}
    for path, value, span in last.values():
        if len(path) != 2:
            raise ResolveError(
                "a share is `share { NAME = [task.layer, task.layer] }`",
                span=span,
                code="bad-share",
                found=f"`{'.'.join(path)}`",
            )
        name = path[1]
        items = value.items if isinstance(value, ir.ListExpr) else None
        if not items or len(items) < 2:
            raise CheckError(
                f"share `{name}` needs the layer of at least two tasks",
                span=span,
                code="bad-share",
                expected="e.g. encoder = [en_es.encoder, es_en.encoder]",
            )
        uses: list[Use] = []
        for item in items:
            ref = _dotted(item)
            where = item.span or span
            if ref is None or "." not in ref:
                raise CheckError(
                    "a shared layer is named `task.layer` (a layer path in the task's model)",
                    span=where,
                    code="bad-share",
                    expected="e.g. en_es.encoder",
                )
            task, layer = ref.split(".", 1)
            if task not in tasks:
                raise CheckError(
                    f"`{task}` is not a task of this experiment",
                    span=where,
                    code="unknown-task",
                    expected=", ".join(tasks),
                    suggestion=did_you_mean(task, tasks),
                )
            if find_layer(models[task], layer) is None:
                known = _children(models[task])
                raise CheckError(
                    f"task `{task}`'s model has no layer `{layer}`",
                    span=where,
                    code="unknown-layer",
                    expected=", ".join(p for p in known if "." not in p) or "(none)",
                    suggestion=did_you_mean(layer, known),
                )
            if any(u.task == task for u in uses):
                raise CheckError(
                    f"share `{name}` names two layers of task `{task}`; a share binds one layer "
                    "of each task",
                    span=where,
                    code="bad-share",
                )
            for (t, other), other_share in owner.items():
                if t == task and (
                    layer == other or layer.startswith(other + ".") or other.startswith(layer + ".")
                ):
                    raise CheckError(
                        f"`{task}.{layer}` is already in share `{other_share}` "
                        f"(as `{task}.{other}`)",
                        span=where,
                        code="bad-share",
                        hint="a layer's weights belong to one share",
                    )
            uses.append(Use(task, layer, where))
        for u in uses:
            owner[(u.task, u.path)] = name
        shares[name] = uses
    for name, uses in shares.items():
        clash = [t for t in tasks if t == name]
        if clash:
            raise CheckError(
                f"share `{name}` has the name of a task; its weights would be named like the "
                "task's own",
                span=uses[0].span,
                code="reserved-name",
                hint="rename the share",
            )
    return shares
