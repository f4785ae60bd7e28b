"""A tied embedding table stored once in an int8 model, not once per layout.

A softmax tied to its embedding (`Softmax(vocab, d, tie = embed)`) reads the table [V, d] twice:
rows by token id (the lookup) and, transposed, as the logits' weight [d, V]. The quantizer
quantizes each weight initializer by name, and `seqc.backends.onnx.quantize` folds the Transpose
into a weight `<name>.T` so the logits' MatMul is quantized at all; left so, the file holds two
int8 copies (for the quick LM: 500 KB of a 700 KB file). Here the lookup reads `<name>.T` too,
so there is one weight to quantize:

- `gather_columns`, before quantizing: a row Gather of the table becomes a Gather of columns of
  the transpose, then a Transpose of the gathered columns back into rows (of a few tokens).
  Dynamic quantization then stores one per-tensor uint8 table for both uses.
- `gather_rows`, after static (QDQ) quantization, where the lookup was kept float (QDQ would
  quantize its output with the weight's per-column scales): it gathers int8 columns and their
  scales and dequantizes only those, instead of reading the whole dequantized table, which a
  runtime fuses into the MatMul but computes anew on every call for a float Gather.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def gather_columns(model: onnx.ModelProto) -> list[str]:
    """Point each row Gather of a table whose transpose `<name>.T` is also a weight at that
    transpose (see the module doc), in the main graph; returns the rewritten Gathers' names.
    A Gather whose ids have no inferred rank is left as it was."""
    graph = model.graph
    inits = {t.name for t in graph.initializer}
    tied = {
        i
        for i, n in enumerate(graph.node)
        if n.op_type == "Gather"
        and f"{n.input[0]}.T" in inits
        and not any(a.name == "axis" and a.i != 0 for a in n.attribute)
    }
    if not tied:
        return []
    inferred = onnx.shape_inference.infer_shapes(model).graph
    ranks = {
        v.name: len(v.type.tensor_type.shape.dim)
        for v in [*inferred.input, *inferred.value_info]
        if v.type.tensor_type.HasField("shape")
    }
    nodes: list[onnx.NodeProto] = []
    done = []
    for i, node in enumerate(graph.node):
        rank = ranks.get(node.input[1]) if i in tied else None
        if rank is None:
            nodes.append(node)
            continue
        columns = f"{node.output[0]}.columns"
        table, ids = f"{node.input[0]}.T", node.input[1]
        nodes.append(
            helper.make_node("Gather", [table, ids], [columns], node.name, node.doc_string, axis=1)
        )
        perm = [*range(1, rank + 1), 0]  # [d, *ids] -> [*ids, d]
        nodes.append(
            helper.make_node(
                "Transpose", [columns], [node.output[0]], f"{node.name}/rows", perm=perm
            )
        )
        done.append(node.name)
    del graph.node[:]
    graph.node.extend(nodes)
    return done


def gather_rows(model: onnx.ModelProto, gathers: list[str]) -> None:
    """Each of the named Gathers (along axis 1) that reads a DequantizeLinear of an int8
    initializer with per-column (axis 1) or per-tensor scales gathers the int8 columns and
    their scales instead, and dequantizes only those: (q - zero point) * scale."""
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        dq = producer.get(node.input[0]) if node.name in gathers else None
        if dq is None or not _per_column(dq, inits):
            nodes.append(node)
        else:
            nodes += _dequantized_columns(node, dq, inits)
    del graph.node[:]
    graph.node.extend(nodes)


def _dequantized_columns(
    gather: onnx.NodeProto, dq: onnx.NodeProto, inits: dict[str, onnx.TensorProto]
) -> list[onnx.NodeProto]:
    """The nodes computing `gather`'s output from the int8 columns `dq` dequantizes."""
    ids, out, name = gather.input[1], gather.output[0], gather.name
    nodes: list[onnx.NodeProto] = []

    def add(op: str, inputs: list[str], suffix: str, **attrs: int) -> str:
        nodes.append(helper.make_node(op, inputs, [f"{out}.{suffix}"], f"{name}/{suffix}", **attrs))
        return f"{out}.{suffix}"

    def per_id(tensor: str, suffix: str) -> str:
        """A per-column scale or zero point, gathered by id; a per-tensor one as it is."""
        return add("Gather", [tensor, ids], suffix) if inits[tensor].dims else tensor

    columns = add("Gather", [dq.input[0], ids], "q", axis=1)
    value = add("Cast", [columns], "float", to=TensorProto.FLOAT)
    zero = dq.input[2] if len(dq.input) > 2 else ""
    if zero and np.any(numpy_helper.to_array(inits[zero])):
        zero = add("Cast", [per_id(zero, "zp")], "zp_float", to=TensorProto.FLOAT)
        value = add("Sub", [value, zero], "centred")
    scale = per_id(dq.input[1], "scale")  # [*ids] against [d, *ids]: trailing axes broadcast
    nodes.append(helper.make_node("Mul", [value, scale], [out], name, gather.doc_string))
    return nodes


def _per_column(dq: onnx.NodeProto, inits: dict[str, onnx.TensorProto]) -> bool:
    """A DequantizeLinear of an initializer [d, V] with a scale per column (axis 1) or one scale."""
    if dq.op_type != "DequantizeLinear" or not all(i in inits for i in dq.input if i):
        return False
    axis = next((a.i for a in dq.attribute if a.name == "axis"), 1)
    rank, scale_rank = len(inits[dq.input[0]].dims), len(inits[dq.input[1]].dims)
    return rank == 2 and (scale_rank == 0 or (scale_rank == 1 and axis in (1, -1)))
