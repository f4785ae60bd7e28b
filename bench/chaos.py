"""Chaos: a short training run, with one fault injected at a time, and what the run loses.

Each fault runs `seqc train` in child processes, as a user's run would be:
- kill -9 mid-run, then `--resume`: the steps since the last checkpoint are redone;
- SIGTERM mid-run (what a scheduler sends): the run stops with a checkpoint, nothing is lost;
- a damaged newest checkpoint (a flipped bit in its largest file): the resume sets it aside
  and continues from the one before;
- a torn last line in `metrics.jsonl` (a crash mid-write): the resume drops it;
- a second run into the same run directory while the first trains: refused (the lock), and
  the first runs to its end.

A run is recovered when it reaches its last step with every step logged exactly once and a
final checkpoint. `chaos_steps_lost` counts steps lost beyond the last checkpoint interval
(target 0); `chaos_steps_redone` counts the steps trained twice because of a fault.

Run `python bench/chaos.py`; the last lines are `name: value` pairs.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = """seqc 1
import "{common}"
input words {{
  train = text("train.txt")
  dev = text("dev.txt")
  tokenizer = chars()
  buckets = {{32: 8}}
}}
model LM(vocab: int, d: int = 32) {{
  embed = Embedding(vocab, d)
  pos = SinusoidalPosition(d)
  blocks = repeat(1) CausalBlock(d, 2, dropout = 0.1)
  norm = LayerNorm(d)
  out = Softmax(vocab, d, tie = embed)
  forward (ids: int32[B, T]) -> float32[B, T, vocab] {{
    return out(norm(blocks(pos(embed(ids)))))
  }}
}}
task lm {{
  input = words
  model = LM(vocab = input.vocab_size)
}}
experiment chaos {{
  tasks = [lm]
  train {{
    optimizer = adam(lr = 3e-3)
    steps = {steps}
    log_every = 1
    eval_every = 0
    checkpoint_every = {every}
  }}
}}
"""


@dataclass
class Outcome:
    fault: str
    recovered: bool
    lost: int
    """Steps lost beyond the last checkpoint interval."""
    redone: int
    detail: str


class Bench:
    def __init__(self, folder: Path, steps: int, every: int) -> None:
        self.folder, self.steps, self.every = folder, steps, every
        rng = random.Random(0)
        words = ["abc", "abd", "bcd", "cde", "def", "efg"]
        for split, n in (("train", 400), ("dev", 40)):
            lines = [
                " ".join(rng.choice(words) for _ in range(rng.randint(2, 5))) for _ in range(n)
            ]
            (folder / f"{split}.txt").write_text("\n".join(lines) + "\n")
        common = (ROOT / "examples" / "common" / "transformer.seq").as_posix()
        self.spec = folder / "chaos.seq"
        self.spec.write_text(SPEC.format(common=common, steps=steps, every=every))

    def command(self, run: Path, *extra: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "seqc.cli",
            "train",
            str(self.spec),
            "-e",
            "chaos",
            "--run-dir",
            str(run),
            "--cache-dir",
            str(self.folder / "cache"),
            "--no-progress",
            *extra,
        ]

    def start(self, run: Path, *extra: str) -> subprocess.Popen:
        return subprocess.Popen(
            self.command(run, *extra),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def finish(self, run: Path, *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.command(run, *extra), capture_output=True, text=True, timeout=900
        )

    def logged(self, run: Path) -> list[int]:
        """Train steps in metrics.jsonl (a torn line skipped)."""
        path = run / "metrics.jsonl"
        steps = []
        for line in path.read_text().splitlines() if path.exists() else []:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if record.get("split") == "train":
                steps.append(int(record["step"]))
        return steps

    def wait_for(self, run: Path, proc: subprocess.Popen, n: int) -> int:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            steps = self.logged(run)
            if len(steps) >= n:
                return steps[-1]
            if proc.poll() is not None:
                raise RuntimeError(f"the run ended early: {proc.stderr.read()[-2000:]}")
            time.sleep(0.1)
        raise RuntimeError("the run did not get going")

    def checkpoints(self, run: Path) -> list[int]:
        folder = run / "checkpoints"
        steps = set()
        for p in folder.iterdir() if folder.is_dir() else []:
            name = p.name.removeprefix("ckpt-").removesuffix(".index")
            if name.isdigit():
                steps.add(int(name))
        return sorted(steps)

    def complete(self, run: Path) -> bool:
        every_step_once = self.logged(run) == list(range(1, self.steps + 1))
        return every_step_once and self.steps in self.checkpoints(run)

    # ---------------------------------------------------------------- the faults
    def kill9(self, run: Path) -> Outcome:
        proc = self.start(run)
        reached = self.wait_for(run, proc, self.every + self.every // 2)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        reached = max(reached, *self.logged(run))
        saved = max(self.checkpoints(run), default=0)
        done = self.finish(run, "--resume")
        redone = reached - saved
        return Outcome(
            "kill -9",
            done.returncode == 0 and self.complete(run),
            max(0, redone - self.every),
            redone,
            f"killed after step {reached}, resumed from checkpoint {saved}",
        )

    def sigterm(self, run: Path) -> Outcome:
        proc = self.start(run)
        self.wait_for(run, proc, self.every + self.every // 2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
        reached = self.logged(run)[-1]
        saved = max(self.checkpoints(run), default=0)
        done = self.finish(run, "--resume")
        clean = proc.returncode == 128 + signal.SIGTERM and "resume with" in err
        return Outcome(
            "SIGTERM",
            clean and done.returncode == 0 and self.complete(run),
            max(0, reached - saved - self.every),
            reached - saved,
            f"stopped at step {reached} (exit {proc.returncode}), checkpoint {saved}",
        )

    def corrupt(self, run: Path) -> Outcome:
        half = self.finish(run, "--set", f"train.steps={self.steps // 2}")
        newest = max(self.checkpoints(run))
        folder = run / "checkpoints" / str(newest)
        victim = max((p for p in folder.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
        data = bytearray(victim.read_bytes())
        data[len(data) // 2] ^= 0xFF
        victim.write_bytes(bytes(data))
        done = self.finish(run, "--resume")
        found = re.search(r"resumed from step (\d+)", done.stderr)
        used = int(found.group(1)) if found else 0
        redone = newest - used
        ok = half.returncode == 0 and done.returncode == 0 and "set aside" in done.stderr
        return Outcome(
            "corrupt newest checkpoint",
            ok and self.complete(run),
            max(0, redone - self.every),
            redone,
            f"checkpoint {newest} damaged; resumed from {used}",
        )

    def torn(self, run: Path) -> Outcome:
        half = self.finish(run, "--set", f"train.steps={self.steps // 2}")
        with (run / "metrics.jsonl").open("a") as f:
            f.write('{"step": 9999, "split": "tr')
        done = self.finish(run, "--resume")
        return Outcome(
            "torn metrics line",
            half.returncode == 0 and done.returncode == 0 and self.complete(run),
            0,
            0,
            "a half-written line after the last record",
        )

    def concurrent(self, run: Path) -> Outcome:
        """The first run is long enough to outlive the second's start-up; once the second is
        refused, the first is stopped with SIGTERM and must have kept a clean record."""
        first = self.start(run, "--set", "train.steps=100000")
        self.wait_for(run, first, 3)
        second = self.finish(run)
        refused = second.returncode == 2 and "run-locked" in second.stderr
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=300)
        steps = self.logged(run)
        clean = steps == list(range(1, len(steps) + 1)) and steps[-1] in self.checkpoints(run)
        return Outcome(
            "concurrent run",
            refused and first.returncode == 128 + signal.SIGTERM and clean,
            0,
            0,
            f"second run exit {second.returncode} ({'refused' if refused else 'NOT refused'}); "
            f"the first stopped at step {steps[-1]}",
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--every", type=int, default=10, help="train.checkpoint_every")
    args = ap.parse_args()
    outcomes = []
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(Path(tmp), args.steps, args.every)
        for fault in (bench.kill9, bench.sigterm, bench.corrupt, bench.torn, bench.concurrent):
            run = Path(tmp) / f"run-{fault.__name__}"
            t = time.perf_counter()
            outcome = fault(run)
            outcomes.append(outcome)
            print(
                f"{outcome.fault:<26} {'recovered' if outcome.recovered else 'NOT RECOVERED':<14} "
                f"redone {outcome.redone:>3}, lost {outcome.lost}  ({outcome.detail}; "
                f"{time.perf_counter() - t:.0f} s)",
                flush=True,
            )
    print(f"chaos_faults: {len(outcomes)}")
    print(f"chaos_runs_recovered: {sum(o.recovered for o in outcomes)}")
    print(f"chaos_steps_lost: {sum(o.lost for o in outcomes)}")
    print(f"chaos_steps_redone: {sum(o.redone for o in outcomes)}")


if __name__ == "__main__":
    main()
