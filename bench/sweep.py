"""`seqc sweep` measured: what ASHA pruning saves, what a second worker adds, and whether a sweep
beats the hand-tuned quick Shakespeare LM.

    python bench/sweep.py                 # about an hour and a half on 2 cores
    python bench/sweep.py --trials 8 --steps 200   # a shorter look

Three sweeps of `lm.shakespeare.quick` (written to runs/bench-sweep/sweep.seq, which imports
the example), each `seqc sweep` as a user runs it, timed side by side in one run:

- `bench.asha` and `bench.full`: 16 trials over the peak learning rate, dropout and layers,
  2 workers, the same TPE seed, with ASHA (min 100 steps, reduction 3) and without pruning;
  the quick model's own values are each one's first trial (`--base-first`). Dev is scored every
  100 steps in both (`--eval-every`), so ASHA's rungs are 100 and 300 of the 400 steps: with a
  third of each rung promoted it trains 16 x 100 + 16/3 x 200 + 16/9 x 100 = 2844 of the 6400
  steps, at most 2.25x fewer before any overhead (measured 1.48x). `--min-steps 50
  --eval-every 50` has rungs at 50 and 150 (1778 steps, 3.6x fewer), but every trial pays
  twice the evaluations and a pruned trial is mostly its fixed cost (measured 1.34x).
- `bench.workers`: trials over the learning rate alone (their cost does not depend on it),
  one worker pinned to one core, then two workers pinned to one core each.

Ends with `name: value` lines: sweep_trials, sweep_best_dev_ppl_asha, sweep_best_dev_ppl_full,
sweep_base_dev_ppl, sweep_pruned_fraction, sweep_time_saved (full's wall time over asha's;
target >= 2 with a best within 5%), sweep_worker_efficiency (two workers' trials per hour over
twice one worker's).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "runs" / "bench-sweep"

SPACE = """    train.optimizer.lr.peak = loguniform(3e-4, 1e-2)
    lm.model.dropout = uniform(0.0, 0.3)
    lm.model.layers = choice([1, 2, 3])"""

SWEEP = """
sweep {name} {{
  experiment = bench.quick
  metric = dev.perplexity
  goal = minimize
  trials = {trials}
  space {{
{space}
  }}
  sampler = {sampler}{pruner}
}}
"""

SPEC = """seqc 1
import "../../examples/lm/shakespeare.seq"

experiment bench.quick extends lm.shakespeare.quick {{
  train.steps = {steps}
  train.eval_every = {every}
}}
"""


def spec_text(trials: int, steps: int, every: int, min_steps: int, reduction: int) -> str:
    """The bench's spec: the quick model at `steps`, scored on dev `every` steps, and its three
    sweeps."""
    asha = f"\n  pruner = asha(min_steps = {min_steps}, reduction = {reduction})"
    lr = "    train.optimizer.lr.peak = loguniform(1e-3, 5e-3)"
    sweeps = [
        ("bench.asha", trials, SPACE, "tpe(seed = 0)", asha),
        ("bench.full", trials, SPACE, "tpe(seed = 0)", ""),
        ("bench.workers", 8, lr, "random(seed = 0)", ""),
    ]
    text = SPEC.format(steps=steps, every=every)
    for name, n, space, sampler, pruner in sweeps:
        text += SWEEP.format(name=name, trials=n, space=space, sampler=sampler, pruner=pruner)
    return text


def seqc(*args: str, pin: str | None = None) -> list[str]:
    prefix = ["taskset", "-c", pin] if pin is not None else []
    return [*prefix, sys.executable, "-m", "seqc.cli", *args]


def study(folder: Path, name: str) -> optuna.Study:
    storage = JournalStorage(JournalFileBackend(str(folder / "study.journal")))
    return optuna.load_study(study_name=name, storage=storage)


def timed_sweep(spec: Path, name: str, *args: str) -> float:
    folder = FOLDER / name
    shutil.rmtree(folder, ignore_errors=True)
    started = time.perf_counter()
    argv = seqc("sweep", str(spec), "-s", name, "--dir", str(folder), *args)
    subprocess.run(argv, check=True, cwd=ROOT)
    return time.perf_counter() - started


def workers_run(spec: Path, name: str, pins: list[str], trials: int) -> float:
    """Trials per hour of `len(pins)` workers, each `seqc sweep --workers 1` on its core."""
    folder = FOLDER / f"{name}-{len(pins)}"
    shutil.rmtree(folder, ignore_errors=True)
    started = time.perf_counter()
    args = ["sweep", str(spec), "-s", name, "--dir", str(folder), "--trials", str(trials)]
    procs = [subprocess.Popen(seqc(*args, pin=pin), cwd=ROOT) for pin in pins]
    for p in procs:
        if p.wait() != 0:
            raise SystemExit(f"a worker exited {p.returncode}")
    hours = (time.perf_counter() - started) / 3600
    done = study(folder, name).get_trials(states=(TrialState.COMPLETE,))
    return len(done) / hours


def worker_rates(spec: Path, per_worker: int) -> tuple[float, float]:
    """Trials per hour of one worker on core 0, and of two on cores 0 and 1."""
    one = workers_run(spec, "bench.workers", ["0"], per_worker)
    two = workers_run(spec, "bench.workers", ["0", "1"], 2 * per_worker)
    print(f"trials per hour: one worker {one:.1f}, two workers {two:.1f}")
    return one, two


def programs(name: str) -> int:
    """Compiled programs in the sweep's shared cache (`seqc.run.sweep.compile_cache`)."""
    return len(list((FOLDER / name / "xla").glob("*-cache")))


def stopped_at(name: str) -> str:
    """Where the trials ended: `steps x count`, pruned or complete."""
    ends: dict[int, int] = {}
    for t in study(FOLDER / name, name).get_trials():
        if t.state in (TrialState.PRUNED, TrialState.COMPLETE) and t.intermediate_values:
            last = max(t.intermediate_values)
            ends[last] = ends.get(last, 0) + 1
    return ", ".join(f"{n} at {step}" for step, n in sorted(ends.items()))


def best_and_base(name: str) -> tuple[float, float | None, float]:
    trials = study(FOLDER / name, name).get_trials()
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    best = min(t.value for t in complete if t.value is not None)
    base = next((t.value for t in trials if t.user_attrs.get("base")), None)
    pruned = sum(t.state == TrialState.PRUNED for t in trials) / len(trials)
    return best, base, pruned


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--steps", type=int, default=400, help="each trial's training steps")
    ap.add_argument("--eval-every", type=int, default=100, help="dev scored every N steps")
    ap.add_argument("--min-steps", type=int, default=100, help="ASHA's first rung")
    ap.add_argument("--reduction", type=int, default=3, help="ASHA's reduction factor")
    ap.add_argument("--skip-workers", action="store_true", help="leave out the worker runs")
    ap.add_argument("--workers-only", action="store_true", help="only the worker runs")
    ap.add_argument("--worker-trials", type=int, default=4, help="trials per worker")
    args = ap.parse_args()
    FOLDER.mkdir(parents=True, exist_ok=True)
    spec = FOLDER / "sweep.seq"
    spec.write_text(
        spec_text(args.trials, args.steps, args.eval_every, args.min_steps, args.reduction)
    )
    if args.workers_only:
        one, two = worker_rates(spec, args.worker_trials)
        print(f"sweep_worker_efficiency: {two / (2 * one):.2f}")
        return
    t_asha = timed_sweep(spec, "bench.asha", "--workers", "2", "--base-first")
    t_full = timed_sweep(spec, "bench.full", "--workers", "2", "--base-first")
    best_asha, base, pruned = best_and_base("bench.asha")
    best_full, _, _ = best_and_base("bench.full")
    print(f"ASHA: {t_asha / 60:.1f} min, best {best_asha:.2f}, {pruned:.0%} pruned")
    print(f"no pruning: {t_full / 60:.1f} min, best {best_full:.2f}; base {base}")
    print(f"ASHA min {args.min_steps} steps, reduction {args.reduction}; {args.steps} steps")
    print(f"dev every {args.eval_every} steps; trials ended: ASHA {stopped_at('bench.asha')}")
    print(f"compiled programs: ASHA {programs('bench.asha')}, full {programs('bench.full')}")
    lines = [
        f"sweep_trials: {args.trials}",
        f"sweep_best_dev_ppl_asha: {best_asha:.2f}",
        f"sweep_best_dev_ppl_full: {best_full:.2f}",
        f"sweep_base_dev_ppl: {base:.2f}" if base is not None else "sweep_base_dev_ppl: nan",
        f"sweep_pruned_fraction: {pruned:.2f}",
        f"sweep_time_saved: {t_full / t_asha:.2f}",
    ]
    if not args.skip_workers:
        one, two = worker_rates(spec, args.worker_trials)
        lines.append(f"sweep_worker_efficiency: {two / (2 * one):.2f}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
