"""The ONNX emitter's context: the (sub)graph under construction that every primitive's emitter
appends its nodes to (`Ctx`), and the dtype table it names ONNX types with (`DTYPES`).

Its own module because both sides of the emitter build on it: the primitive table (`ops`) and
the walk that drives it and builds a scan's body graph (`emit`). The mirror of
`seqc.backends.jax.context` and `seqc.backends.tf.context`.

Symbolic dims (`B`, `T`) become `Shape` slices of the graph input they were bound from, computed
once in the outermost graph that can see them, so a scan body reads them from the outer scope.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from seqc.compiler.graph import Op, Shape, TensorType

DTYPES = {
    "float32": TensorProto.FLOAT,
    "bfloat16": TensorProto.BFLOAT16,
    "float16": TensorProto.FLOAT16,
    "int32": TensorProto.INT32,
    "int64": TensorProto.INT64,
    "bool": TensorProto.BOOL,
}
LARGE_CONSTANT = 1024
"""Bytes above which a constant is an initializer rather than a Constant node."""
NUMPY = {"float32": np.float32, "int32": np.int32, "int64": np.int64, "bool": np.bool_}


@dataclass
class Ctx:
    """One (sub)graph under construction: its nodes, where its symbolic dims can be read, and
    the seqc op being emitted (it names every node, so a failure points back at the spec).

    `symbols` maps a dim name to (value, axis) of an input of this graph that has it; `parent` is
    the enclosing graph for a scan body, whose values a body may read (ONNX outer scope).
    """

    opset: int
    prefix: str = ""
    parent: Ctx | None = None
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    symbols: dict[str, tuple[str, int]] = field(default_factory=dict)
    dtypes: dict[str, str] = field(default_factory=dict)
    constants: dict[tuple, onnx.TensorProto] = field(default_factory=dict)
    op: Op | None = None
    in_types: list[TensorType] = field(default_factory=list)
    _dims: dict[str, str] = field(default_factory=dict)
    _count: int = 0

    # ------------------------------------------------------------------ building nodes
    def where(self) -> str:
        """The seqc location of the op being emitted: `layer/kind#value`."""
        if self.op is None:
            return f"{self.prefix}graph"
        return f"{self.op.layer or '(model)'}/{self.op.kind}#{self.prefix}v{self.op.id}"

    def node(self, op_type: str, inputs: Sequence[str], n_out: int = 1, **attrs: Any) -> Any:
        """Append a node; returns its output name (a list of names when `n_out` > 1)."""
        self._count += 1
        base = f"{self.prefix}v{self.op.id}" if self.op is not None else f"{self.prefix}g"
        outs = [f"{base}/{self._count}" + (f".{i}" if n_out > 1 else "") for i in range(n_out)]
        doc = ""
        if self.op is not None:
            span = f" at {self.op.span}" if self.op.span is not None else ""
            doc = f"seqc `{self.op.kind}` of layer `{self.op.layer or '(model)'}`{span}"
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(
            helper.make_node(
                op_type,
                list(inputs),
                outs,
                name=f"{self.where()}/{op_type}_{self._count}",
                doc_string=doc,
                **attrs,
            )
        )
        return outs[0] if n_out == 1 else outs

    def const(self, value: Any, dtype: str | None = None) -> str:
        """A Constant node; a large one (over `LARGE_CONSTANT` bytes) becomes an initializer of
        the outermost graph instead, named `const/<layer>#v<id>` and shared by every op with the
        same content (a scan body reads it from the outer scope), and tools that look for
        weights among initializers (quantizers) can tell it from a layer's."""
        array = np.asarray(value, NUMPY[dtype]) if dtype else np.asarray(value)
        seqc_dtype = {v: k for k, v in NUMPY.items()}.get(array.dtype.type, "float32")
        if array.nbytes <= LARGE_CONSTANT:
            name = self.node("Constant", [], value=numpy_helper.from_array(array))
            self.dtypes[name] = seqc_dtype
            return name
        root = self
        while root.parent is not None:
            root = root.parent
        key = (array.dtype.str, array.shape, hashlib.sha1(array.tobytes()).hexdigest())
        if key not in root.constants:
            name = f"const/{self.where()}"
            root.constants[key] = numpy_helper.from_array(array, name)
            root.dtypes[name] = seqc_dtype
        return root.constants[key].name

    def dtype(self, name: str) -> str:
        """The seqc dtype of a value of this graph or of an enclosing one."""
        ctx: Ctx | None = self
        while ctx is not None:
            if name in ctx.dtypes:
                return ctx.dtypes[name]
            ctx = ctx.parent
        raise KeyError(name)

    def cast(self, name: str, dtype: str) -> str:
        if self.dtype(name) == dtype:
            return name
        out = self.node("Cast", [name], to=DTYPES[dtype])
        self.dtypes[out] = dtype
        return out

    # ------------------------------------------------------------------ symbolic dims
    def symbol(self, s: str) -> str | None:
        """int64[1] holding the size of dim `s`, read in the outermost graph that binds it."""
        if s in self._dims:
            return self._dims[s]
        found = self.parent.symbol(s) if self.parent is not None else None
        if found is None and s in self.symbols:
            value, axis = self.symbols[s]
            found = self.node("Shape", [value], start=axis, end=axis + 1)
        if found is not None:
            self._dims[s] = found
        return found

    def shape(self, shape: Shape, what: str) -> str:
        """int64[rank] for a seqc shape. A dim no input binds (`T+S`) becomes -1, which
        Reshape infers (one such dim at most); any other use refuses it."""
        parts: list[str | int] = []
        unknown = 0
        for d in shape:
            if isinstance(d, int):
                parts.append(d)
                continue
            found = self.symbol(d)
            if found is None:
                unknown += 1
                parts.append(-1)
            else:
                parts.append(found)
        if unknown > (1 if what == "reshape" else 0):
            raise ValueError(
                f"the {what} shape {list(shape)} has {unknown} dims that no graph input binds"
                + ("; Reshape can infer only one" if what == "reshape" else "")
            )
        if all(isinstance(p, int) for p in parts):
            return self.const(np.array(parts, np.int64))
        pieces = [p if isinstance(p, str) else self.const(np.array([p], np.int64)) for p in parts]
        return pieces[0] if len(pieces) == 1 else self.node("Concat", pieces, axis=0)

    def size(self, x: str, axis: int) -> str:
        """int64 scalar: the size of `x` along `axis`, read at run time."""
        n = self.node("Shape", [x], start=axis, end=axis + 1 if axis != -1 else None)
        return self.node("Squeeze", [n, self.const(np.array([0], np.int64))])

    def reduce(self, op_type: str, x: str, axes: Sequence[int], keepdims: bool) -> str:
        """Reductions take `axes` as an input from opset 18 (ReduceSum from 13)."""
        axes_list = [int(a) for a in axes]
        if op_type == "ReduceSum" or self.opset >= 18:
            return self.node(
                op_type, [x, self.const(np.array(axes_list, np.int64))], keepdims=int(keepdims)
            )
        return self.node(op_type, [x], axes=axes_list, keepdims=int(keepdims))
