"""Emit an op graph as an ONNX model, and the gate every emitted model passes.

Why emit from our own op graph: the graph is already a small fixed set of primitives (see
`seqc.backends.onnx.ops`), so ONNX is one more table, with none of the coverage gaps of
converting a traced JAX or TF program. The model is inference only (dropout is the identity)
and float32.

What a consumer of the file can rely on:
- weights are initializers named by layer path (`blocks.0.attn.q.w`), in seqc's own layouts;
- graph inputs keep the spec's names (or `input_names`), and symbolic dims are `dim_param`s
  with the spec's symbol names, so `B`, `T`, `S` are named dynamic axes;
- every node's name starts with the layer path, kind and value of the seqc op it came from
  (`encoder.0.attn/einsum#v57/Einsum_12`), and its doc_string gives the spec's `file:line:col`;
  `check` uses them to point a failure back at the spec.

A `scan` (LSTM, GRU) becomes an ONNX `Scan` over time-first inputs, reversed explicitly for a
backward direction: `onnx.reference` implements only axis 0 and the forward direction, and
this keeps both runtimes on the same program. The body reads its weights from the outer scope.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib import metadata as _metadata
from typing import Any

import numpy as np
import onnx
from onnx import helper

from seqc.backends import interpret
from seqc.backends.onnx.context import DTYPES, Ctx
from seqc.backends.onnx.errors import OnnxExportError
from seqc.backends.onnx.ops import OPS, constant_dtype
from seqc.compiler.graph import Graph, Op, Shape, TensorType
from seqc.spec.ir import Span

MIN_OPSET = 17
"""`LayerNormalization` and `Shape(start, end)` are what the table needs."""


def to_onnx(
    graph: Graph,
    params: dict[str, Any],
    *,
    name: str = "seqc",
    opset: int = 17,
    output_names: list[str] | None = None,
    input_names: dict[str, str] | None = None,
    metadata: dict[str, str] | None = None,
) -> onnx.ModelProto:
    """The model computing `graph`'s outputs from its inputs with these weights.

    `params` maps layer paths to arrays (numpy or JAX) of the params' shapes; `input_names`
    renames graph inputs (spec name -> ONNX name); `output_names` default to `output0`, ...;
    `metadata` goes into the model's `metadata_props` (experiment, task, vocab files...).
    """
    if opset < MIN_OPSET or opset > onnx.defs.onnx_opset_version():
        raise OnnxExportError(
            f"opset {opset} is not supported: use {MIN_OPSET} to {onnx.defs.onnx_opset_version()}"
        )
    renames = dict(input_names or {})
    unknown = sorted(set(renames) - set(graph.inputs))
    if unknown:
        raise OnnxExportError(
            f"input_names renames {unknown}, which the graph does not have; "
            f"its inputs are {sorted(graph.inputs)}"
        )
    outs = list(output_names) if output_names is not None else None
    if outs is None:
        outs = [f"output{i}" for i in range(len(graph.outputs))]
    if len(outs) != len(graph.outputs) or len(set(outs)) != len(outs):
        raise OnnxExportError(
            f"output_names {outs} must be {len(graph.outputs)} distinct names, one per output"
        )

    ctx = Ctx(opset=opset)
    inputs: dict[str, str] = {}
    input_infos = []
    for seqc_name, vid in graph.inputs.items():
        onnx_name = renames.get(seqc_name, seqc_name)
        t = graph.ops[vid].type
        inputs[seqc_name] = onnx_name
        ctx.dtypes[onnx_name] = t.dtype
        input_infos.append(_value_info(onnx_name, t.dtype, t.shape))
        _bind(ctx, onnx_name, t)
    used = _used_params(graph)
    initializers = _initializers(graph, used, params)
    for pname in used:
        ctx.dtypes[pname] = _storage_dtype(graph.params[pname].type.dtype)

    names = {name: name for name in graph.params}
    values = interpret.evaluate(MACHINE, graph, names, inputs, ctx)
    output_infos = []
    ctx.op = None
    for out_name, value, vid in zip(outs, values, graph.outputs, strict=True):
        ctx.nodes.append(
            helper.make_node("Identity", [value], [out_name], name=f"output/{out_name}")
        )
        output_infos.append(_value_info(out_name, ctx.dtype(value), graph.ops[vid].type.shape))

    initializers += list(ctx.constants.values())
    body = helper.make_graph(ctx.nodes, name, input_infos, output_infos, initializer=initializers)
    opset_ids = [helper.make_opsetid("", opset)]
    model = helper.make_model(
        body,
        opset_imports=opset_ids,
        producer_name="seqc",
        producer_version=_version(),
        ir_version=helper.find_min_ir_version_for(opset_ids),
    )
    if metadata:
        helper.set_model_props(model, {str(k): str(v) for k, v in metadata.items()})
    return model


# ------------------------------------------------------------------------------ the walk


class OnnxMachine(interpret.Machine):
    """The ONNX emitter's hooks for the shared interpreter: values are ONNX value names (an
    input's, a param's initializer's, a node's output), and running an op appends its nodes
    to the graph under construction (`Ctx`)."""

    name = "ONNX"
    table = OPS

    def apply(self, graph: Graph, op: Op, args: list[str], ctx: Ctx) -> str:
        if op.kind not in OPS:
            raise OnnxExportError(
                f"{_place(op)}: the ONNX backend has no emitter for primitive `{op.kind}`",
                span=op.span,
            )
        ctx.in_types = [graph.ops[i].type for i in op.inputs]
        out = OPS[op.kind](args, op.attrs, ctx)
        ctx.dtypes.setdefault(out, _dtype(op))
        return out

    def scan(
        self, graph: Graph, op: Op, args: list[str], params: Mapping[str, Any], ctx: Ctx
    ) -> str:
        ctx.in_types = [graph.ops[i].type for i in op.inputs]
        out = _scan(graph, op, args, params, ctx)
        ctx.dtypes.setdefault(out, _dtype(op))
        return out

    def error(self, op: Op, e: Exception) -> OnnxExportError:
        return OnnxExportError(f"{_place(op)}: {type(e).__name__}: {e}", span=op.span)


MACHINE = OnnxMachine()


def _dtype(op: Op) -> str:
    """The dtype the emitted value has: what JAX computes, where that differs from the op's."""
    if op.kind == "constant":
        return constant_dtype(op.attrs["value"])
    if op.kind in ("fill", "gather"):
        return "float32"
    return op.type.dtype


def _scan(graph: Graph, op: Op, args: list[str], params: Mapping[str, Any], ctx: Ctx) -> str:
    """An ONNX `Scan` along axis 0 of time-first copies of the xs; its outputs are the final
    carries (unused: the seqc op's value is the ys) and the ys, put back batch-first."""
    body = graph.subgraphs[op.attrs["body"]]
    n_xs, n_carries, reverse = op.attrs["n_xs"], op.attrs["n_carries"], op.attrs["reverse"]
    xs = []
    for x, t in zip(args[:n_xs], ctx.in_types[:n_xs], strict=True):
        x = ctx.node("Transpose", [ctx.cast(x, "float32")], perm=_swap01(t.rank))
        xs.append(_reverse_time(x, ctx) if reverse else x)
    carries = [ctx.cast(c, "float32") for c in args[n_xs:]]
    proto = _body(op, body, params, ctx)
    outs = ctx.node("Scan", [*carries, *xs], n_out=n_carries + 1, body=proto, num_scan_inputs=n_xs)
    ys = outs if n_carries == 0 else outs[-1]
    if reverse:
        ys = _reverse_time(ys, ctx)
    return ctx.node("Transpose", [ys], perm=_swap01(op.type.rank))


def _body(op: Op, body: Graph, params: Mapping[str, Any], outer: Ctx) -> onnx.GraphProto:
    """The scan body: inputs carries then one time step of each xs (ONNX's order), all in
    float32 (JAX casts them so); outputs new carries then the step's y."""
    n_xs, n_carries = op.attrs["n_xs"], op.attrs["n_carries"]
    prefix = f"{op.attrs['body']}:"
    ctx = Ctx(opset=outer.opset, prefix=prefix, parent=outer)
    keys = [f"c{i}" for i in range(n_carries)] + [f"x{i}" for i in range(n_xs)]
    inputs = {key: f"{prefix}{key}" for key in keys}
    input_infos = []
    for key in keys:
        t = TensorType("float32", body.ops[body.inputs[key]].type.shape)
        input_infos.append(_value_info(inputs[key], t.dtype, t.shape))
        ctx.dtypes[inputs[key]] = t.dtype
        _bind(ctx, inputs[key], t)
    values = interpret.evaluate(MACHINE, body, params, inputs, ctx)
    ctx.op = op
    y, new = values[0], values[1:]
    out_names = [f"{prefix}out.c{i}" for i in range(n_carries)] + [f"{prefix}out.y"]
    output_infos = []
    for i, (value, vid) in enumerate(
        zip([*new, y], [*body.outputs[1:], body.outputs[0]], strict=True)
    ):
        dtype = "float32" if i < n_carries else ctx.dtype(value)
        ctx.nodes.append(
            helper.make_node(
                "Identity", [ctx.cast(value, dtype)], [out_names[i]], name=f"{ctx.where()}/out{i}"
            )
        )
        output_infos.append(_value_info(out_names[i], dtype, body.ops[vid].type.shape))
    return helper.make_graph(ctx.nodes, op.attrs["body"], input_infos, output_infos)


def _reverse_time(x: str, ctx: Ctx) -> str:
    bounds = [np.array([v], np.int64) for v in (-1, np.iinfo(np.int64).min, 0, -1)]
    return ctx.node("Slice", [x, *(ctx.const(b) for b in bounds)])


def _swap01(rank: int) -> list[int]:
    return [1, 0, *range(2, rank)]


def _bind(ctx: Ctx, name: str, t: TensorType) -> None:
    for axis, d in enumerate(t.shape):
        if isinstance(d, str):
            ctx.symbols.setdefault(d, (name, axis))


def _value_info(name: str, dtype: str, shape: Shape) -> onnx.ValueInfoProto:
    """Symbols become named dims; a derived dim (`T+S`, `ceil(T/2)`) is left unnamed."""
    dims = [d if isinstance(d, int) or d.isidentifier() else None for d in shape]
    return helper.make_tensor_value_info(name, DTYPES[dtype], dims)


def _storage_dtype(dtype: str) -> str:
    """Float weights are stored float32 whatever the training compute dtype was."""
    return "float32" if dtype.startswith(("float", "bfloat")) else dtype


def _used_params(graph: Graph) -> list[str]:
    """The params some op reads, in `graph.params` order. A graph split off another (the
    encoder and decoder step of `seqc.compiler.incremental`) keeps the whole model's params;
    emitting only the used ones keeps each file to its own weights."""
    read: set[str] = set()
    pending = [graph]
    while pending:
        g = pending.pop()
        read |= {op.attrs["name"] for op in g.ops if op.kind == "param"}
        pending += g.subgraphs.values()
    return [name for name in graph.params if name in read]


def _initializers(graph: Graph, used: list[str], params: dict[str, Any]) -> list[onnx.TensorProto]:
    problems = []
    tensors = []
    for pname in used:
        p = graph.params[pname]
        want = tuple(int(d) for d in p.type.shape)
        if pname not in params:
            problems.append(f"missing `{pname}` (the model expects {list(want)})")
            continue
        value = np.asarray(params[pname])
        if tuple(value.shape) != want:
            problems.append(f"`{pname}` has shape {list(value.shape)}, expected {list(want)}")
            continue
        dtype = _storage_dtype(p.type.dtype)
        tensors.append(onnx.numpy_helper.from_array(value.astype(dtype), pname))
    if problems:
        raise OnnxExportError(
            "the weights do not fit the graph:" + "".join(f"\n  - {line}" for line in problems)
        )
    return tensors


def _version() -> str:
    try:
        return _metadata.version("seqc")
    except _metadata.PackageNotFoundError:  # a source checkout that is not installed
        return ""


def _place(op: Op) -> str:
    span = f" ({op.span})" if op.span is not None else ""
    return f"op `{op.kind}` of layer `{op.layer or '(model)'}`{span}"


# ------------------------------------------------------------------------------ the gate


def check(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with inferred shapes, once the ONNX checker (full check) and strict shape
    inference accept it; else `OnnxExportError` naming the seqc op and layer of the failing
    node. Run on every emitted model: a model that fails here fails in some runtime later,
    with a message that no longer mentions the spec."""
    try:
        onnx.checker.check_model(model, full_check=True)
        return onnx.shape_inference.infer_shapes(
            model, check_type=True, strict_mode=True, data_prop=True
        )
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        message, span = _locate(model, str(e))
        raise OnnxExportError(message, span=span) from e


_DOC = re.compile(r"seqc `(?P<kind>[^`]+)` of layer `(?P<layer>[^`]+)`(?: at (?P<span>\S+))?")


def _locate(model: onnx.ModelProto, message: str) -> tuple[str, Span | None]:
    """The checker's message, led by the seqc op behind the node it names. A message that
    names no node (some checker errors do not) is narrowed by checking node by node."""
    if len(message) > 2000:
        message = message[:2000] + " ..."
    nodes = list(_all_nodes(model.graph))
    named = [n for n in nodes if n.name and n.name in message]
    if not named:
        named = [n for n in nodes if _node_fails(n, model)][:1]
    detail = message.strip().splitlines()
    text = " | ".join(line.strip() for line in detail if line.strip())
    if not named:
        return f"the ONNX gate rejected the model (no node could be singled out): {text}", None
    # The first node the message names is the cause; later ones only lost their input types.
    # A name can be a prefix of another (`Relu_3`, `Relu_30`): the longer match wins a tie.
    node = min(named, key=lambda n: (message.find(n.name), -len(n.name)))
    node = _narrow(node, model, message)
    m = _DOC.search(node.doc_string)
    span = None
    if m is None:
        where = f"node `{node.name}` ({node.op_type})"
    else:
        span = _span(m["span"])
        at = f" at {m['span']}" if m["span"] else ""
        where = (
            f"seqc op `{m['kind']}` of layer `{m['layer']}`{at} "
            f"(node `{node.name}`, {node.op_type})"
        )
    return (
        f"the ONNX gate rejected {where}: {text}\n"
        "This is a bug in the ONNX emitter (seqc/backends/onnx) for that op kind, not in the "
        "spec: please report it with the layer above."
    ), span


def _span(text: str | None) -> Span | None:
    """The Span of a `file:line:col` a node's doc string carries."""
    if not text:
        return None
    file, _, rest = text.rpartition(":")
    file, _, line = file.rpartition(":")
    if not (line.isdigit() and rest.isdigit()):
        return None
    return Span(file=file, line=int(line), col=int(rest), end_line=int(line), end_col=int(rest))


def _narrow(node: onnx.NodeProto, model: onnx.ModelProto, message: str) -> onnx.NodeProto:
    """A Scan the checker blames for a bad node in its body: the body node, if one is named
    or fails on its own."""
    inner = [
        n for a in node.attribute if a.type == onnx.AttributeProto.GRAPH for n in _all_nodes(a.g)
    ]
    culprit = next((n for n in inner if n.name and n.name in message), None)
    culprit = culprit or next((n for n in inner if _node_fails(n, model)), None)
    return node if culprit is None else culprit


def _all_nodes(g: onnx.GraphProto) -> Any:
    for n in g.node:
        yield n
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _all_nodes(a.g)
            for sub in a.graphs:
                yield from _all_nodes(sub)


def _node_fails(node: onnx.NodeProto, model: onnx.ModelProto) -> bool:
    ctx = onnx.checker.C.CheckerContext()
    ctx.ir_version = model.ir_version
    ctx.opset_imports = {o.domain: o.version for o in model.opset_import}
    try:
        onnx.checker.check_node(node, ctx)
    except onnx.checker.ValidationError:
        return True
    return False
