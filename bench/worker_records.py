"""The records an asynchronous TF run's workers read their batches from: writing them, reading a
batch from them.

Why: a parameter-server worker makes its steps' batches itself, from a TFRecord file of the
split's sequences written once per cache beside the encoded split (`seqc/backends/tf/
records.py`). The write is a one-off cost before the first step, the read is per step on every
worker; both should stay small beside what they replace (the chief reading and shipping every
batch). Figures in docs/results.md, "Data at scale".

The corpus is the prepared Shakespeare training text (`seqc data prepare shakespeare`) repeated
to `--mb` MB (whole lines) in `--work`, with the `chars` tokenizer and buckets {64: 32, 128: 16};
it is encoded once (not timed), then, for packed windows and for one line per sequence, the
records are written afresh (timed) and `--batches` training batches are read through the ops a
worker runs (`WorkerRecords.assemble` in a `tf.function`, as a worker's step traces it; the
median time, so the one trace per bucket is left out) and checked against the chief's own
batch. The last lines are `name: value` pairs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / ".cache" / "data" / "shakespeare" / "train.txt"


def corpus(work: Path, mb: int) -> Path:
    """`work/train.txt`: the Shakespeare training text repeated to `mb` MB, whole lines."""
    work.mkdir(parents=True, exist_ok=True)
    out = work / "train.txt"
    if not out.exists() or abs(out.stat().st_size - (mb << 20)) > (1 << 20):
        text = SOURCE.read_text(encoding="utf-8")
        reps = max(1, -(-(mb << 20) // len(text.encode())))
        out.write_text(text * reps, encoding="utf-8")
    return out


def measure(work: Path, pack: bool, batches: int) -> dict[str, float]:
    import tensorflow as tf

    from seqc.backends.tf.records import WorkerRecords
    from seqc.data.calls import make_call
    from seqc.data.pipeline import InputPipeline

    config = {
        "name": "bench",
        "train": make_call("reader", "text", "train.txt"),
        "tokenizer": make_call("tokenizer", "chars"),
        "buckets": {64: 32, 128: 16},
    }
    pipe = InputPipeline(config, base_dir=work, cache_dir=work / "cache", pack=pack)
    records = pipe.row_records("train")
    for old in records.folder.glob("records-*"):
        old.unlink()
    start = time.perf_counter()
    worker = WorkerRecords(records)
    write_s = time.perf_counter() - start
    count = len(next(iter(worker.offsets.values()))) - 1
    size = sum(Path(p).stat().st_size for p in worker.paths.values())
    split = pipe.splits["train"]
    batcher = split.batcher
    assert batcher is not None
    steps = np.random.default_rng(0).integers(0, 50 * batcher.steps_per_epoch, batches)
    assemble = tf.function(worker.assemble, autograph=False)
    times = []
    for step in steps:
        plan = batcher.plan_for_step(int(step))
        reads = worker.reads(plan.indices, plan.bucket.batch_size)
        start = time.perf_counter()
        got = assemble(reads, plan.bucket.bound)
        times.append(time.perf_counter() - start)
        want = split.materialise(plan.bucket, plan.indices)
        for name, value in want.arrays.items():
            np.testing.assert_array_equal(got[name].numpy(), value, err_msg=name)
    return {
        "records": count,
        "write_s": write_s,
        "write_us_per_record": 1e6 * write_s / count,
        "mb": size / 2**20,
        "batch_read_ms": 1e3 * float(np.median(times)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100, help="MB of training text")
    parser.add_argument("--batches", type=int, default=50, help="batches read per layout")
    parser.add_argument("--work", type=Path, default=ROOT / ".cache" / "bench-worker-records")
    args = parser.parse_args(argv)
    if not SOURCE.is_file():
        print(f"{SOURCE} is missing: run `seqc data prepare shakespeare` first", file=sys.stderr)
        return 2
    corpus(args.work, args.mb)
    rows = {"packed": measure(args.work, True, args.batches)}
    rows["lines"] = measure(args.work, False, args.batches)
    for name, row in rows.items():
        print(
            f"{name}: {row['records']:,} records, {row['mb']:.0f} MB written in "
            f"{row['write_s']:.1f} s; a batch read in {row['batch_read_ms']:.2f} ms"
        )
    for name, row in rows.items():
        print(f"records_write_us_per_record_{name}: {row['write_us_per_record']:.2f}")
        print(f"records_batch_read_ms_{name}: {row['batch_read_ms']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
