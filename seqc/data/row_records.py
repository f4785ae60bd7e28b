"""A split's sequences as one record each, for processes that make their own batches from disk.

A parameter-server worker runs the steps the chief schedules and holds no seqc pipeline: what
it can read is what TensorFlow's ops read (`seqc.backends.tf.records`). So a split describes its
batches to it as records: per stream, each sequence's ids in one record, and per batch field,
which stream it is cut from and how. The chief then sends a step only where its rows' records
are; the worker reads them and pads them into the very arrays `SplitData.materialise` makes.

Each record is the sequence with the token before it, so that a field is the record with its
first or its last token left out:

- language model (a line, or a packed window): the token before the targets (bos, or the
  stream's previous token for a window that is not the first) and the targets. `inputs` is the
  record less its last token, `targets` less its first; `mask` is True on `targets`' ids;
- sequence to sequence: `source` is the source ids with eos (`src`, `src_mask`), `target` is
  bos and the target ids with eos (`tgt_in` less the last, `tgt_out` and `tgt_mask` less the
  first);
- speech: `target` as for sequence to sequence, and `labels` less both ends (CTC's: the
  transcript alone), all padded to the split's label length; `wav` holds each utterance's wav
  file by its absolute path (a record of bytes), which the worker reads and pads into `audio`
  and `audio_mask` (16-bit PCM mono at the reader's rate: the manifest's check made sure).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

Cut = Literal["whole", "drop_last", "drop_first", "inner"]
"""What a field keeps of its record: all of it, all but the last id, all but the first, all but
both."""


@dataclass(frozen=True)
class RecordStream:
    """One record per sequence of a split, in sequence order (`seqc.data.split_data`)."""

    lengths: Callable[[], np.ndarray]
    """Items per record (int64: ids, or a path's bytes), computed when asked (8 bytes a
    sequence)."""
    records: Callable[[], Iterator[np.ndarray]]
    """Each record's int32 ids (or, for `wav`, its path's uint8 bytes), in order."""
    kind: Literal["ids", "wav"] = "ids"


@dataclass(frozen=True)
class RecordField:
    """A batch field as its stream's records, cut, padded with `pad`; `mask`, if named, is the
    bool field that is True on the cut's ids."""

    stream: str
    cut: Cut
    pad: int
    mask: str | None = None
    width: int = 0
    """Padded length; 0 for the bucket's bound (speech's token fields have the split's)."""


@dataclass(frozen=True)
class RowRecords:
    """A split's training sequences as records, and how its batch fields are cut from them."""

    folder: Path
    """Where files derived from the split may be kept (the encoded split's own folder)."""
    key: str
    """Names the records' recipe: files written for another recipe are not these."""
    streams: Mapping[str, RecordStream]
    fields: Mapping[str, RecordField]
