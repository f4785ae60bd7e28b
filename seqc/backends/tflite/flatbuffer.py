"""What a TFLite flatbuffer holds: its ops with their tensor dtypes, which compute in float, and
its constant buffers (`constants`: what the file's size is made of).

Why: the converter's int8 op set does not stop it from leaving an op without an int8 kernel in
float32 (TF 2.21 quietly keeps e.g. FLOOR or CUMSUM float under `TFLITE_BUILTINS_INT8`), so
"int8" is checked on the result, not trusted from the settings. Read with the flatbuffer schema
that ships with `ai_edge_litert`; no interpreter is needed.
"""

from __future__ import annotations

from dataclasses import dataclass

from ai_edge_litert import schema_py_generated as schema

_OP_NAMES = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
_TYPE_NAMES = {v: k for k, v in vars(schema.TensorType).items() if not k.startswith("_")}
FLOATS = frozenset({"FLOAT32", "FLOAT16", "FLOAT64", "BFLOAT16"})
"""The flatbuffer's float tensor types, by name."""

# Ops that move, reshape, select or convert values without arithmetic: float tensors through
# them (a recurrent loop's carried state, its output buffer, the entry quantize and the exit
# dequantize) cost no float compute.
MOVEMENT = frozenset(
    {
        "QUANTIZE", "DEQUANTIZE", "CAST", "WHILE", "IF", "CALL_ONCE", "RESHAPE", "TRANSPOSE",
        "FILL", "ZEROS_LIKE", "CONCATENATION", "STRIDED_SLICE", "SLICE", "GATHER", "GATHER_ND",
        "PACK", "UNPACK", "SHAPE", "SQUEEZE", "EXPAND_DIMS", "BROADCAST_TO", "SPLIT", "SPLIT_V",
        "SELECT", "SELECT_V2", "TILE", "REVERSE_V2", "PAD", "PADV2",
    }
)  # fmt: skip


@dataclass(frozen=True)
class Op:
    """One operator: where it is (subgraph name, or the signature key of a main subgraph), its
    builtin name (or custom code) and the dtypes of its inputs and outputs."""

    subgraph: str
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    output_names: tuple[str, ...] = ()
    """The names of its output tensors: the TF ops it was converted from, `;`-separated when
    fused, each under its layer's name scope (`seqc.backends.tf.scopes`)."""
    on_values: bool = True
    """Whether it reads the values of the subgraph's inputs (directly or through other ops), not
    only their shapes and the constants: rotary angles computed from a length are not."""
    input_names: tuple[str, ...] = ()
    """The names of the tensors it reads (constants included): what feeds it, by name."""

    def __str__(self) -> str:
        return f"{self.name}({', '.join(self.inputs)}) -> {', '.join(self.outputs)}"


def ops(model: bytes) -> list[Op]:
    """Every operator of every subgraph, in order."""
    m = schema.Model.GetRootAs(model, 0)
    names = _signature_keys(m)
    out = []
    for si in range(m.SubgraphsLength()):
        g = m.Subgraphs(si)
        where = names.get(si) or (g.Name() or b"").decode() or f"subgraph {si}"

        def dtypes(indices: list[int], g: schema.SubGraph = g) -> tuple[str, ...]:
            return tuple(_TYPE_NAMES.get(g.Tensors(t).Type(), "?") for t in indices if t >= 0)

        # A subgraph's inputs carry values (a loop body's too: its carried state); SHAPE reads
        # none, and what only constants and shapes feed carries none.
        valued = {g.Inputs(j) for j in range(g.InputsLength())}
        for oi in range(g.OperatorsLength()):
            op = g.Operators(oi)
            code = m.OperatorCodes(op.OpcodeIndex())
            builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
            name = _OP_NAMES.get(builtin, str(builtin))
            if name == "CUSTOM":
                name = f"CUSTOM:{(code.CustomCode() or b'').decode()}"
            inputs = [op.Inputs(j) for j in range(op.InputsLength())]
            outputs = [op.Outputs(j) for j in range(op.OutputsLength())]
            on_values = name != "SHAPE" and any(t in valued for t in inputs)
            if on_values:
                valued.update(outputs)
            named = tuple((g.Tensors(t).Name() or b"").decode() for t in outputs if t >= 0)
            reads = tuple((g.Tensors(t).Name() or b"").decode() for t in inputs if t >= 0)
            out.append(Op(where, name, dtypes(inputs), dtypes(outputs), named, on_values, reads))
    return out


def _signature_keys(m: schema.Model) -> dict[int, str]:
    """The signature key of each main subgraph, by subgraph index."""
    sigs = [m.SignatureDefs(i) for i in range(m.SignatureDefsLength())]
    return {sig.SubgraphIndex(): sig.SignatureKey().decode() for sig in sigs}


def float_compute(model: bytes, values_only: bool = False) -> list[Op]:
    """The ops that do arithmetic on float tensors (anything but `MOVEMENT` with a float input
    or output): empty for a fully integer model. `values_only`: only those that compute on the
    inputs' values (`Op.on_values`), leaving out float arithmetic on lengths and constants, such
    as the sin and cos of rotary positions, which no int8 kernel has and no input's range
    affects."""
    return [
        op
        for op in ops(model)
        if op.name not in MOVEMENT
        and FLOATS & {*op.inputs, *op.outputs}
        and (op.on_values or not values_only)
    ]


@dataclass(frozen=True)
class Constant:
    """One buffer of constant data and the tensors reading it, in any subgraph: a table a
    file stores once however many ops and signatures read it."""

    nbytes: int
    dtype: str
    shape: tuple[int, ...]
    names: tuple[str, ...]
    """`subgraph:tensor` of each tensor whose data it is."""


def constants(model: bytes) -> list[Constant]:
    """The model's constant buffers, largest first (dtype and shape of the first tensor that
    reads each)."""
    m = schema.Model.GetRootAs(model, 0)
    keys = _signature_keys(m)
    readers: dict[int, list[tuple[str, str, tuple[int, ...]]]] = {}
    for si in range(m.SubgraphsLength()):
        g = m.Subgraphs(si)
        where = keys.get(si) or (g.Name() or b"").decode() or f"subgraph {si}"
        for ti in range(g.TensorsLength()):
            t = g.Tensors(ti)
            shape = tuple(int(n) for n in t.ShapeAsNumpy()) if t.ShapeLength() else ()
            name = f"{where}:{(t.Name() or b'').decode()}"
            readers.setdefault(t.Buffer(), []).append((name, _TYPE_NAMES.get(t.Type(), "?"), shape))
    out = []
    for bi in range(m.BuffersLength()):
        nbytes = m.Buffers(bi).DataLength()
        if nbytes and bi in readers:
            (_, dtype, shape), *_ = readers[bi]
            out.append(Constant(nbytes, dtype, shape, tuple(r[0] for r in readers[bi])))
    return sorted(out, key=lambda c: -c.nbytes)
