"""A tied embedding table stored once in a quantized TFLite model, not once per use.

A softmax tied to its embedding (`Softmax(vocab, d, tie = embed)`) reads the table [V, d] as
the lookup's rows and as the logits' fully-connected weights, whose layout ([out, in] = [V, d])
is the table's own: float32 stores it once. The converter quantizes each use on its own,
though: the logits' weights int8 with a scale per vocabulary row, the lookup's table int8 with
one scale (a quantized GATHER copies bytes, so its output shares its table's one scale), and a
full-int8 encoder-decoder a third copy for the encoder's lookup (each signature calibrates its
own). For the quick LM that is 256 KB of a 700 KB file; for the translator 1 MB of 1.5 MB.

`share_tied_tables` rewrites the converted file so that each such lookup reads the logits'
int8 weights: a DEQUANTIZE of that constant (which the interpreter computes once, on the first
call, and keeps) feeds a float GATHER; in full int8 a QUANTIZE then gives the rows the int8
type and scale the lookup's output had, so every op after it is unchanged, and in dynamic range
the rows are what its DEQUANTIZE of the gathered int8 rows gave. The lookup's rows now have
their own scales, which the logits' weights keep; the price is the dequantized table held in
memory at run time (the size of the float32 table), not in the file.

A lookup's table is matched to a weight by value, not by name (the converter's tensor names are
its own): same shape, and every element within half a step of each quantization of the other,
which two distinct tables (or a table and a projection) are not.
"""

from __future__ import annotations

from dataclasses import dataclass

import flatbuffers
import numpy as np
from ai_edge_litert import schema_py_generated as schema

_INT8 = schema.TensorType.INT8
_FLOAT32 = schema.TensorType.FLOAT32
_ALIGN = 16
"""Byte alignment of constant data in the file, as the converter writes it."""


@dataclass(frozen=True)
class _Weight:
    subgraph: int
    tensor: int
    values: np.ndarray
    """Dequantized, float64 [V, d]."""
    step: np.ndarray
    """Half the quantization step of each element, broadcast to [V, d]."""


def share_tied_tables(model: bytes) -> bytes:
    """The model with each int8 table a GATHER reads, or a DEQUANTIZE dequantizes whole (a
    table gathered more than once), that is a fully-connected weight's table too read from that
    weight instead (see the module doc); unchanged (the same bytes) when it has none."""
    m = schema.ModelT.InitFromPackedBuf(model, 0)
    weights = _fc_weights(m)
    rewritten = 0
    for si, g in enumerate(m.subgraphs):
        i = 0
        while i < len(g.operators):
            op, kind = g.operators[i], _builtin(m, g.operators[i])
            weight = kind in ("GATHER", "DEQUANTIZE") and _tied_weight(m, g, op, weights)
            if weight and kind == "GATHER":
                i = _read_weight(m, si, i, weight)
            elif weight:  # already a DEQUANTIZE of the table: of the weight instead
                op.inputs = [_weight_here(m, si, weight)]
                _operator_code(m, "DEQUANTIZE", _dequantize_version(m, weight))
            rewritten += bool(weight)
            i += 1
    if not rewritten:
        return model
    _drop_unused_buffers(m)
    return _pack(m)


def _builtin(m: schema.ModelT, op: schema.OperatorT) -> str:
    code = m.operatorCodes[op.opcodeIndex]
    builtin = max(code.builtinCode, code.deprecatedBuiltinCode)
    return _OP_NAMES.get(builtin, str(builtin))


_OP_NAMES = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}


def _constant(m: schema.ModelT, t: schema.TensorT) -> np.ndarray | None:
    """The int8 values of a constant 2-D int8 tensor, else None."""
    data = m.buffers[t.buffer].data if t.buffer < len(m.buffers) else None
    shape = [int(n) for n in (t.shape if t.shape is not None else [])]
    if t.type != _INT8 or data is None or len(shape) != 2 or len(data) != shape[0] * shape[1]:
        return None
    return np.asarray(data, np.uint8).view(np.int8).reshape(shape)


def _dequantized(t: schema.TensorT, q: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(values, scale) of each element of the int8 tensor `t` holding `q` [V, d], per tensor
    or per channel, else None (not affine int8)."""
    quant = t.quantization
    if quant is None or quant.scale is None or len(quant.scale) == 0:
        return None
    scale = np.asarray(quant.scale, np.float64)
    zero = np.asarray(quant.zeroPoint if quant.zeroPoint is not None else [0], np.float64)
    if scale.size > 1:  # per channel, along `quantizedDimension` of the 2-D table
        axis = int(quant.quantizedDimension)
        if scale.size != q.shape[axis] or zero.size not in (1, scale.size):
            return None
        along = (-1, 1) if axis == 0 else (1, -1)
        scale = scale.reshape(along)
        zero = zero.reshape(along) if zero.size > 1 else zero
    scale = np.broadcast_to(scale, q.shape)
    return (q - zero) * scale, scale


def _fc_weights(m: schema.ModelT) -> list[_Weight]:
    """The constant int8 weights of every FULLY_CONNECTED, dequantized, once per buffer."""
    out: dict[int, _Weight] = {}
    for si, g in enumerate(m.subgraphs):
        for op in g.operators:
            if _builtin(m, op) != "FULLY_CONNECTED" or len(op.inputs) < 2:
                continue
            t = g.tensors[op.inputs[1]]
            q = _constant(m, t)
            dq = None if q is None else _dequantized(t, q)
            if dq is not None and t.buffer not in out:
                out[t.buffer] = _Weight(si, int(op.inputs[1]), dq[0], dq[1] / 2)
    return list(out.values())


def _tied_weight(
    m: schema.ModelT, g: schema.SubGraphT, op: schema.OperatorT, weights: list[_Weight]
) -> _Weight | None:
    """The fully-connected weight holding the same table as the GATHER `op` reads (rows, axis
    0, of a constant int8 table) or the DEQUANTIZE `op` dequantizes, if any."""
    options = op.builtinOptions
    if getattr(options, "axis", 0) != 0 or getattr(options, "batchDims", 0) != 0:
        return None
    t = g.tensors[op.inputs[0]]
    q = _constant(m, t)
    dq = None if q is None else _dequantized(t, q)
    if dq is None:
        return None
    values, scale = dq
    for w in weights:
        if m.subgraphs[w.subgraph].tensors[w.tensor].buffer == t.buffer:
            return None  # already the weight's own table
        if w.values.shape != values.shape:
            continue
        gap = w.values - values
        tolerance = (w.step + scale / 2) * 1.001 + 1e-12
        # a table quantized to the range of the rows calibration read clips the others
        clipped = ((q == 127) & (gap > 0)) | ((q == -128) & (gap < 0))
        if np.all((np.abs(gap) <= tolerance) | clipped):
            return w
    return None


def _read_weight(m: schema.ModelT, si: int, i: int, weight: _Weight) -> int:
    """Rewrite the GATHER at `g.operators[i]` to read rows of the dequantized `weight`; the
    index of the GATHER's last replacement op."""
    g = m.subgraphs[si]
    gather = g.operators[i]
    gather.inputs, gather.outputs = list(gather.inputs), list(gather.outputs)  # numpy, read-only
    table = g.tensors[gather.inputs[0]]
    dense = _tensor(g, f"{table.name.decode()}/dequantized", _FLOAT32, list(table.shape))
    w = _weight_here(m, si, weight)
    dequantize = _operator(m, "DEQUANTIZE", [w], [dense], _dequantize_version(m, weight))
    gather.inputs[0] = dense
    out = int(gather.outputs[0])
    consumers = [o for o in g.operators if out in o.inputs]
    graph_io = out in g.outputs
    if len(consumers) == 1 and _builtin(m, consumers[0]) == "DEQUANTIZE" and not graph_io:
        # dynamic range: the float rows are what the dequantized int8 rows were
        gather.outputs[0] = consumers[0].outputs[0]
        g.operators.remove(consumers[0])
        g.operators.insert(i, dequantize)
        return i + 1
    # full int8: quantize the float rows to the type and scale the lookup's rows had
    o = g.tensors[out]
    rows = _tensor(g, f"{o.name.decode()}/float", _FLOAT32, list(o.shape), 0, None, o)
    gather.outputs[0] = rows
    g.operators.insert(i + 1, _operator(m, "QUANTIZE", [rows], [out], 2))
    g.operators.insert(i, dequantize)
    return i + 2


def _weight_here(m: schema.ModelT, si: int, weight: _Weight) -> int:
    """The weight's tensor in subgraph `si`: its own, or a new one there on the same buffer
    (tensors belong to a subgraph; buffers are the file's)."""
    if weight.subgraph == si:
        return weight.tensor
    w = m.subgraphs[weight.subgraph].tensors[weight.tensor]
    name = f"{w.name.decode()}/shared"
    return _tensor(m.subgraphs[si], name, w.type, list(w.shape), w.buffer, w.quantization)


def _dequantize_version(m: schema.ModelT, weight: _Weight) -> int:
    """DEQUANTIZE's version for an int8 input (TFLite's op versioning): 5 per channel, else 2."""
    scale = m.subgraphs[weight.subgraph].tensors[weight.tensor].quantization.scale
    return 5 if len(scale) > 1 else 2


def _tensor(
    g: schema.SubGraphT,
    name: str,
    dtype: int,
    shape: list[int],
    buffer: int = 0,
    quantization: schema.QuantizationParametersT | None = None,
    like: schema.TensorT | None = None,
) -> int:
    t = schema.TensorT()
    t.name, t.type, t.shape, t.buffer = name.encode(), dtype, shape, buffer
    t.quantization = quantization
    if like is not None and like.shapeSignature is not None:
        t.shapeSignature = list(like.shapeSignature)
    g.tensors.append(t)
    return len(g.tensors) - 1


def _operator(
    m: schema.ModelT, name: str, inputs: list[int], outputs: list[int], version: int
) -> schema.OperatorT:
    """A new operator of the builtin `name`, reading `inputs`, writing `outputs`."""
    op = schema.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = _operator_code(m, name, version), inputs, outputs
    return op


def _operator_code(m: schema.ModelT, name: str, version: int) -> int:
    """The index of the builtin `name`'s operator code, added if missing, its version raised to
    `version` (what TFLite's op versioning gives an int8 or per-channel input) if lower."""
    builtin = getattr(schema.BuiltinOperator, name)
    codes = [max(c.builtinCode, c.deprecatedBuiltinCode) for c in m.operatorCodes]
    if builtin not in codes:
        code = schema.OperatorCodeT()
        code.builtinCode, code.deprecatedBuiltinCode = builtin, min(builtin, 127)
        m.operatorCodes.append(code)
        codes.append(builtin)
    code = m.operatorCodes[codes.index(builtin)]
    code.version = max(code.version, version)
    return codes.index(builtin)


def _drop_unused_buffers(m: schema.ModelT) -> None:
    """Empty the data of buffers no operator's tensor reads any more (the lookups' old tables;
    the indices stay, so no reference moves)."""
    used = {0}
    for g in m.subgraphs:
        live = {int(t) for op in g.operators for t in [*op.inputs, *op.outputs] if t >= 0}
        live |= {int(t) for t in [*g.inputs, *g.outputs]}
        used |= {g.tensors[t].buffer for t in live}
    for bi, b in enumerate(m.buffers):
        if bi not in used and b.data is not None:
            b.data = None


class _AlignedBuffer(schema.BufferT):
    """A buffer packed with its data aligned as the converter aligns it (the generated `Pack`
    aligns bytes to 1, which kernels reading float or int32 constants in place may not accept)."""

    def Pack(self, builder: flatbuffers.Builder) -> int:
        data = None
        if self.data is not None:
            payload = np.asarray(self.data, np.uint8).tobytes()
            builder.StartVector(1, len(payload), _ALIGN)
            builder.head -= len(payload)
            builder.Bytes[builder.head : builder.head + len(payload)] = payload
            builder.vectorNumElems = len(payload)
            data = builder.EndVector()
        schema.BufferStart(builder)
        if data is not None:
            schema.BufferAddData(builder, data)
        schema.BufferAddOffset(builder, self.offset)
        schema.BufferAddSize(builder, self.size)
        return schema.BufferEnd(builder)


def _pack(m: schema.ModelT) -> bytes:
    for i, b in enumerate(m.buffers):
        aligned = _AlignedBuffer()
        aligned.data, aligned.offset, aligned.size = b.data, b.offset, b.size
        m.buffers[i] = aligned
    builder = flatbuffers.Builder(1 << 20)
    builder.Finish(m.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())
