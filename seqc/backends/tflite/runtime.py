"""Run a TFLite model with the `ai_edge_litert` interpreter, by signature key and input names.

Why signature runners: a seqc TFLite model keeps the SavedModel's signatures
(`serving_default`, `log_probs`, an encoder and a decoder step, ...), each its own subgraph with
inputs and outputs by the spec's names, so callers never deal with tensor indices. B and T are
dynamic in the model; each call resizes the signature's inputs to the feed shapes before it runs
(the interpreter's signature runner does this), so one runner serves every batch size and
length. For a model whose interface is int8 (`inference_input_type=int8`), float feeds are
quantized and int8 outputs dequantized with each tensor's own scale and zero point, so a caller
sees float32 whatever the model stores.

Loading a TFLite file runs no code from it: the interpreter gets the built-in op resolver and
its default CPU delegate, and no custom-op registerers, delegate plugins (`load_delegate`) or
TF Flex ops; nothing here unpickles. A model that needs anything else fails to load, and an
artifact's file that does not load is a `FileError` naming it (`load_runner`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from ai_edge_litert.interpreter import Interpreter

from seqc.spec.errors import unloadable_model


class TfliteRunner:
    """One loaded TFLite model; `run` one signature at a time (not thread-safe, like the
    interpreter it wraps)."""

    def __init__(self, model: bytes | Path, num_threads: int | None = None) -> None:
        if isinstance(model, (bytes, bytearray)):
            self._interpreter = Interpreter(model_content=bytes(model), num_threads=num_threads)
        else:
            path = Path(model)
            if not path.is_file():
                raise FileNotFoundError(f"{path}: no TFLite model here")
            self._interpreter = Interpreter(model_path=str(path), num_threads=num_threads)
        self._runners: dict[str, Any] = {}

    @property
    def signatures(self) -> dict[str, dict[str, list[str]]]:
        """Each signature's input and output names: {key: {"inputs": [...], "outputs": [...]}}."""
        return self._interpreter.get_signature_list()

    def input_details(self, signature: str = "serving_default") -> dict[str, dict[str, Any]]:
        """The interpreter's details (dtype, shape_signature, quantization) of each input."""
        return self._runner(signature).get_input_details()

    def output_details(self, signature: str = "serving_default") -> dict[str, dict[str, Any]]:
        """The same for each output (an int8 output's scale says the resolution of the float)."""
        return self._runner(signature).get_output_details()

    def run(
        self, feeds: dict[str, np.ndarray], signature: str = "serving_default"
    ) -> dict[str, np.ndarray]:
        """The signature's outputs by name for `feeds` (its inputs by name, any batch/length)."""
        runner = self._runner(signature)
        details = runner.get_input_details()
        missing, extra = set(details) - set(feeds), set(feeds) - set(details)
        if missing or extra:
            raise ValueError(
                f"signature {signature!r} takes {', '.join(sorted(details))}; "
                + (f"missing {', '.join(sorted(missing))}" if missing else "")
                + ("; " if missing and extra else "")
                + (f"unexpected {', '.join(sorted(extra))}" if extra else "")
            )
        args = {}
        for name, d in details.items():
            x = np.asarray(feeds[name])
            want = d["shape_signature"]
            if x.ndim != len(want) or any(
                w not in (-1, n) for w, n in zip(want, x.shape, strict=True)
            ):
                raise ValueError(
                    f"input `{name}` of signature {signature!r} has shape {x.shape}; "
                    f"the model takes {tuple(int(w) for w in want)} (-1: any size)"
                )
            args[name] = _to_model(x, d)
        outputs = runner(**args)
        out_details = runner.get_output_details()
        return {name: _from_model(y, out_details[name]) for name, y in outputs.items()}

    def _runner(self, signature: str) -> Any:
        if signature not in self._runners:
            keys = self.signatures
            if signature not in keys:
                raise KeyError(
                    f"no signature {signature!r} in this TFLite model; it has "
                    f"{', '.join(sorted(keys))}"
                )
            self._runners[signature] = self._interpreter.get_signature_runner(signature)
        return self._runners[signature]


def load_runner(path: Path, signatures: tuple[str, ...]) -> TfliteRunner:
    """A runner over an artifact's model file, with each of `signatures` ready; a file LiteRT
    cannot load (truncated, not a flatbuffer, an op it lacks, a signature missing) is a
    `FileError` naming it, not an interpreter traceback."""
    try:
        runner = TfliteRunner(path)
        for key in signatures:
            runner.input_details(key)
    except (OSError, ValueError, RuntimeError, KeyError) as e:
        raise unloadable_model(path, "LiteRT", e) from None
    return runner


def _scale_zero(details: dict[str, Any]) -> tuple[float, int]:
    q = details["quantization_parameters"]
    if len(q["scales"]) != 1:  # per-axis params are for weights, never for an interface tensor
        raise ValueError(f"tensor {details['name']} is not per-tensor quantized: {q}")
    return float(q["scales"][0]), int(q["zero_points"][0])


def _to_model(x: np.ndarray, details: dict[str, Any]) -> np.ndarray:
    dtype = np.dtype(details["dtype"])
    if dtype in (np.int8, np.uint8, np.int16) and np.issubdtype(x.dtype, np.floating):
        scale, zero = _scale_zero(details)
        info = np.iinfo(dtype)
        q = np.round(x.astype(np.float32) / scale) + zero
        return np.clip(q, info.min, info.max).astype(dtype)
    return x.astype(dtype, copy=False)


def _from_model(y: np.ndarray, details: dict[str, Any]) -> np.ndarray:
    if np.dtype(details["dtype"]) in (np.int8, np.uint8, np.int16):
        scale, zero = _scale_zero(details)
        if scale > 0:  # scale 0: not a quantized tensor, a plain integer output
            return ((y.astype(np.float32) - zero) * scale).astype(np.float32)
    return y
