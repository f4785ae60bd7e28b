"""TF name scopes named after the spec's layers.

Why: every TF op the backend emits runs under the name scope of the layer it lowers
(`blocks.3.attn/MatMul`), so a graph exported from TF (a SavedModel, the TFLite model converted
from it) says which layer each of its ops computes. Selective quantization reads that: `tflite(
quantize = "int8", keep_float = [...])` keeps the named layers' ops in float by their names
(`seqc.backends.tflite.selective`).
"""

from __future__ import annotations

import re

_BAD = re.compile(r"[^A-Za-z0-9_.\-]")

SIGNAL_SCOPE = "position_signal"
"""The name scope (inside its layer's) of the ops that compute a fixed signal of positions alone
(the sinusoid, `seqc.backends.tf.ops`): float arithmetic on integer positions, with no
activation range to calibrate, which full-int8 TFLite leaves in float (an int8 angle would be
meaningless) and does not count as float compute (`seqc.backends.tflite.convert`)."""


def layer_scope(layer: str) -> str:
    """The name scope of a layer path: dots kept, anything TF refuses in a scope name made
    `_` (a scope may not start with `_` or `-`, so such a path gains a leading `L`)."""
    name = _BAD.sub("_", layer)
    return name if name[:1].isalnum() or name[:1] == "." else f"L{name}"


def in_layers(tensor_name: str, layers: tuple[str, ...] | list[str]) -> bool:
    """Whether a TFLite tensor named `tensor_name` is computed by one of `layers` (or a
    sublayer of one). The converter names a fused op by the names it fused, `;`-separated,
    each under the absolute scope of its layer."""
    scopes = [layer_scope(x) for x in layers]
    for part in tensor_name.split(";"):
        segments = part.split("/")
        for seg in segments[:-1]:
            if any(seg == s or seg.startswith(f"{s}.") for s in scopes):
                return True
    return False


def in_signal(tensor_name: str) -> bool:
    """Whether a TFLite tensor named `tensor_name` is computed under `SIGNAL_SCOPE` (every part
    of a fused name)."""
    parts = tensor_name.split(";")
    return all(any(_SIGNAL.fullmatch(s) for s in part.split("/")[:-1]) for part in parts)


_SIGNAL = re.compile(rf"{SIGNAL_SCOPE}(_\d+)?")
"""The scope TF gives a layer's second, third ... signal: `position_signal_1`."""
