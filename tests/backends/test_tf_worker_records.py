"""A parameter-server worker's batches, made by TF's ops from the split's records on disk, are
the arrays the chief's pipeline makes: every field, mask and padding row, for packed and
line-per-example language models, sequence to sequence and speech (its wavs read there)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
from wavs import utterances

from seqc.backends.tf.records import WorkerRecords, unreadable
from seqc.data.calls import make_call
from seqc.data.pipeline import InputPipeline

WORDS = [
    "the",
    "a",
    "of",
    "to",
    "and",
    "in",
    "is",
    "it",
    "that",
    "was",
    "he",
    "for",
    "on",
    "are",
    "with",
    "as",
    "his",
    "they",
    "be",
    "at",
    "one",
]


def _lines(n: int, seed: int, upper: bool = False) -> list[str]:
    rng = random.Random(seed)
    out = [" ".join(rng.choices(WORDS, k=rng.randint(1, 12))) for _ in range(n)]
    return [s.upper() for s in out] if upper else out


def _config(tmp_path: Path, kind: str) -> dict[str, Any]:
    if kind == "asr":
        utterances(tmp_path, "train.jsonl", [0.3, 0.45, 0.8, 0.2, 1.9, 0.6, 0.5, 1.2], seed=1)
        train = make_call("reader", "audio_manifest", "train.jsonl")
        return {"name": "s", "train": train, "tokenizer": make_call("tokenizer", "chars"),
                "buckets": {0.5: 4, 1.0: 2, 2.0: 2}, "shuffle_buffer": 16}  # fmt: skip
    if kind == "seq2seq":
        rows = [f"{s}\t{t}" for s, t in zip(_lines(150, 2), _lines(150, 3, True), strict=True)]
        (tmp_path / "train.tsv").write_text("\n".join(rows) + "\n")
        train = make_call("reader", "tsv", "train.tsv")
        return {"name": "p", "train": train, "tokenizer": make_call("tokenizer", "words"),
                "buckets": {6: 8, 12: 4}}  # fmt: skip
    (tmp_path / "train.txt").write_text("\n".join(_lines(200, 0)) + "\n")
    return {"name": "t", "train": make_call("reader", "text", "train.txt"),
            "tokenizer": make_call("tokenizer", "chars"), "buckets": {8: 4, 16: 2},
            "shuffle_buffer": 64}  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "pack"),
    [("lm", None), ("lm", False), ("seq2seq", None), ("asr", None)],
    ids=["lm-packed", "lm-lines", "seq2seq", "speech"],
)
def test_a_worker_makes_the_chiefs_batches_from_the_records(
    tmp_path: Path, kind: str, pack: bool | None
) -> None:
    pipe = InputPipeline(_config(tmp_path, kind), base_dir=tmp_path, cache_dir=tmp_path / "c",
                         pack=pack)  # fmt: skip
    split = pipe.splits["train"]
    batcher = split.batcher
    assert batcher is not None
    records = pipe.row_records("train")
    assert records is not None
    worker = WorkerRecords(records)
    files = sorted(records.folder.glob("records-*.tfrecord"))
    assert len(files) == len(records.streams)
    assemble = tf.function(worker.assemble, autograph=False)  # as the worker's step traces it
    for step in range(pipe.steps_per_epoch() + 2):  # into the second epoch
        plan = batcher.plan_for_step(step)
        want = split.materialise(plan.bucket, plan.indices)
        reads = worker.reads(plan.indices, plan.bucket.batch_size)
        got = assemble(reads, plan.bucket.bound)
        assert set(got) == set(want.arrays)
        for name, value in want.arrays.items():
            assert got[name].dtype.as_numpy_dtype == value.dtype, name
            np.testing.assert_array_equal(got[name].numpy(), value, err_msg=f"{step} {name}")
    # The last batch of a bucket in an epoch: rows past its examples are all padding.
    plan = batcher.plan_for_step(0)
    rows, few = plan.bucket.batch_size, plan.indices[:1]
    want = split.materialise(plan.bucket, few)
    got = assemble(worker.reads(few, rows), plan.bucket.bound)
    for name, value in want.arrays.items():
        np.testing.assert_array_equal(got[name].numpy(), value, err_msg=name)

    # A second run finds the files; one cut short is written again.
    stamps = [f.stat().st_mtime_ns for f in files]
    WorkerRecords(records)
    assert [f.stat().st_mtime_ns for f in files] == stamps
    files[0].write_bytes(files[0].read_bytes()[:-3])
    again = WorkerRecords(records)
    plan = batcher.plan_for_step(0)
    got = again.assemble(again.reads(plan.indices, plan.bucket.batch_size), plan.bucket.bound)
    want = split.materialise(plan.bucket, plan.indices)
    for name, value in want.arrays.items():
        np.testing.assert_array_equal(got[name].numpy(), value, err_msg=name)


def test_a_worker_that_cannot_read_the_records_says_where_they_must_be(tmp_path: Path) -> None:
    pipe = InputPipeline(_config(tmp_path, "lm"), base_dir=tmp_path, cache_dir=tmp_path / "c")
    records = pipe.row_records("train")
    assert records is not None
    worker = WorkerRecords(records)
    for path in records.folder.glob("records-*.tfrecord"):
        path.unlink()
    with pytest.raises(tf.errors.NotFoundError) as caught:
        worker.assemble(worker.reads((0, 1), 4), 16)
    error = unreadable(caught.value)
    assert error is not None and error.code == "workers-cannot-read"
    assert "records-" in (error.found or "") and "--cache-dir" in (error.hint or "")
    assert unreadable(tf.errors.NotFoundError(None, None, "some other file")) is None
