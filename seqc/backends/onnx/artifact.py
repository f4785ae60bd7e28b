"""The ONNX artifact format: `encoder.onnx` (encoder-decoders only) and `step.onnx`; a model
run in one pass (a CTC model: audio in, frame logits out) is `encoder.onnx` alone. A language
model also has `sequence.onnx`, its whole-sentence scorer (`StepProgram.sequence`): what n-best
rescoring runs, a batch of sentences a call instead of a call per position.

Built from the op graphs by `seqc.backends.onnx.emit`, gated by the ONNX checker and strict
shape inference, quantized by `seqc.backends.onnx.quantize`; run by onnxruntime (`OnnxSteps`),
which reads the files as data (see `seqc.backends.onnx.runtime`): a model file it cannot load
is a `FileError` naming it.
A second runtime, `onnx.reference`, must agree with onnxruntime on one step of the float model
(its error goes into the manifest): it separates an emitter bug from an onnxruntime kernel quirk.
Without a step graph the encoder is compared instead, on its smallest calibration feed (a
speech model's shortest of its calibration utterances: the evaluator runs every node in numpy,
so a long utterance through a Conformer takes a while).
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from seqc.backends.api import ExportJob, SentenceScorer
from seqc.backends.onnx.emit import check, to_onnx
from seqc.backends.onnx.runtime import OnnxRunner, load_runner, reference_run
from seqc.compiler.scoring import SCORE_OUTPUT
from seqc.compiler.step_signature import StepSignature


class OnnxSteps:
    """`StepFunctions` over onnxruntime sessions of `encoder.onnx` and `step.onnx` (none for
    an encoder-only artifact)."""

    shrinks = True
    """A batch may drop rows between steps: any row count runs without compiling again
    (`seqc.run.decoding.steps`)."""

    def __init__(self, folder: Path, sig: StepSignature) -> None:
        enc = folder / "encoder.onnx"
        self.encoder = load_runner(enc) if enc.exists() or sig.encoder_only else None
        self.stepper = None if sig.encoder_only else load_runner(folder / "step.onnx")
        seq = folder / "sequence.onnx"
        self.sequencer = load_runner(seq) if seq.exists() and sig.sequence_inputs else None
        self.sequence: SentenceScorer | None = None if self.sequencer is None else self._sequence
        """A language model's sentence scorer (`sequence.onnx`); None: scored by steps."""
        self.encoder_outputs = list(sig.encoder_outputs)
        self.caches = list(sig.caches)

    def encode(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.encoder is None:
            return {}
        return dict(zip(self.encoder_outputs, self.encoder.run(feeds), strict=True))

    def step(self, feeds: Mapping[str, np.ndarray]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        if self.stepper is None:
            raise ValueError("this artifact runs in one pass (encode); it has no step")
        logits, *caches = self.stepper.run(feeds)
        return logits, dict(zip(self.caches, caches, strict=True))

    def _sequence(self, feeds: Mapping[str, np.ndarray]) -> np.ndarray:
        """A language model's score of each given next token [B, T], whole sentences in one
        call (`sequence.onnx`)."""
        assert self.sequencer is not None
        return np.asarray(self.sequencer.run(feeds)[0])


class OnnxFormat:
    name = "onnx"
    quantize = ("none", "dynamic", "int8")
    model_files = ("encoder.onnx", "step.onnx", "sequence.onnx")

    def build(self, job: ExportJob, folder: Path, quantize: str, work: Path) -> dict[str, Any]:
        program = job.program
        graphs: list[tuple[str, Any, list[str]]] = []
        if program.step is not None:
            graphs.append(("step", program.step, list(program.step_outputs)))
        if program.encoder is not None:
            graphs.insert(0, ("encoder", program.encoder, list(program.encoder_outputs)))
        if program.sequence is not None:
            graphs.append(("sequence", program.sequence, [SCORE_OUTPUT]))
        for name, graph, outputs in graphs:
            model = to_onnx(
                graph, job.params, name=f"seqc_{name}", output_names=outputs, metadata=job.metadata
            )
            check(model)
            fp32 = work / f"{name}.onnx"
            onnx.save(model, str(fp32))
            target = folder / f"{name}.onnx"
            if quantize == "none":
                shutil.copy2(fp32, target)
            elif quantize == "dynamic":
                from seqc.backends.onnx.quantize import quantize_dynamic

                quantize_dynamic(fp32, target)
            else:
                from seqc.backends.onnx.quantize import quantize_static

                quantize_static(fp32, target, job.calibration(name))
        # onnx's reference evaluator against onnxruntime on one step of the float model (the
        # evaluator has no int8 kernels at this opset); the encoder of a one-pass model.
        name = "encoder" if program.step is None else "step"
        feeds = job.probe(name)
        got = OnnxRunner(work / f"{name}.onnx").run(feeds)
        want = reference_run(onnx.load(str(work / f"{name}.onnx")), feeds)
        err = max(
            float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
            for a, b in zip(got, want, strict=True)
        )
        return {"reference_evaluator_err": err}

    def runtime(self, folder: Path, signature: StepSignature) -> OnnxSteps:
        return OnnxSteps(folder, signature)

    def stamp(self, folder: Path, props: Mapping[str, str]) -> None:
        """Into each file's `metadata_props` (metadata does not change what the graph
        computes, so the figures measured on the unstamped files stay valid)."""
        for path in sorted(folder.glob("*.onnx")):
            model = onnx.load(str(path))
            kept = [m for m in model.metadata_props if m.key not in props]
            del model.metadata_props[:]
            model.metadata_props.extend(kept)
            for key, value in props.items():
                model.metadata_props.add(key=key, value=value)
            onnx.save(model, str(path))


FORMAT = OnnxFormat()
