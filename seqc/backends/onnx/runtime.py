"""Run an emitted model: onnxruntime for real use, `onnx.reference` as a second opinion.

Why two: onnxruntime fuses and reorders (a Gelu kernel, folded transposes), so agreeing with
the JAX interpreter checks the emitter and ORT together; the reference evaluator runs every
node as the ONNX spec writes it, in numpy, and agreeing with it too separates an emitter bug
from an ORT kernel quirk.

Feeds are checked against the model's inputs by name, and integer, bool and float arrays are
cast to the declared dtype (numpy makes int64 ids by default; the model takes int32), so a
caller gets a message naming the input instead of an ORT type error.

Loading an ONNX file runs no code from it: sessions use onnxruntime's built-in CPU kernels only
(no custom-op library is registered, no execution provider but the CPU one), nothing here
unpickles, and an artifact's models carry their weights inside (no external data files). A
model that needs anything else fails to load, as a `FileError` (`load_runner`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper
from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

from seqc.spec.errors import unloadable_model

ModelLike = onnx.ModelProto | bytes | str | os.PathLike


class OnnxRunner:
    """An onnxruntime CPU session over a model given as a proto, serialized bytes or a path."""

    def __init__(self, model: ModelLike, *, threads: int | None = None) -> None:
        options = ort.SessionOptions()
        if threads is not None:
            options.intra_op_num_threads = threads
        source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
        if isinstance(source, os.PathLike):
            source = str(source)
        self._session = ort.InferenceSession(
            source, sess_options=options, providers=["CPUExecutionProvider"]
        )
        self.inputs = {i.name: i for i in self._session.get_inputs()}
        self.output_names = [o.name for o in self._session.get_outputs()]

    @property
    def input_names(self) -> list[str]:
        return list(self.inputs)

    def run(self, feeds: Mapping[str, Any]) -> list[np.ndarray]:
        """Every output of the model, in the model's output order."""
        declared = {name: _ORT_DTYPES.get(i.type) for name, i in self.inputs.items()}
        return self._session.run(None, conform(feeds, declared))


_LOAD_ERRORS = (
    OSError,
    ort_state.Fail,
    ort_state.InvalidArgument,
    ort_state.InvalidGraph,
    ort_state.InvalidProtobuf,
    ort_state.NoSuchFile,
    ort_state.NotImplemented,
    ort_state.RuntimeException,
)


def load_runner(path: Path) -> OnnxRunner:
    """A session over an artifact's model file; a file onnxruntime cannot load (truncated, not
    ONNX, an op it lacks) is a `FileError` naming it, not an onnxruntime traceback."""
    try:
        return OnnxRunner(path)
    except _LOAD_ERRORS as e:
        raise unloadable_model(path, "onnxruntime", e) from None


def reference_run(model: ModelLike, feeds: Mapping[str, Any]) -> list[np.ndarray]:
    """Every output of the model by `onnx.reference.ReferenceEvaluator` (numpy, slow, exact
    to the ONNX spec): the second runtime an emitted model is compared against."""
    from onnx.reference import ReferenceEvaluator

    proto = _load(model)
    declared = {
        i.name: helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)
        for i in proto.graph.input
    }
    return list(ReferenceEvaluator(proto).run(None, conform(feeds, declared)))


def _load(model: ModelLike) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, bytes):
        return onnx.load_from_string(model)
    return onnx.load(Path(model))


_ORT_DTYPES = {
    "tensor(float)": np.dtype(np.float32),
    "tensor(int32)": np.dtype(np.int32),
    "tensor(int64)": np.dtype(np.int64),
    "tensor(bool)": np.dtype(np.bool_),
    "tensor(float16)": np.dtype(np.float16),
}


def conform(feeds: Mapping[str, Any], declared: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """`feeds` checked against the input names of `declared` (name -> numpy dtype) and cast
    within a kind (int64 ids to int32); a float fed to an int input is refused, not truncated."""
    missing = sorted(set(declared) - set(feeds))
    extra = sorted(set(feeds) - set(declared))
    if missing or extra:
        raise ValueError(
            f"the feeds do not match the model's inputs {sorted(declared)}: "
            + ", ".join(
                part
                for part in (
                    f"missing {missing}" if missing else "",
                    f"unexpected {extra}" if extra else "",
                )
                if part
            )
        )
    out = {}
    for name, want in declared.items():
        x = np.asarray(feeds[name])
        if want is not None and x.dtype != want:
            if x.dtype.kind != np.dtype(want).kind and not (
                x.dtype.kind in "iu" and np.dtype(want).kind in "iu"
            ):
                raise ValueError(f"input `{name}` is {x.dtype}, the model takes {np.dtype(want)}")
            x = x.astype(want)
        out[name] = x
    return out
