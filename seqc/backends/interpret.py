"""The one interpreter of the op graph, shared by every backend.

A backend is a primitive table plus a few structural hooks, its `Machine`: how a graph input and
a param become its values, how a `scan` runs its body, how an op is pinned to a device, how a
symbolic dim is read off an input. The walk itself is written here once: ops in topological
order, values by op id, an optional op -> device map, and errors located at the user's line.

It runs at trace time (inside `jax.jit`, inside `tf.function`, or while ONNX nodes are being
emitted), so it costs nothing per training step: what runs is the framework's compiled graph.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from seqc.compiler.graph import Graph, Op
from seqc.spec.errors import EmitError, SeqcError

Fn = Callable[[list[Any], dict[str, Any], Any], Any]
"""A primitive: (input values, the op's attrs, the context) -> the output value."""


@dataclass
class Ctx:
    """What an op needs besides its inputs: sizes of symbolic dims, the mode, and which op of
    the graph is being run (a table function that must name its op reads `op`). Backends extend
    it with what their primitives need (randomness, a compute dtype)."""

    dims: dict[str, Any] = field(default_factory=dict)
    training: bool = False
    op: Op | None = None
    placed: bool = False
    """True while a graph runs under a placement (inputs are then copied onto their device)."""


class Machine:
    """What the interpreter needs of a backend. The defaults fit array frameworks; a backend
    overrides the hooks where it differs, and must give `table` and `scan`."""

    name = "backend"
    table: Mapping[str, Fn] = {}

    # ---------------------------------------------------------------- symbolic dims
    def rank(self, value: Any) -> int:
        return len(value.shape)

    def dim(self, value: Any, axis: int) -> Any:
        """The size of one axis: an int where it is known when tracing, else what the
        framework uses for a size known only when the graph runs."""
        return int(value.shape[axis])

    # ---------------------------------------------------------------- leaves and ops
    def input(self, value: Any, op: Op, ctx: Any) -> Any:
        return value

    def param(self, value: Any, op: Op, ctx: Any) -> Any:
        return value

    def apply(self, graph: Graph, op: Op, args: list[Any], ctx: Any) -> Any:
        return self.table[op.kind](args, op.attrs, ctx)

    def scan(
        self, graph: Graph, op: Op, args: list[Any], params: Mapping[str, Any], ctx: Any
    ) -> Any:
        """Run `graph.subgraphs[op.attrs["body"]]` along the time axis (see `GraphBuilder.scan`);
        the body is evaluated with `evaluate(self, body, ...)`."""
        raise EmitError(f"the {self.name} backend cannot run a recurrence", code="no-scan")

    def device(self, device: Any) -> contextlib.AbstractContextManager[Any]:
        """A scope in which the ops emitted run on `device` (a backend device name)."""
        return contextlib.nullcontext()

    def error(self, op: Op, e: Exception) -> SeqcError:
        """The error a user sees when an op fails to run or trace: its layer and spec line."""
        text = (str(e).strip().splitlines() or [""])[0]
        return EmitError(
            f"the {self.name} backend could not run `{op.kind}` of layer "
            f"`{op.layer or '(model)'}`: {type(e).__name__}: {text}",
            span=op.span,
            code="op-failed",
            hint="the spec passed its checks, so this is likely a bug in the backend's primitive; "
            "run with --debug for the traceback and report it",
        )


def bind_dims(machine: Machine, graph: Graph, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Sizes of the symbolic dims (`B`, `T`) from the shapes of the graph's inputs."""
    dims: dict[str, Any] = {}
    for name, vid in graph.inputs.items():
        op = graph.ops[vid]
        if name not in inputs:
            raise _missing(machine, op, "input", name, inputs)
        value, shape = inputs[name], op.type.shape
        if machine.rank(value) != len(shape):
            raise EmitError(
                f"input `{name}` has {machine.rank(value)} axes, the graph expects {len(shape)}",
                span=op.span,
                code="bad-input",
                expected=f"[{', '.join(str(d) for d in shape)}]",
                found=str(list(value.shape)),
            )
        for axis, d in enumerate(shape):
            if isinstance(d, str) and d not in dims:
                dims[d] = machine.dim(value, axis)
    return dims


def run(
    machine: Machine,
    graph: Graph,
    params: Mapping[str, Any],
    inputs: Mapping[str, Any],
    ctx: Ctx,
    placement: Mapping[int, Any] | None = None,
) -> list[Any]:
    """The graph's outputs for these params and inputs, symbolic dims bound from the inputs.

    `placement` maps op ids to the backend's device names: each op runs under
    `machine.device(...)` (a scan runs where the scan runs); ops it leaves out run where the
    framework puts them."""
    ctx.dims.update(bind_dims(machine, graph, inputs))
    ctx.placed = bool(placement)
    return evaluate(machine, graph, params, inputs, ctx, placement)


def evaluate(
    machine: Machine,
    graph: Graph,
    params: Mapping[str, Any],
    inputs: Mapping[str, Any],
    ctx: Ctx,
    placement: Mapping[int, Any] | None = None,
) -> list[Any]:
    """The walk: every op once, in order. `run` binds the dims first; a scan body is
    evaluated with its enclosing graph's dims."""
    env: list[Any] = [None] * len(graph.ops)
    for op in graph.ops:
        ctx.op = op
        args = [env[i] for i in op.inputs]
        scope = machine.device(placement.get(op.id)) if placement else contextlib.nullcontext()
        try:
            with scope:
                if op.kind == "input":
                    name = op.attrs["name"]
                    if name not in inputs:
                        raise _missing(machine, op, "input", name, inputs)
                    env[op.id] = machine.input(inputs[name], op, ctx)
                elif op.kind == "param":
                    name = op.attrs["name"]
                    if name not in params:
                        raise _missing(machine, op, "param", name, params)
                    env[op.id] = machine.param(params[name], op, ctx)
                elif op.kind == "scan":
                    env[op.id] = machine.scan(graph, op, args, params, ctx)
                else:
                    env[op.id] = machine.apply(graph, op, args, ctx)
        except SeqcError:
            raise
        except Exception as e:
            raise machine.error(op, e) from e
    return [env[o] for o in graph.outputs]


def _missing(machine: Machine, op: Op, what: str, name: str, given: Mapping[str, Any]) -> EmitError:
    shown = ", ".join(sorted(given)[:8]) or "none"
    return EmitError(
        f"the {machine.name} backend was given no {what} `{name}` (layer "
        f"`{op.layer or '(model)'}`); given: {shown}",
        span=op.span,
        code=f"missing-{what}",
    )
