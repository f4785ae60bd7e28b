"""A model's tree of layer instances, built for concrete param values (`blocks.3.attn`).

`instantiate` builds the tree that later passes lower to the op graph. It is also where ranges
and relations of built-in layers meet values that flowed in through params
(`SelfAttention(d, heads)` inside a block), so it carries, for each param, the span of the line
that set its value: an error such as `d % heads == 0` points at `lm.model.heads = 3`, not at the
block that passed `heads` along.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from seqc.resolve.conform import span_within
from seqc.resolve.layers.binding import Spans, bind_user_layer_spans, env_lookup, layer_context
from seqc.resolve.raw import Raw, RawCall, evaluate
from seqc.spec import ir
from seqc.spec.errors import CheckError, Note

MAX_REPEAT = 10_000
"""Most copies `repeat(n)` makes: more would stall instantiation long before a backend runs."""

MAX_INSTANCES = 200_000
"""Most layers a `repeat` may instantiate, nested repeats multiplied: `repeat(10000)` of a layer
holding `repeat(100)` would spend minutes building a million instances before lowering could
refuse the graph (`compiler.graph.MAX_GRAPH_OPS`)."""


class LayerInstance(BaseModel):
    """One layer in a model's tree, with its params evaluated; `children` for user layers."""

    model_config = ConfigDict(frozen=True)

    path: str
    kind: str
    builtin: bool
    args: dict[str, Any]
    repeat: int | None = None
    children: tuple[LayerInstance, ...] = ()
    span: ir.Span | None = None


def instantiate(
    decl: ir.LayerDecl,
    args: dict[str, Any],
    layers: dict[str, ir.LayerDecl],
    path: str,
    span: ir.Span | None = None,
    cache: dict[Any, LayerInstance] | None = None,
    spans: Spans | None = None,
) -> LayerInstance:
    """The instance tree of `decl` called with `args` (already bound and type-checked).

    `spans`: where each arg's value was set (`bind_user_layer_spans`), so a range or relation
    that fails inside the tree points at that line. With a `cache`, a subtree built before for
    the same layer, path, call site and arguments is reused: experiments of one registry mostly
    share their models, and instances are frozen (a subtree only enters the cache once checked).
    """
    key = (decl.name, path, span, repr(sorted(args.items())))
    if cache is not None and key in cache:
        return cache[key]
    made = _instantiate(decl, args, layers, path, span, cache, spans or {})
    if cache is not None:
        cache[key] = made
    return made


def repeat_count(raw: Raw, where: str) -> int:
    """The n of `repeat(n)`: a whole number in [1, MAX_REPEAT], else an error at its value."""
    v = raw.value
    if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= MAX_REPEAT:
        raise CheckError(
            f"repeat count of `{where}` must be a whole number from 1 to {MAX_REPEAT:,}",
            span=raw.span,
            code="bad-count",
            expected=f"an int in [1, {MAX_REPEAT}]",
            found=raw.describe(),
        )
    return v


def _instances(inst: LayerInstance) -> int:
    return 1 + sum(_instances(c) for c in inst.children)


def _check_instances(first: LayerInstance, count: int, repeat: ir.Expr, where: str) -> None:
    """Refuse, from its first copy, a `repeat` that would build more than `MAX_INSTANCES`."""
    total = count * _instances(first)
    if total > MAX_INSTANCES:
        raise CheckError(
            f"`{where}` would build {total:,} layers ({count:,} copies of "
            f"{_instances(first):,}); at most {MAX_INSTANCES:,} fit in one model",
            span=repeat.span,
            code="graph-too-large",
            hint="lower the repeat count, or the depth of the repeated layer",
        )


def _note_call(err: CheckError, span: ir.Span | None, path: str, kind: str) -> None:
    """An error at a value set elsewhere (an override, a model param) also shows the layer call
    the value reached; once, from the innermost call."""
    if span is None or err.span is None or span_within(err.span, span):
        return
    if any(n.message.startswith("in ") for n in err.notes):
        return
    err.notes.append(Note(span, f"in `{path}`, a call of `{kind}`"))


def _instantiate(
    decl: ir.LayerDecl,
    args: dict[str, Any],
    layers: dict[str, ir.LayerDecl],
    path: str,
    span: ir.Span | None,
    cache: dict[Any, LayerInstance] | None,
    spans: Spans,
) -> LayerInstance:
    children: list[LayerInstance] = []
    names = {s.name: s.name for s in decl.sublayers}
    ctx = layer_context(layers, names)
    lookup = env_lookup(args, spans)
    for sub in decl.sublayers:
        child_path = f"{path}.{sub.name}" if path else sub.name
        call = evaluate(sub.call, lookup)
        assert isinstance(call.value, RawCall)
        child_spans: Spans = {}
        try:
            if call.value.func in layers:
                v = call.value
                bound, child_spans = bind_user_layer_spans(
                    layers[v.func], v.args, v.kwargs, call.span, ctx
                )
            else:
                bound = ctx.bind_layer(call)
        except CheckError as err:
            _note_call(err, call.span, child_path, call.value.func)
            raise
        count: int | None = None
        if sub.repeat is not None:
            count = repeat_count(evaluate(sub.repeat, lookup), child_path)
        copies = range(count) if count is not None else [None]
        made: list[LayerInstance] = []
        for i in copies:
            if i == 1 and count is not None:
                _check_instances(made[0], count, sub.repeat, child_path)
            ipath = child_path if i is None else f"{child_path}.{i}"
            if bound.kind in layers:
                made.append(
                    instantiate(
                        layers[bound.kind], bound.args, layers, ipath, sub.span, cache, child_spans
                    )
                )
            else:
                made.append(
                    LayerInstance(
                        path=ipath, kind=bound.kind, builtin=True, args=bound.args, span=sub.span
                    )
                )
        if count is None:
            children.append(made[0])
        else:
            children.append(
                LayerInstance(
                    path=child_path,
                    kind=bound.kind,
                    builtin=bound.kind not in layers,
                    args=bound.args,
                    repeat=count,
                    children=tuple(made),
                    span=sub.span,
                )
            )
    return LayerInstance(
        path=path,
        kind=decl.name,
        builtin=False,
        args=args,
        children=tuple(children),
        span=span or decl.span,
    )
