"""The ONNX backend's error: what the emitter, a primitive's emitter and the gate raise.

Its own module because every layer of the backend raises it: a primitive that ONNX cannot
express (`ops`), the walk that emits the graph and the gate that checks it (`emit`). Kept with
neither, so the table does not reach up into the walk that reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

from seqc.spec.errors import ExportError


@dataclass
class OnnxExportError(ExportError):
    """An op graph or a model that cannot become (or is not) a valid ONNX model; the message
    names the seqc op kind and layer path, and the span points at the spec line."""

    code: str = "onnx-export"
