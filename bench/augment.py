"""What host-side augmentation costs a speech training step (issue 38: under 10%).

    python bench/augment.py            # about 10 minutes on 2 cores

A small spoken-numbers corpus (synthesised here, 240 training utterances) and the example's
`asr.numbers.ctc` (the recipe's Conformer-CTC) with and without
`augment = [speed([0.9, 1.0, 1.1]), reverb([0.2, 0.7], p = 0.3), noise([10, 30], colour =
"pink", p = 0.5)]`, measured side by side in one run:

- the batch alone: `materialise` of the same training batches, in this process;
- the step: `seqc train` runs of 8 and 32 steps each way (dev evaluation off), the difference of
  the two wall times over 24 steps, so that process start and compiling cancel out.

- the rooms: simulating reverb's 16 rooms, once per process (`seqc.data.rooms`).

Ends with `name: value` lines: augment_room_bank_s (the rooms' simulation, once per process),
augment_ms_per_batch (the augmentation's own time per batch),
augment_step_s_plain and augment_step_s_augmented (seconds per training step),
augment_step_overhead (the augmented step over the plain one, minus 1).
"""

from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "runs" / "bench-augment"
SPEC = ROOT / "examples" / "asr" / "spoken_numbers.seq"
AUGMENT = (
    '[speed([0.9, 1.0, 1.1]), reverb([0.2, 0.7], p = 0.3), noise([10, 30], colour = "pink", '
    "p = 0.5)]"
)
SIZES = {"train": 240, "dev": 8, "test": 8}


def corpus() -> Path:
    """The small corpus and the example spec pointed at it."""
    from seqc.data.corpora import spoken_numbers

    data = FOLDER / "data"
    if not (data / "train.jsonl").is_file():
        spoken_numbers.build(data, sizes=SIZES, workers=2)
    text = SPEC.read_text().replace(".cache/data/spoken-numbers/", f"{data.as_posix()}/")
    spec = FOLDER / "asr.seq"
    spec.write_text(text)
    return spec


def batch_ms(spec: Path, batches: int) -> tuple[float, float]:
    """Milliseconds per training batch made in this process, plain and augmented."""
    from seqc.run.session import open_session

    times = []
    for sets in ([], [f"asr_ctc.input.augment={AUGMENT}"]):
        session = open_session(spec, "asr.numbers.ctc", sets, cache_dir=FOLDER / "cache")
        stream = session.pipeline.batches("train")
        list(itertools.islice(stream, 2))  # the loader's threads started
        started = time.perf_counter()
        list(itertools.islice(session.pipeline.batches("train", start_step=2), batches))
        times.append(1000 * (time.perf_counter() - started) / batches)
    return times[0], times[1]


def train_s(spec: Path, steps: int, augmented: bool) -> float:
    run = FOLDER / f"run-{steps}-{'aug' if augmented else 'plain'}"
    args = [
        sys.executable, "-m", "seqc.cli", "train", str(spec), "-e", "asr.numbers.ctc",
        "--run-dir", str(run), "--cache-dir", str(FOLDER / "cache"), "--no-progress",
        "--no-dev-eval", "--set", f"train.steps={steps}", "--set", "train.checkpoint_every=0",
        "--set", "train.eval_every=0",
    ]  # fmt: skip
    if augmented:
        args += ["--set", f"asr_ctc.input.augment={AUGMENT}"]
    import shutil

    shutil.rmtree(run, ignore_errors=True)
    started = time.perf_counter()
    subprocess.run(args, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--short", type=int, default=8)
    ap.add_argument("--long", type=int, default=32)
    args = ap.parse_args()
    FOLDER.mkdir(parents=True, exist_ok=True)
    spec = corpus()
    from seqc.data import rooms

    started = time.perf_counter()
    rooms.responses((0.2, 0.7), 16, seed=12345)
    bank_s = time.perf_counter() - started
    print(f"16 simulated rooms, RT60 0.2-0.7 s: {bank_s:.1f} s")
    plain_ms, aug_ms = batch_ms(spec, args.batches)
    print(f"a training batch: {plain_ms:.1f} ms plain, {aug_ms:.1f} ms augmented")
    steps = args.long - args.short
    per_step = {}
    for augmented in (False, True):
        short, long = (train_s(spec, n, augmented) for n in (args.short, args.long))
        per_step[augmented] = (long - short) / steps
        print(f"augmented={augmented}: {short:.1f} s for {args.short} steps, {long:.1f} s for "
              f"{args.long}: {per_step[augmented]:.3f} s a step")  # fmt: skip
    print(f"augment_room_bank_s: {bank_s:.2f}")
    print(f"augment_ms_per_batch: {aug_ms - plain_ms:.1f}")
    print(f"augment_step_s_plain: {per_step[False]:.3f}")
    print(f"augment_step_s_augmented: {per_step[True]:.3f}")
    print(f"augment_step_overhead: {per_step[True] / per_step[False] - 1:.3f}")


if __name__ == "__main__":
    main()
