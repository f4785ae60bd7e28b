"""GPipe on forced CPU devices: the bubble a step pays, and the memory a stage holds.

Why: a pipeline of S stages fed M micro-batches runs M + S - 1 ticks per step, and at each
tick every stage works; only M x S of those (M + S - 1) x S stage-ticks carry a micro-batch,
so a fraction (S - 1) / (M + S - 1) of the work is GPipe's bubble. In return each device keeps
one stage's params, gradients and optimizer state. This bench checks both claims on seqc's own
path (`compile_task`, `pipeline_for`, `PipelinedModel`) with the parity-test LM
(`tests/support/parity_lm.py`, its blocks repeated), on `--xla_force_host_platform_device_count`
CPU devices, for S in {2, 4} and M in {4, 8, 16}.

The bubble is measured from the pipelined step alone. In seqc's step a stage with no
micro-batch at a tick still computes (on zeros; the result is dropped), so a step of M
micro-batches on S stages takes a + b (M + S - 1): M + S - 1 ticks of b each, and a for what a
step does besides (the optimizer's update, putting the batch). The micro-batch is held at
`--micro-rows` rows and M varied over {4, 8, 16} (the batch grows with M), so the tick stays the
same program; a least-squares line through the median step times gives b and a, and the bubble
is (S - 1) b / T(M), the time spent in ticks that carry no micro-batch, against theory
(S - 1) / (M + S - 1) (`PipelinePlan.bubble`), which takes a as 0. Beside it, the one-device
step on the same rows. The process is pinned to one core (`--core`; -1 leaves it free) with one
intra-op thread, so the forced devices' work runs in turn and a tick costs the sum of the
stages' work (a step's time is work, not overlap): the figures show the schedule, not speed.
Why not compare with one device's step alone: on this CPU a step's cost per row changes with the
batch and with what it keeps for the backward pass (GPipe's rematerialisation keeps little, one
device's step keeps everything), which moved that ratio below theory and even below zero in
trials, where the slope holds the tick's program fixed. Each time is the median over `--rounds`
rounds of `--steps` steps, after a warm-up step that compiles; the rounds take the models in
turn, so the machine's load weighs on all of them alike. The batch is placed on the devices
before timing.

Memory: a wider LM (d 256, 8 blocks, 64 x 32 tokens, 8 micro-batches) on
`distribution.devices = 4 x cpu(memory = "56MiB")`, with GPipe's rematerialisation (seqc's
default, `gpipe(remat = true)`). The plan's estimate (params, gradients and Adam's two moments,
and what the step's M + S - 1 ticks keep for the backward pass) puts the whole model on one
device far over 56 MiB, two stages over it (`pipeline_for` refuses them, `stage-memory`) and
each of four stages under it. Beside it, XLA's figure for the compiled training step
(`compiled.memory_analysis()`): argument + output + temp - alias bytes (the state is donated,
so the outputs that alias arguments are counted once). A pipelined step is one SPMD program
for every device, its buffers sized for the largest stage: its figure is each device's, the
largest stage's. The `XLA/plan` column says how far the estimate is from XLA's figure.

Run `python bench/pipeline.py [--quick]` (about 6 minutes on 2 busy cores; `--quick`, a
smaller LM and M = 4 and 8, under 2). The last lines are `name: value` pairs:
`pipeline_bubble_measured`, `pipeline_bubble_theory` and `pipeline_step_vs_single_device`
(S = 4, M = 8), `pipeline_stage_memory_mib` (largest stage, XLA), `single_device_memory_mib`
(XLA) and the plan's two estimates.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SUPPORT = ROOT / "tests" / "support"
for folder in (ROOT, SUPPORT):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

DEVICES = 8
MiB = 2**20
MEMORY_MODEL = {"d": 256, "blocks": 8, "batch": 64, "length": 32, "microbatches": 8}
DECLARED = "56MiB"


@dataclass
class Built:
    """A model of the LM and what measuring it needs."""

    label: str
    stages: int
    microbatches: int
    model: Any
    arrays: dict
    """The batch, already on the model's devices."""
    plan: Any = None


# ------------------------------------------------------------------------------ building
def _spec(folder: Path, blocks: int) -> Path:
    from parity_lm import SPEC

    path = folder / f"lm_{blocks}.seq"
    path.write_text(SPEC.format().replace("repeat(1)", f"repeat({blocks})"))
    return path


def _sets(d: int, batch: int, length: int, stages: int, micro: int, devices: str = "") -> list:
    sets = [f"lm.model.d={d}", f"train.batch_size={batch}", f"lm.input.max_length={length}"]
    if stages > 1:
        sets += [f"distribution.mesh={{stage: {stages}}}", f"distribution.pipeline=gpipe({micro})"]
    if devices:
        sets.append(f"distribution.devices={devices}")
    return sets


def _compiled(spec: Path, sets: list[str]) -> tuple:
    from parity_lm import VOCAB

    from seqc.compiler.compile import compile_task
    from seqc.resolve.experiment import resolve
    from seqc.resolve.program import load_program

    program = load_program(spec)
    resolved = resolve(program, "tiny", sets, symbols={"tiny.vocab_size": VOCAB})
    return compile_task(program, resolved, "lm"), resolved


def _plan(task: Any, resolved: Any) -> Any:
    """The sharding plan with its pipeline (`pipeline_for` checks each stage's memory)."""
    from seqc.compiler.pipeline.plan import pipeline_for
    from seqc.compiler.sharding import plan_sharding

    sharding = plan_sharding(task.graph, resolved, "lm")
    sharding.pipeline = pipeline_for(task, resolved, "lm", sharding.mesh)
    return sharding


def build(spec: Path, d: int, batch: dict, stages: int, micro: int, devices: str = "") -> Built:
    """The LM on one device (stages 1) or as a GPipe of `stages` stages, its batch placed."""
    import jax

    from seqc.backends.jax.pipeline import PipelinedModel
    from seqc.backends.jax.train import JaxModel

    rows, length = batch["inputs"].shape
    task, resolved = _compiled(spec, _sets(d, rows, length, stages, micro, devices))
    if stages == 1:
        model = JaxModel(task, task.train, None)
        return Built("1 device", 1, 1, model, jax.device_put(batch))
    sharding = _plan(task, resolved)
    model = PipelinedModel(task, task.train, sharding)
    placed = model.sharded.put_batch(batch)
    return Built(f"gpipe S={stages} M={micro}", stages, micro, model, placed, sharding.pipeline)


def lm_batch(rows: int, length: int, seed: int = 0) -> dict:
    """Rows that count up from a random start (as the parity tests' batches); the mask drops
    the targets 0 to 2, so some positions do not count."""
    import numpy as np
    from parity_lm import VOCAB

    rng = np.random.default_rng(seed)
    seq = ((rng.integers(0, VOCAB, (rows, 1)) + np.arange(length + 1)[None]) % VOCAB).astype(
        np.int32
    )
    return {"inputs": seq[:, :-1], "targets": seq[:, 1:], "mask": seq[:, 1:] > 2}


# ------------------------------------------------------------------------------ the bubble
class Timer:
    """Steps of one model's jitted training step, its state carried from step to step."""

    def __init__(self, built: Built, lr: float = 1e-3) -> None:
        import numpy as np

        self.built = built
        self.lr = np.float32(lr)
        self.state = built.model.init(0)
        self.times: list[float] = []
        start = time.perf_counter()
        self.step()  # compiles
        self.compile_s = time.perf_counter() - start

    def step(self) -> None:
        import jax

        m = self.built.model
        self.state, metrics = m._train_step(self.state, self.built.arrays, self.lr, m._keeps)
        jax.block_until_ready(metrics)

    def timed(self, steps: int) -> None:
        for _ in range(steps):
            start = time.perf_counter()
            self.step()
            self.times.append(time.perf_counter() - start)

    @property
    def median(self) -> float:
        return statistics.median(self.times)


def bubble(args: argparse.Namespace, folder: Path) -> dict[str, float]:
    """The table of step times and bubbles; the figures of S = 4, M = 8."""
    import numpy as np

    spec = _spec(folder, args.blocks)
    rows = args.micro_rows
    timers: dict[tuple[int, int], Timer] = {}  # (S, M): gpipe, M x rows; (1, M): one device
    for m in args.microbatches:
        batch = lm_batch(rows * m, args.length)
        timers[1, m] = Timer(build(spec, args.d, batch, 1, 1))
        print(f"built 1 device, {rows * m} rows: {timers[1, m].compile_s:.1f} s", flush=True)
        for s in args.stages:
            timers[s, m] = Timer(build(spec, args.d, batch, s, m))
            print(f"built gpipe S={s} M={m}: {timers[s, m].compile_s:.1f} s", flush=True)
    every = list(timers.values())
    for r in range(args.rounds):
        for t in every[r % len(every) :] + every[: r % len(every)]:
            t.timed(args.steps)
        print(f"round {r + 1}/{args.rounds} done", flush=True)

    # T(M) = a + b (M + S - 1): a tick's time b from the slope over M, the step's own cost a
    fits = {}
    for s in args.stages:
        ms = list(args.microbatches)
        ticks = np.asarray([m + s - 1 for m in ms], float)
        times = np.asarray([timers[s, m].median for m in ms])
        b, a = np.polyfit(ticks, times, 1) if len(ms) > 1 else (times[0] / ticks[0], 0.0)
        fits[s] = (float(a), float(b))
    pinned = f"pinned to core {args.core}, one thread" if args.core >= 0 else "not pinned"
    print(
        f"\nbubble: LM d={args.d}, {args.blocks} blocks, micro-batches of {rows} x "
        f"{args.length}, {pinned}; median step times (ms)"
    )
    print(
        f"{'S':>2} {'M':>3} {'rows':>5} {'1dev':>8} {'gpipe':>8} {'gpipe/1dev':>10} "
        f"{'tick':>7} {'fixed':>7} {'bubble':>7} {'theory':>7}"
    )
    figures: dict[str, float] = {}
    for s in args.stages:
        a, b = fits[s]
        for m in args.microbatches:
            t, one = timers[s, m].median, timers[1, m].median
            measured = (s - 1) * b / t
            theory = timers[s, m].built.plan.bubble
            print(
                f"{s:2d} {m:3d} {rows * m:5d} {1000 * one:8.1f} {1000 * t:8.1f} {t / one:10.2f} "
                f"{1000 * b:7.1f} {1000 * a:7.1f} {measured:7.3f} {theory:7.3f}"
            )
            if (s, m) == (4, 8):
                figures = {
                    "pipeline_bubble_measured": measured,
                    "pipeline_bubble_theory": theory,
                    "pipeline_step_vs_single_device": t / one,
                }
    print(
        "tick: the slope of gpipe's step time over its M + S - 1 ticks (least squares over M); "
        "fixed: the intercept (what a step costs besides its ticks); bubble = (S - 1) x tick / "
        "step, the time of the ticks that carry no micro-batch"
    )
    spread = max(statistics.quantiles(t.times, n=4)[2] / t.median - 1 for t in every)
    print(f"(noise: the largest upper quartile of a model's steps is {spread:.0%} over its median)")
    return figures


# ------------------------------------------------------------------------------ memory
def _xla_bytes(built: Built) -> dict[str, int]:
    """XLA's sizes of the compiled training step (per device for an SPMD program)."""
    import numpy as np

    m = built.model
    state = m.init(0)
    lowered = m._train_step.lower(state, built.arrays, np.float32(1e-3), m._keeps)
    mem = lowered.compile().memory_analysis()
    sizes = {
        "args": mem.argument_size_in_bytes,
        "out": mem.output_size_in_bytes,
        "temp": mem.temp_size_in_bytes,
        "alias": mem.alias_size_in_bytes,
    }
    sizes["peak"] = sizes["args"] + sizes["out"] + sizes["temp"] - sizes["alias"]
    return sizes


def memory(folder: Path) -> dict[str, float]:
    from seqc.compiler.sharding import show_bytes
    from seqc.spec.errors import CheckError
    from seqc.spec.types import parse_size

    cfg = MEMORY_MODEL
    spec = _spec(folder, cfg["blocks"])
    batch = lm_batch(cfg["batch"], cfg["length"])
    devices = f'4 x cpu(memory = "{DECLARED}")'
    limit = parse_size(DECLARED)
    assert limit is not None
    m = cfg["microbatches"]

    # the plan's numbers: four stages (checked against the limit), the whole model on one
    # device (from the same units: Adam's params, gradients and two moments, and the whole
    # batch's activations, M micro-batches' worth, kept for the backward pass), two stages
    task, resolved = _compiled(spec, _sets(cfg["d"], cfg["batch"], cfg["length"], 4, m, devices))
    four = _plan(task, resolved).pipeline  # raises `stage-memory` if a stage did not fit
    whole = sum(u.param_bytes * 4 + u.activation_bytes * m for u in four.units)
    if whole <= limit:
        raise SystemExit(f"the memory model fits one device ({show_bytes(whole)}): enlarge it")
    sets2 = _sets(cfg["d"], cfg["batch"], cfg["length"], 2, m, devices)
    task2, resolved2 = _compiled(spec, sets2)
    try:
        _plan(task2, resolved2)
        two = "fits (unexpected)"
    except CheckError as err:
        two = f"refused ({err.code})"

    single = build(spec, cfg["d"], batch, 1, 1)
    piped = build(spec, cfg["d"], batch, 4, m, devices)
    one_x, four_x = _xla_bytes(single), _xla_bytes(piped)

    print(
        f"\nmemory: LM d={cfg['d']}, {cfg['blocks']} blocks, batch {cfg['batch']} x "
        f"{cfg['length']}, M={m}; devices declare {DECLARED}; two stages: {two}"
    )
    print(
        f"{'':<30}{'plan MiB':>9}{'args':>8}{'out':>8}{'temp':>8}{'alias':>8}{'XLA MiB':>9}"
        f"{'XLA/plan':>9}  (XLA MiB: args + out + temp - alias)"
    )

    def row(label: str, plan_bytes: float, x: dict | None) -> None:
        cells = "".join(f"{x[k] / MiB:8.1f}" for k in ("args", "out", "temp", "alias")) if x else ""
        tail = f"{x['peak'] / MiB:9.1f}{x['peak'] / plan_bytes:9.2f}" if x else ""
        print(f"{label:<30}{plan_bytes / MiB:9.1f}{cells}{tail}")

    row("1 device", whole, one_x)
    for s in four.stages:
        row(f"  stage {s.index}: {s.units[0]}..{s.units[-1]}", s.memory_bytes, None)
    row("4 stages, each device", max(s.memory_bytes for s in four.stages), four_x)
    fits = "fits" if four_x["peak"] <= limit else "is over"
    over = "over" if one_x["peak"] > limit else "within"
    print(
        f"XLA: a stage's device {fits} the declared {DECLARED}; one device is {over} it "
        f"({four_x['peak'] / one_x['peak']:.2f} of one device's memory per stage)"
    )
    return {
        "pipeline_stage_memory_mib": four_x["peak"] / MiB,
        "single_device_memory_mib": one_x["peak"] / MiB,
        "pipeline_stage_memory_plan_mib": max(s.memory_bytes for s in four.stages) / MiB,
        "single_device_memory_plan_mib": whole / MiB,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller model, M = 4 and 8")
    parser.add_argument("--d", type=int, default=128)
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--micro-rows", type=int, default=8, help="rows of a micro-batch")
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per model per round")
    parser.add_argument("--core", type=int, default=0, help="the core to pin to (-1: none)")
    parser.add_argument("--no-memory", action="store_true")
    args = parser.parse_args()
    args.stages, args.microbatches = (2, 4), (4, 8, 16)
    if args.quick:
        args.d, args.blocks, args.rounds = 64, 4, 3
        args.microbatches = (4, 8)
    if args.core >= 0:
        os.sched_setaffinity(0, {args.core})
    flags = f"--xla_force_host_platform_device_count={DEVICES}"
    if args.core >= 0:  # one thread: the devices' work runs in turn, as the docstring says
        flags += " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flags}".strip()

    import jax

    if len(jax.devices()) < max(args.stages):
        raise SystemExit(f"needs {max(args.stages)} devices; jax sees {jax.devices()}")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        figures = bubble(args, Path(tmp))
        if not args.no_memory:
            figures |= memory(Path(tmp))
    print(f"\n(wall time {time.perf_counter() - start:.0f} s)")
    for name, value in figures.items():
        print(f"{name}: {value:.4g}")


if __name__ == "__main__":
    main()
