"""One split as batches are cut from it: its encoded arrays on disk, its plan, its batches.

A split's ids live in the encoded store (`seqc.data.shards`), memory-mapped: what a batch
needs is sliced from the maps when the batch is made, so memory does not grow with the corpus.
The sequences batches are made of, per task:

- language model, one line per sequence: inputs bos + line, targets line + eos;
- language model, packed: the stream bos + line 1 + eos + line 2 + eos + ..., cut into
  windows; chunk k's inputs are the stream's [k*w, k*w + w), its targets the same shifted by
  one. The store keeps each line followed by its eos, so the stream is bos + the store's array
  and a chunk is one slice of it;
- sequence to sequence: source + eos; decoder input bos + target; decoder target target + eos;
- speech: the transcript's tokens (CTC's labels), bos + them, them + eos; the audio is read
  from its wav per batch.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from seqc.data.audio import read_wav, to_float
from seqc.data.augment import Augmenter
from seqc.data.batch import Batch, TaskKind
from seqc.data.bucketing import Bucket, BucketBatcher, pad
from seqc.data.errors import DataError
from seqc.data.readers import BaseDirs, Example, iter_examples, read_examples
from seqc.data.report import DropReport
from seqc.data.row_records import RecordField, RecordStream, RowRecords
from seqc.data.shards.layout import EncodedSplit
from seqc.resolve.values import CallValue


@dataclass(frozen=True)
class Framing:
    """The ids a batch needs besides the store's: bos, and the pads of each side."""

    bos: int
    pad: int
    target_pad: int


@dataclass
class SplitData:
    """One split: its encoded arrays, its batch planner and what it dropped."""

    name: str
    task: TaskKind
    store: EncodedSplit
    reader: CallValue
    base_dir: BaseDirs | None
    framing: Framing
    window: int = 0
    """Packed LM: tokens per chunk; 0 for one example per sequence."""
    audio: list[Example] | None = None
    """Speech: the manifest's utterances (wav paths and headers; the audio stays on disk)."""
    label_length: int = 0
    """Speech: L, the padded length of every token array of this split's batches."""
    drops: DropReport = field(default_factory=DropReport)
    batcher: BucketBatcher | None = None
    augment: Augmenter | None = None
    """Speech, train split: the input's augmentations (`seqc.data.augment`), applied to the
    batches of a training step (`materialise(..., step=)`)."""

    # ------------------------------------------------------------------ what it holds

    @property
    def side(self) -> str:
        """The store's side a language model or a transcript reads."""
        return "target" if self.task == "asr" else "source"

    def lengths(self) -> np.ndarray:
        """Per sequence, the length bucketing goes by (tokens, or samples for speech)."""
        if self.task == "asr":
            assert self.audio is not None
            return np.fromiter(
                (e.audio.frames if e.audio else 0 for e in self.audio), np.int64, len(self.audio)
            )
        if self.task == "seq2seq":
            return np.maximum(self.store.lengths("source"), self.store.lengths("target"))
        if self.window:
            total, n = len(self.store.tokens["source"]), self._sequences()
            out = np.full(n, self.window, np.int64)
            if n:
                out[-1] = total - (n - 1) * self.window
            return out
        return self.store.lengths("source")

    def _sequences(self) -> int:
        """Sequences batches are made of, before drops: examples, or packed windows."""
        if self.window:
            return math.ceil(len(self.store.tokens["source"]) / self.window)
        return self.store.examples

    def location(self, i: int) -> str:
        """`file:line` of sequence i (a packed chunk: of the line it starts in)."""
        if self.window:
            starts = 1 + np.asarray(self.store.offsets["source"][:-1])
            i = max(0, int(np.searchsorted(starts, i * self.window, side="right")) - 1)
        return self.store.location(i)

    @property
    def size(self) -> int:
        """Sequences that batches are made of (after packing, after drops)."""
        assert self.batcher is not None
        return self.batcher.num_examples

    @property
    def texts(self) -> int:
        """Examples read (lines, pairs or utterances), before packing and drops."""
        return self.store.examples

    @cached_property
    def examples(self) -> list[Example]:
        """What was read, in file order: read again from the files when asked (references
        for scoring dev and test); a speech split keeps its manifest's utterances."""
        if self.audio is not None:
            return self.audio
        return read_examples(self.reader, self.base_dir)

    def first_example(self) -> Example:
        """The split's first example, read alone (a default prompt needs no more; `examples`
        would read the whole split)."""
        if self.audio is not None:
            return self.audio[0]
        return next(iter_examples(self.reader, self.base_dir))

    @property
    def audio_seconds(self) -> float:
        """Speech: seconds of audio read (before drops); 0 for text."""
        return sum(e.audio.duration for e in self.audio or () if e.audio is not None)

    def target_tokens(self) -> np.ndarray:
        """Every target id of the split (each line's or target's ids and eos), memory-mapped."""
        return self.store.tokens["target" if self.task == "seq2seq" else self.side]

    def row_records(self) -> RowRecords:
        """The split's sequences as records a worker makes batches from (see
        `seqc.data.row_records`)."""
        f = self.framing
        if self.task == "asr":
            return self._speech_records()
        if self.task == "lm":

            def lm_lengths() -> np.ndarray:
                return self.lengths() + 1  # the token before the targets, and the targets

            def lm() -> Iterator[np.ndarray]:
                for i in range(self._sequences()):
                    inputs, targets = self._lm(i)
                    yield np.concatenate([inputs[:1], targets])

            streams = {"lm": RecordStream(lm_lengths, lm)}
            fields = {
                "inputs": RecordField("lm", "drop_last", f.pad),
                "targets": RecordField("lm", "drop_first", f.pad, mask="mask"),
            }
            key = f"lm-w{self.window}-b{f.bos}"
        else:
            store = self.store

            def source() -> Iterator[np.ndarray]:
                for i in range(store.examples):
                    yield store.ids("source", i)

            streams = {
                "source": RecordStream(lambda: store.lengths("source"), source),
                "target": self._target_records(),
            }
            fields = {
                "src": RecordField("source", "whole", f.pad, mask="src_mask"),
                "tgt_in": RecordField("target", "drop_last", f.target_pad),
                "tgt_out": RecordField("target", "drop_first", f.target_pad, mask="tgt_mask"),
            }
            key = f"seq2seq-b{f.bos}"
        return RowRecords(self.store.folder, key, streams, fields)

    def _speech_records(self) -> RowRecords:
        """Speech's records: each utterance's wav path, and bos + its transcript + eos."""
        assert self.audio is not None
        f, width, audio = self.framing, self.label_length, self.audio

        @functools.cache
        def paths() -> list[bytes]:  # resolved once, for the lengths and the records
            return [_wav_path(e) for e in audio]

        def wavs() -> Iterator[np.ndarray]:
            for path in paths():
                yield np.frombuffer(path, np.uint8)

        streams = {
            "wav": RecordStream(lambda: np.asarray([len(p) for p in paths()]), wavs, "wav"),
            "target": self._target_records(),
        }
        fields = {
            "audio": RecordField("wav", "whole", 0, mask="audio_mask"),
            "tgt_in": RecordField("target", "drop_last", f.pad, width=width),
            "tgt_out": RecordField("target", "drop_first", f.pad, mask="tgt_mask", width=width),
            "labels": RecordField("target", "inner", f.pad, mask="label_mask", width=width),
        }
        return RowRecords(self.store.folder, f"asr-b{f.bos}", streams, fields)

    def _target_records(self) -> RecordStream:
        """The target side as records: bos and the ids with eos (a decoder's input and its
        targets, one id apart)."""
        store, bos = self.store, self.framing.bos

        def target() -> Iterator[np.ndarray]:
            for i in range(store.examples):
                yield _with_bos(bos, store.ids("target", i))

        return RecordStream(lambda: store.lengths("target") + 1, target)

    # ------------------------------------------------------------------ batches

    def materialise(
        self,
        bucket: Bucket,
        indices: tuple[int, ...],
        local: tuple[int, int] | None = None,
        step: int | None = None,
    ) -> Batch:
        """The batch of these sequences, padded to the bucket's shape. With `local` (rows
        [lo, hi): what this process's devices take of the batch), only those rows' ids are
        read from disk (and, for speech, their wavs); every row keeps its masks, from the
        lengths, and the other rows' ids are zeros that no device of this process reads.
        `step`: the training step the batch is for, which seeds its augmentation (speech)."""
        rows, length = bucket.batch_size, bucket.bound
        f = self.framing
        mine = _reads(len(indices), local)
        if self.task == "asr":
            return self._speech(bucket, indices, mine, step)
        if self.task == "lm":
            pairs = [
                self._lm(i) if r else self._lm_lengths(i)
                for i, r in zip(indices, mine, strict=True)
            ]
            inputs, _ = pad([p[0] for p in pairs], rows, length, f.pad)
            targets, mask = pad([p[1] for p in pairs], rows, length, f.pad)
            arrays = {"inputs": inputs, "targets": targets, "mask": mask}
            return Batch(self.task, arrays, length, len(indices), indices)
        srcs = [self._side("source", i, r) for i, r in zip(indices, mine, strict=True)]
        tgts = [self._side("target", i, r) for i, r in zip(indices, mine, strict=True)]
        src, src_mask = pad(srcs, rows, length, f.pad)
        tgt_in, _ = pad([_after_bos(f.bos, t) for t in tgts], rows, length, f.target_pad)
        tgt_out, tgt_mask = pad(tgts, rows, length, f.target_pad)
        arrays = {
            "src": src,
            "src_mask": src_mask,
            "tgt_in": tgt_in,
            "tgt_out": tgt_out,
            "tgt_mask": tgt_mask,
        }
        return Batch(self.task, arrays, length, len(indices), indices)

    def _side(self, side: str, i: int, read: bool) -> np.ndarray:
        """Example i's ids on one side, or zeros as many (its offsets alone read)."""
        if read:
            return self.store.ids(side, i)
        off = self.store.offsets[side]
        return np.zeros(int(off[i + 1]) - int(off[i]), np.int32)

    def _lm_lengths(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """A language model's sequence i as zeros of its length (another process's row)."""
        if self.window:
            total = len(self.store.tokens["source"])
            n = min(self.window, total - i * self.window)
        else:
            off = self.store.offsets["source"]
            n = int(off[i + 1]) - int(off[i])
        zeros = np.zeros(n, np.int32)
        return zeros, zeros

    def _lm(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """A language model's sequence i: (inputs, targets)."""
        flat = self.store.tokens["source"]
        if not self.window:
            ids = self.store.ids("source", i)
            return _after_bos(self.framing.bos, ids), ids
        lo = i * self.window  # the stream is bos + flat: stream[p] = flat[p - 1]
        targets = flat[lo : lo + self.window]
        if lo == 0:
            return _after_bos(self.framing.bos, targets), targets
        return flat[lo - 1 : lo - 1 + len(targets)], targets

    def _speech(
        self, bucket: Bucket, indices: tuple[int, ...], mine: list[bool], step: int | None
    ) -> Batch:
        rows, length = bucket.batch_size, bucket.bound
        assert self.audio is not None
        audio = np.zeros((rows, length), np.float32)
        audio_mask = np.zeros((rows, length), bool)
        augment = self.augment if step is not None else None
        for r, i in enumerate(indices):
            example = self.audio[i]
            clip = example.audio
            assert clip is not None
            if not mine[r]:  # another process's row: its mask, from the wav's header
                n = clip.frames if augment is None else augment.length(step, i, clip.frames, length)
                audio_mask[r, :n] = True
                continue
            samples = read_wav(clip.path, clip.sample_rate, location=example.location)
            if len(samples) != clip.frames:
                raise DataError(
                    f"{example.source} changed while the pipeline was running",
                    code="bad-audio",
                    path=example.location,
                    expected=f"{clip.frames} samples, as when the manifest was read",
                    found=f"{len(samples)} samples",
                    hint="do not rewrite a corpus while a run reads it",
                )
            wave = to_float(samples)
            if augment is not None:
                wave = augment(wave, step, i, length)
            audio[r, : len(wave)] = wave
            audio_mask[r, : len(wave)] = True
        f, label_length = self.framing, self.label_length
        with_eos = [self._side("target", i, r) for i, r in zip(indices, mine, strict=True)]
        labels, label_mask = pad([t[:-1] for t in with_eos], rows, label_length, f.pad)
        tgt_in, _ = pad([_after_bos(f.bos, t) for t in with_eos], rows, label_length, f.pad)
        tgt_out, tgt_mask = pad(with_eos, rows, label_length, f.pad)
        arrays = {
            "audio": audio,
            "audio_mask": audio_mask,
            "tgt_in": tgt_in,
            "tgt_out": tgt_out,
            "tgt_mask": tgt_mask,
            "labels": labels,
            "label_mask": label_mask,
        }
        return Batch(self.task, arrays, length, len(indices), indices)


def _after_bos(bos: int, with_eos: np.ndarray) -> np.ndarray:
    """bos + the ids without their last (eos): a decoder's or an LM's inputs."""
    out = np.empty(len(with_eos), np.int32)
    if len(out):
        out[0] = bos
        out[1:] = with_eos[:-1]
    return out


def _wav_path(example: Example) -> bytes:
    """An utterance's wav file, absolute: a worker reads it from its own working directory."""
    assert example.audio is not None
    return os.fsencode(Path(example.audio.path).resolve())


def _with_bos(bos: int, ids: np.ndarray) -> np.ndarray:
    """bos + the ids: a decoder's input followed by its last target."""
    out = np.empty(len(ids) + 1, np.int32)
    out[0] = bos
    out[1:] = ids
    return out


def _reads(count: int, local: tuple[int, int] | None) -> list[bool]:
    """Per real row of a batch: whether this process reads its ids."""
    if local is None:
        return [True] * count
    lo, hi = local
    return [lo <= r < hi for r in range(count)]
