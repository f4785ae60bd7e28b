"""What a decoder needs to know of a decoder-step program's tensors, and its zeroed caches.

A `StepSignature` is the interface of a `StepProgram` (`seqc.compiler.incremental`) without its
graphs: the token input, the caches with their symbolic shapes, the encoder's inputs (by batch
field) and outputs. A program run in one pass (`whole_graph`: a CTC model) has no token input,
no caches and no step inputs: `encoder_only` is set and its encoder's one output is the answer
(frame logits). It is what every runtime that decodes step by step reads, whether the step
runs on a training backend or in an exported artifact, where it travels in the manifest (as
JSON, `to_json` / `from_json`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from seqc.compiler.incremental import HISTORY, StepProgram
from seqc.compiler.signature import DECODE_BUCKET, buffer_length


@dataclass
class StepSignature:
    token_input: str | None
    """The step graph's token input ([B, 1] int32): `ids` or `tgt`; None without a step."""
    caches: dict[str, tuple[list[Any], str]]
    """Cache name -> (shape with the batch and history symbols, dtype)."""
    batch_symbol: str
    encoder_inputs: dict[str, str]
    """Encoder input name -> batch field (`src`, `src_mask`); empty for a language model."""
    encoder_outputs: dict[str, list[Any]]
    """Encoder output name (`enc0`, ...) -> its shape, to find its batch axis."""
    step_inputs: list[str]
    """Every input of the step function (a recurrent decoder has no `pos`)."""
    output: str = "logits"
    """The step's first output: `logits`, or `score` for a scoring program."""
    score_input: str | None = None
    """A scoring program's input of the token to score at `pos` ([B, 1] int32), fed from the
    batch field `score_field` (the labels); None for a decoder."""
    score_field: str | None = None
    encoder_only: bool = False
    """True for a program without a step graph: `encode` gives its output (`output`, the
    frame logits of a CTC model), and there is nothing to step."""
    sequence_inputs: dict[str, str] = field(default_factory=dict)
    """The whole-sentence scorer's inputs (`StepProgram.sequence`) -> batch field (`next` ->
    the labels'); empty for a program without one."""

    @classmethod
    def of(
        cls,
        program: StepProgram,
        fields: dict[str, str],
        score_field: str | None = None,
        label_field: str | None = None,
    ) -> StepSignature:
        """From a `StepProgram` and the model's forward input -> batch field table; a scoring
        program's last stepping input is fed from `score_field`, a whole-sentence scorer's
        `next` from `label_field`."""
        enc = program.encoder
        scoring = score_field is not None
        seq = program.sequence
        labels = label_field or score_field
        if seq is not None and labels is None:
            raise ValueError("a program with a whole-sentence scorer needs its labels' field")
        return cls(
            token_input=program.stepping[0] if program.stepping else None,
            caches={c.name: (list(c.type.shape), c.type.dtype) for c in program.caches},
            batch_symbol=program.batch_symbol,
            encoder_inputs={n: fields[n] for n in (enc.inputs if enc is not None else {})},
            encoder_outputs={
                name: list(enc.ops[vid].type.shape)
                for name, vid in zip(
                    program.encoder_outputs, enc.outputs if enc is not None else [], strict=True
                )
            },
            step_inputs=list(program.step.inputs) if program.step is not None else [],
            output=program.output,
            score_input=program.stepping[-1] if scoring else None,
            score_field=score_field,
            encoder_only=program.encoder_only,
            sequence_inputs={
                name: fields.get(name, labels or "") for name in (seq.inputs if seq else {})
            },
        )

    def batch_axis(self, shape: list[Any]) -> int:
        return shape.index(self.batch_symbol)

    def history_length(self, caches: dict[str, Any]) -> int | None:
        """How many history slots `caches` have (None for a program with state caches only)."""
        for name, (shape, _) in self.caches.items():
            if HISTORY in shape:
                return int(caches[name].shape[shape.index(HISTORY)])
        return None

    def pad_history(self, caches: dict[str, Any], length: int) -> dict[str, Any]:
        """`caches` with every history cache padded with zero slots to `length` (state caches
        as they are)."""
        out = {}
        for name, value in caches.items():
            shape = self.caches[name][0]
            if HISTORY not in shape:
                out[name] = value
                continue
            axis = shape.index(HISTORY)
            widths = [(0, 0)] * len(shape)
            widths[axis] = (0, length - int(value.shape[axis]))
            out[name] = np.pad(np.asarray(value), widths)
        return out

    def zero_caches(self, rows: int, length: int) -> dict[str, np.ndarray]:
        """The caches before the first token: zeros, `rows` sequences, `length` history slots."""
        out = {}
        for name, (shape, dtype) in self.caches.items():
            dims = [
                rows if d == self.batch_symbol else length if d == HISTORY else d for d in shape
            ]
            out[name] = np.zeros(dims, np.dtype(dtype))
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "token_input": self.token_input,
            "caches": {k: [list(shape), dtype] for k, (shape, dtype) in self.caches.items()},
            "batch_symbol": self.batch_symbol,
            "encoder_inputs": self.encoder_inputs,
            "encoder_outputs": self.encoder_outputs,
            "step_inputs": self.step_inputs,
            "output": self.output,
            "score_input": self.score_input,
            "score_field": self.score_field,
            "encoder_only": self.encoder_only,
            "sequence_inputs": self.sequence_inputs,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepSignature:
        return cls(
            token_input=data["token_input"],
            caches={k: (list(v[0]), str(v[1])) for k, v in data["caches"].items()},
            batch_symbol=data["batch_symbol"],
            encoder_inputs=dict(data["encoder_inputs"]),
            encoder_outputs={k: list(v) for k, v in data["encoder_outputs"].items()},
            step_inputs=list(data["step_inputs"]),
            output=str(data.get("output", "logits")),  # manifests from before scoring exports
            score_input=data.get("score_input"),
            score_field=data.get("score_field"),
            encoder_only=bool(data.get("encoder_only", False)),  # manifests from before CTC
            sequence_inputs=dict(data.get("sequence_inputs", {})),  # before sentence scorers
        )


LONG_BUCKET = 1024
"""Past this length (audio samples), buckets are this wide: 64 ms of 16 kHz audio."""


def bucketed(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The encoder's inputs with their length axis (axis 1) padded with zeros (ids 0, masks
    False, silence) up to a bucket. Why: a compiled step (JAX's jit, TF's `jit_compile`)
    compiles one program per shape, and the memory it reads is as long as the source, so one
    source length per compilation would make decoding a test set mostly compiling. The masks
    make padding neutral (the encoder's outputs at real positions, and what the decoder
    attends to, do not change); the memory the step reads is then as long as the bucket, with
    its mask."""
    out = {}
    for name, value in feeds.items():
        v = np.asarray(value)
        if v.ndim >= 2:
            n = v.shape[1]
            target = buffer_length(n, DECODE_BUCKET if n <= LONG_BUCKET else LONG_BUCKET)
            if target != n:
                widths = [(0, 0)] * v.ndim
                widths[1] = (0, target - n)
                v = np.pad(v, widths)
        out[name] = v
    return out
