"""The unit the data layer hands to a training or evaluation step.

A `Batch` is a dict of numpy arrays plus where it came from. Arrays only (no Python objects)
so a backend can pass `batch.arrays` straight to a jitted function; every array of a batch has
the same [rows, bucket bound] shape, fixed per bucket, so a step compiles once per bucket.

Fields, by task:

- language modelling: `inputs` int32 [B, T] (bos + tokens), `targets` int32 [B, T] (tokens +
  eos), `mask` bool [B, T] (True on real target positions);
- sequence to sequence: `src` int32 [B, S] (source tokens + eos), `src_mask` bool [B, S],
  `tgt_in` int32 [B, T] (bos + target tokens, the decoder's input), `tgt_out` int32 [B, T]
  (target tokens + eos, what the decoder predicts), `tgt_mask` bool [B, T];
- speech recognition (an audio reader): `audio` float32 [B, N] (samples in [-1, 1), zero after
  each utterance's end), `audio_mask` bool [B, N] (True on real samples), the decoder's
  `tgt_in` / `tgt_out` / `tgt_mask` [B, L] as for sequence to sequence, and `labels` int32
  [B, L] (the transcript's tokens only, no bos or eos: what CTC predicts) with `label_mask`
  bool [B, L]. N is the bucket's bound in samples; L is fixed per split (a multiple of 8 at
  least the longest transcript + 1 of the train split, and of this split), so a jitted step
  compiles once per bucket. Pad id 0 doubles as CTC's blank: no token has id 0.

Padding positions hold the pad id (0) and are False in the masks; rows past `num_examples`
(the tail of a bucket's last batch in an epoch) are entirely padding.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

import numpy as np

LM_FIELDS: Final[tuple[str, ...]] = ("inputs", "targets", "mask")
SEQ2SEQ_FIELDS: Final[tuple[str, ...]] = ("src", "src_mask", "tgt_in", "tgt_out", "tgt_mask")
ASR_FIELDS: Final[tuple[str, ...]] = (
    "audio",
    "audio_mask",
    "tgt_in",
    "tgt_out",
    "tgt_mask",
    "labels",
    "label_mask",
)

TaskKind = Literal["lm", "seq2seq", "asr"]


@dataclass(frozen=True, eq=False)  # arrays do not compare to one bool
class Batch(Mapping[str, np.ndarray]):
    """Arrays of one batch; read like a dict (`batch["inputs"]`)."""

    task: TaskKind
    arrays: dict[str, np.ndarray]
    bucket: int
    """The bucket's length bound: the T (and S) of every array; for speech, the N of `audio`
    in samples (its token arrays have the split's fixed L)."""
    num_examples: int
    """Real rows; rows from here on are padding."""
    indices: tuple[int, ...] = field(default=())
    """Positions of the examples in their split, to trace a batch back to file:line."""

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.arrays)

    def __len__(self) -> int:
        return len(self.arrays)

    @property
    def rows(self) -> int:
        return int(next(iter(self.arrays.values())).shape[0])

    @property
    def target_mask(self) -> np.ndarray:
        return self.arrays["mask" if self.task == "lm" else "tgt_mask"]

    @property
    def num_tokens(self) -> int:
        """Real target tokens (with eos, as the decoder predicts them): the denominator of a
        per-token loss. For speech, `label_mask` counts CTC's labels (no eos)."""
        return int(self.target_mask.sum())
