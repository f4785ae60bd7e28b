"""Which batch field feeds which forward input, and which fields are a task's labels.

The data layer names its fields once (`seqc.data.batch`), and a model's forward names its inputs;
this table is the only place the two meet. It is the compiler's: every backend, the decoders and
the exporters read a compiled task's `fields` rather than matching names themselves.
"""

from __future__ import annotations

from typing import Literal

from seqc.compiler.graph import Graph
from seqc.spec.errors import CheckError

TaskKind = Literal["lm", "seq2seq", "asr"]

# Which batch field feeds a forward input of a given name (see seqc.data.batch).
INPUT_FIELDS = {
    "ids": "inputs",
    "inputs": "inputs",
    "tokens": "inputs",
    "x": "inputs",
    "src": "src",
    "source": "src",
    "src_mask": "src_mask",
    "source_mask": "src_mask",
    "tgt": "tgt_in",
    "target": "tgt_in",
    "tgt_in": "tgt_in",
    "tgt_mask": "tgt_mask",
    "target_mask": "tgt_mask",
    "mask": "mask",
    "audio": "audio",
    "audio_mask": "audio_mask",
}
LABELS: dict[str, tuple[str, str]] = {
    "lm": ("targets", "mask"),
    "seq2seq": ("tgt_out", "tgt_mask"),
    "asr": ("tgt_out", "tgt_mask"),
}
"""The (labels, mask) batch fields of each task kind: what an attention decoder predicts."""
CTC_LABELS = ("labels", "label_mask")
"""The fields a CTC criterion reads: the transcript's tokens, without bos or eos."""


def input_fields(graph: Graph) -> dict[str, str]:
    """Forward input name -> batch field; an unknown name is an error at the forward's span."""
    out = {}
    for name, vid in graph.inputs.items():
        if name not in INPUT_FIELDS:
            raise CheckError(
                f"forward input `{name}` does not name a field the data provides",
                span=graph.ops[vid].span,
                code="unknown-input",
                expected=", ".join(sorted(INPUT_FIELDS)),
                hint="language models take `ids`; encoder-decoders take `src`, `src_mask`, "
                "`tgt`; speech models take `audio`, `audio_mask` (and `tgt`)",
            )
        out[name] = INPUT_FIELDS[name]
    return out


def task_kind(fields: dict[str, str]) -> TaskKind:
    """A model that reads audio recognises speech; one that reads a source is an
    encoder-decoder; any other predicts its own input."""
    if "audio" in fields.values():
        return "asr"
    return "seq2seq" if "src" in fields.values() else "lm"


DECODE_BUCKET = 16
"""Decode buffers round up to a multiple of this: one compiled program per bucket, not per
prompt length."""


def buffer_length(n: int, multiple: int = DECODE_BUCKET) -> int:
    return -(-n // multiple) * multiple
