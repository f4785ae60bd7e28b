"""A parameter-server worker's batches, made on the worker from records on disk.

A worker is a plain `tf.distribute.Server`: it runs the ops the chief sends and no seqc code,
so what it reads must be read by TensorFlow's ops. The split's arrays are flat (one slice per
batch row, `seqc.data.shards.layout`), but TF has no op that reads a byte range of a file:
`FixedLengthRecordDataset` reads its way to an offset (about 30 ms at 300 MB, per row), while
a TFRecord dataset seeks to a byte offset. So each stream of the split's training sequences
(`seqc.data.row_records`) is written once as a TFRecord file, one record per sequence, beside
the encoded split; each record's byte offset follows from the lengths (`FRAME` bytes of
TFRecord's own around each record's data), so no index is kept. A step then carries
its rows' byte offsets (8 bytes a row), and the worker reads those records, decodes them and
cuts and pads the batch fields, the very arrays `SplitData.materialise` makes on the chief
(`tests/backends/test_tf_worker_records.py` holds them to it, and
`test_one_step_in_flight_is_the_sync_run_and_resumes_exactly` the steps). A speech split's
records name its wavs, which the worker reads with `tf.audio.decode_wav`.

The files must be where every worker reads them under the same path: on one machine they are;
across machines, the cache (`--cache-dir`) goes on storage they share. A worker that cannot
read them fails its step with TF's `NotFoundError`, which `unreadable` turns into an error that
says so.

Writing: ~5 µs a record (TF's `TFRecordWriter`, fed from the memory maps): 100 MB of
Shakespeare, 3.1 M lines, took 16 s and 459 MB (as much again as its encoded ids), 0.8 M packed
windows 4 s; reading a batch on a worker takes ~3 ms (`bench/worker_records.py`). Written once
per cache, into a temporary file renamed into place, so a crash leaves no half of one; a file
whose size is not its last offset is written again.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import numpy as np
import tensorflow as tf

from seqc.backends.api import RowRecords
from seqc.spec.errors import FileError

FRAME = 16
"""TFRecord's bytes around each record's data: length (8), its CRC (4), the data's CRC (4)."""
READ_BUFFER = 1 << 12
"""Bytes read ahead at an offset: a record or a few, not the 256 KB a sequential read wants."""
_STRING = tf.TensorSpec([], tf.string)


class WorkerRecords:
    """The records of a split's training sequences, written if need be, and the ops that make
    a batch from them on a worker."""

    def __init__(self, records: RowRecords) -> None:
        self.fields = dict(records.fields)
        self.made = set(self.fields) | {f.mask for f in self.fields.values() if f.mask}
        """The batch arrays `assemble` makes (the fields and their masks)."""
        self.paths: dict[str, str] = {}
        self.kinds: dict[str, str] = {}
        self.offsets: dict[str, np.ndarray] = {}
        for name, stream in records.streams.items():
            path = Path(records.folder) / f"records-{records.key}-{name}.tfrecord"
            unit = 4 if stream.kind == "ids" else 1
            self.offsets[name] = ensure(path, stream.lengths(), stream.records, unit)
            self.paths[name], self.kinds[name] = str(path), stream.kind

    def reads(self, indices: tuple[int, ...], rows: int) -> dict[str, tf.Tensor]:
        """Per stream, the byte offsets of a batch's rows (-1 for its padding rows)."""
        out = {}
        for name, offsets in self.offsets.items():
            at = np.full(rows, -1, np.int64)
            at[: len(indices)] = offsets[np.asarray(indices, np.int64)]
            out[name] = tf.constant(at)
        return out

    def assemble(self, reads: Mapping[str, tf.Tensor], bound: int) -> dict[str, tf.Tensor]:
        """The batch fields, [rows, bound] each (or a field's own width), from the records
        at these offsets (traced into the worker's step: runs where the step runs)."""
        values, sizes = {}, {}
        for name, at in reads.items():
            data = _read(self.paths[name], at)
            if self.kinds[name] == "wav":
                values[name], sizes[name] = _audio(data, bound)
            else:
                widths = [f.width or bound for f in self.fields.values() if f.stream == name]
                width = max(widths) + 1
                values[name] = tf.io.decode_raw(data, tf.int32, fixed_length=4 * width)
                sizes[name] = tf.strings.length(data) // 4
        out: dict[str, tf.Tensor] = {}
        for name, field in self.fields.items():
            rec, n = values[field.stream], sizes[field.stream]
            width = field.width or bound
            skip = 1 if field.cut in ("drop_first", "inner") else 0
            n = n - skip - (1 if field.cut in ("drop_last", "inner") else 0)
            real = tf.range(width, dtype=tf.int32)[None, :] < tf.maximum(n, 0)[:, None]
            cut = rec[:, skip : skip + width]
            out[name] = tf.where(real, cut, tf.constant(field.pad, cut.dtype))
            if field.mask is not None:
                out[field.mask] = real
        return out


def _read(path: str, at: tf.Tensor) -> tf.Tensor:
    """The records of `path` at byte offsets `at` [rows], as strings; "" where `at` is -1."""
    files = tf.constant([path])

    def one(offset: tf.Tensor) -> tf.data.Dataset:
        variant = tf.raw_ops.TFRecordDatasetV2(
            filenames=files,
            compression_type="",
            buffer_size=tf.constant(READ_BUFFER, tf.int64),
            byte_offsets=tf.reshape(tf.maximum(offset, 0), [1]),
        )
        return tf.data.experimental.from_variant(variant, _STRING).take(1)

    rows = tf.shape(at, out_type=tf.int64)[0]
    found = tf.data.Dataset.from_tensor_slices(at).flat_map(one).batch(rows)
    return tf.where(at >= 0, found.get_single_element(), "")


def _audio(paths: tf.Tensor, bound: int) -> tuple[tf.Tensor, tf.Tensor]:
    """float32 samples [rows, bound] in [-1, 1) of the wav files at `paths` (16-bit PCM mono,
    as `seqc.data.audio.to_float` makes them), zeros past each end, and samples per row; an
    empty path is a padding row."""

    def load(path: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        clip = tf.cond(
            tf.strings.length(path) > 0,
            lambda: tf.audio.decode_wav(tf.io.read_file(path), desired_channels=1).audio[:, 0],
            lambda: tf.zeros([0], tf.float32),
        )
        return clip, tf.size(clip)

    rows = tf.shape(paths, out_type=tf.int64)[0]
    clips = tf.data.Dataset.from_tensor_slices(paths).map(load)
    batch = clips.padded_batch(rows, padded_shapes=([bound], [])).get_single_element()
    return batch[0], tf.cast(batch[1], tf.int32)


def ensure(
    path: Path, lengths: np.ndarray, records: Callable[[], Iterator[np.ndarray]], unit: int = 4
) -> np.ndarray:
    """The byte offset of each record of `path` (and its end, last), writing the file first
    when it is missing or not the size its offsets say; a record is `lengths[i]` items of
    `unit` bytes."""
    lengths = np.asarray(lengths, np.int64)
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(FRAME + unit * lengths, out=offsets[1:])
    if path.is_file() and path.stat().st_size == offsets[-1]:
        return offsets
    part = path.with_name(f".{path.name}.{os.getpid()}.part")
    try:
        with tf.io.TFRecordWriter(str(part)) as writer:
            for i, items in enumerate(records()):
                data = np.ascontiguousarray(items).tobytes()
                if len(data) != unit * lengths[i]:
                    raise FileError(
                        f"record {i} of {path.name} has {len(data)} bytes, its split says "
                        f"{unit * int(lengths[i])}",
                        code="data-changed",
                        path=str(path.parent),
                        hint="delete the folder; the next run encodes the split again",
                    )
                writer.write(data)
        os.replace(part, path)
    finally:
        part.unlink(missing_ok=True)
    return offsets


def unreadable(error: BaseException) -> FileError | None:
    """A worker's failure to open a records file, said as what to do about it; None for any
    other error."""
    if not isinstance(error, tf.errors.NotFoundError) or "records-" not in str(error):
        return None
    lines = [line.strip() for line in str(error).splitlines() if "records-" in line]
    return FileError(
        "a parameter-server worker could not read the encoded training data",
        code="workers-cannot-read",
        found=lines[0][:300] if lines else None,
        hint="the workers read the cache under the chief's path: put --cache-dir on storage "
        "every worker's machine mounts at that path",
    )
