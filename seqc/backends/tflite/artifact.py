"""The TFLite (LiteRT) artifact format: `model.tflite` with `encode` (encoder-decoders only) and
`step` signatures (a model run in one pass, such as a CTC model: `encode` alone), converted
from the TF backend's SavedModel in one of four modes and run by the `ai_edge_litert`
interpreter (`TfliteSteps`), which reads the file as data (see `seqc.backends.tflite.runtime`).
Full int8 calibrates each signature on its own real feeds (the export job's calibration data)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from seqc.backends.api import ExportJob
from seqc.backends.tflite.runtime import load_runner
from seqc.compiler.step_signature import StepSignature


class TfliteSteps:
    """`StepFunctions` over the LiteRT interpreter's `encode` and `step` signatures."""

    shrinks = True
    """A batch may drop rows between steps: any row count runs without compiling again
    (`seqc.run.decoding.steps`)."""

    def __init__(self, folder: Path, sig: StepSignature) -> None:
        self.has_encoder = bool(sig.encoder_inputs)
        self.has_step = not sig.encoder_only
        keys = ("encode",) * self.has_encoder + ("step",) * self.has_step
        self.runner = load_runner(folder / "model.tflite", keys)
        self.caches = list(sig.caches)
        self.output = sig.output

    def encode(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.runner.run(dict(feeds), signature="encode") if self.has_encoder else {}

    def step(self, feeds: Mapping[str, np.ndarray]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        if not self.has_step:
            raise ValueError("this artifact runs in one pass (encode); it has no step")
        out = self.runner.run(dict(feeds), signature="step")
        return out[self.output], {c: out[f"next_{c}"] for c in self.caches}


def _savedmodel(job: ExportJob, work: Path) -> Path:
    """The TF backend's SavedModel of the job's model, which each quantization converts: made
    once per export and model (`ExportJob.shared`, `variant`), where exporting it again for
    each mode took longer than a conversion."""
    from seqc.backends.tf.savedmodel import export_savedmodel

    if job.shared is None:
        return export_savedmodel(job.graph, job.params, work / "sm", {}, job.program)
    folder = job.shared / f"tflite-savedmodel-{job.variant}"
    if not (folder / "saved_model.pb").is_file():
        export_savedmodel(job.graph, job.params, folder, {}, job.program)
    return folder


class TfliteFormat:
    name = "tflite"
    quantize = ("none", "dynamic", "fp16", "int8")
    model_files = ("model.tflite",)

    def build(self, job: ExportJob, folder: Path, quantize: str, work: Path) -> dict[str, Any]:
        from seqc.backends.tflite.convert import convert

        saved = _savedmodel(job, work)
        keys = ["encode"] * (job.program.encoder is not None)
        keys += ["step"] * (job.program.step is not None)

        def representative() -> Iterator[tuple[str, dict[str, np.ndarray]]]:
            for name, key in (("encoder", "encode"), ("step", "step")):
                if key in keys:
                    for feeds in job.calibration(name):
                        yield key, feeds

        rep = representative if quantize == "int8" else None
        model = convert(saved, quantize, rep, keys, job.keep_float)
        (folder / "model.tflite").write_bytes(model)
        return {"keep_float": list(job.keep_float)} if job.keep_float else {}

    def runtime(self, folder: Path, signature: StepSignature) -> TfliteSteps:
        return TfliteSteps(folder, signature)

    def stamp(self, folder: Path, props: Mapping[str, str]) -> None:
        """TFLite files keep no free-form metadata here: the manifest beside them says it."""


FORMAT = TfliteFormat()
