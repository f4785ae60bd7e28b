"""The SavedModel artifact format: `saved_model/` with forward, `encode` and `step` signatures
(`seqc.backends.tf.savedmodel`), run by the TF runtime (`SavedModelSteps`).

A SavedModel is a program, not data: loading one runs the TensorFlow graph it holds, and a
graph can read and write files (`tf.io.read_file`, `tf.io.write_file`) or start work of its own.
So a SavedModel artifact is trusted input, like a Python script: decode only the ones you or
your pipeline exported. The ONNX and TFLite formats are the ones to use for artifacts from
elsewhere (their runtimes load no code from the file). A model file that does not load is a
`FileError` naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from seqc.backends.api import ExportJob
from seqc.backends.tf.savedmodel import export_savedmodel
from seqc.compiler.step_signature import StepSignature
from seqc.spec.errors import unloadable_model


class SavedModelSteps:
    """`StepFunctions` over a SavedModel's `encode` and `step` signatures."""

    def __init__(self, folder: Path, sig: StepSignature) -> None:
        path = folder / "saved_model"
        self.has_encoder = bool(sig.encoder_inputs)
        self.caches = list(sig.caches)
        self.output = sig.output
        keys = ("encode",) * self.has_encoder + ("step",) * (not sig.encoder_only)
        try:
            self.model = tf.saved_model.load(str(path))
            for key in keys:
                _ = self.model.signatures[key]  # a missing signature fails here
        except (OSError, ValueError, KeyError, tf.errors.OpError) as e:
            raise unloadable_model(path, "TensorFlow", e) from None

    def _call(self, name: str, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        fn = self.model.signatures[name]
        out = fn(**{k: tf.convert_to_tensor(v) for k, v in feeds.items()})
        return {k: v.numpy() for k, v in out.items()}

    def encode(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self._call("encode", feeds) if self.has_encoder else {}

    def step(self, feeds: Mapping[str, np.ndarray]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        out = self._call("step", feeds)
        return out[self.output], {c: out[f"next_{c}"] for c in self.caches}


class SavedModelFormat:
    name = "savedmodel"
    quantize = ("none",)
    model_files = ("saved_model",)

    def build(self, job: ExportJob, folder: Path, quantize: str, work: Path) -> dict[str, Any]:
        export_savedmodel(job.graph, job.params, folder / "saved_model", {}, job.program)
        return {}

    def runtime(self, folder: Path, signature: StepSignature) -> SavedModelSteps:
        return SavedModelSteps(folder, signature)

    def stamp(self, folder: Path, props: Mapping[str, str]) -> None:
        """The SavedModel's own `assets.extra` holds what `export_savedmodel` wrote; the
        manifest beside it says the rest."""


FORMAT = SavedModelFormat()
