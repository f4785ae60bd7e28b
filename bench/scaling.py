"""Weak scaling of data-parallel training across processes, on this machine's cores.

Why: a run of several processes is only worth its processes if each one keeps computing while
the engines exchange gradients. This measures that on the Transformer LM of
`bench/train_throughput.py` (d=256, 4 layers, vocab 4000, no dropout), seqc's own training path
(`compile_task`, a sharding plan, the backend contract's `start`/`model`/`train_step`):

- one process pinned to one core (`os.sched_setaffinity`, as `taskset -c 0`) with one intra-op
  thread, training on batches of `--batch` x `--length` tokens;
- two processes, each pinned to its own core with one thread, the same batch each (a global
  batch twice as large, mesh `{data: 2}`): JAX's `jax.distributed` (gloo all-reduce) and TF's
  `MultiWorkerMirroredStrategy` (gRPC collectives), on 127.0.0.1 ports chosen now;
- with `--async`, TF's parameter-server training through `seqc` itself (`seqc launch -n 2 --ps 1
  --pin` of `lm.shakespeare.async`: a chief, two workers each on its own core, one server)
  against `lm.shakespeare.quick` on TF in one process pinned to one core (see `measure_async`).

Efficiency = tokens/s of the group / (2 x tokens/s of one process). Rounds alternate one and two
processes (this machine's load comes and goes); the median of the rounds is reported. Each
process times `--steps` steps after `--warmup`, waiting for every step's loss.

Run `python bench/scaling.py [--backends jax,tf] [--rounds 4]`. The last lines are `name: value`
pairs: `tokens_per_s_1p_jax`, `tokens_per_s_2p_jax`, `dp2_efficiency_jax`, the same for tf, and
`ps_async_efficiency` with `--async`. Target: dp2 efficiency at least 0.85.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
for folder in (ROOT, BENCH):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

TARGET = 0.85
ONE_THREAD = {
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
    "TF_NUM_INTRAOP_THREADS": "1",
    "OMP_NUM_THREADS": "1",
}


def _free_ports(n: int) -> list[int]:
    from seqc.run.processes.launch import free_ports

    return free_ports(n)


# ------------------------------------------------------------------------------ one process
def worker(args: argparse.Namespace) -> None:
    """One process of a measurement: pinned, one thread, `start` joins the group, then steps."""
    if args.core >= 0:
        os.sched_setaffinity(0, {args.core})
    import numpy as np

    from seqc.backends import registry
    from seqc.backends.api import Cluster, fetch

    processes = args.processes
    cluster = Cluster(
        process_id=args.rank,
        num_processes=processes,
        coordinator=args.coordinator,
        spec={"worker": args.workers.split(",")} if args.workers else {},
    )
    engine = registry.backend(args.backend)
    if args.backend == "tf":
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(1)
    engine.start(cluster)
    task, train, plan = _compile(processes)
    model = engine.model(task, train, sharding=plan)
    from train_throughput import synthetic_batches

    global_batch = args.batch * processes
    batches = synthetic_batches(4, global_batch, args.length, args.vocab, seed=0)
    state = model.init(0)

    class Batch:
        def __init__(self, arrays: dict) -> None:
            self.arrays = arrays

    def step(i: int) -> None:
        nonlocal state
        state, metrics = model.train_step(state, Batch(batches[i % len(batches)]), 1e-3)
        fetch(metrics)

    for i in range(args.warmup):
        step(i)
    start = time.perf_counter()
    for i in range(args.steps):
        step(i)
    elapsed = time.perf_counter() - start
    tokens = global_batch * args.length * args.steps
    if args.rank == 0:
        print(json.dumps({"tokens_per_s": tokens / elapsed}), flush=True)
    engine.barrier("bench-done")
    del np


def _compile(processes: int) -> tuple:
    """The benchmark LM compiled with the mesh `{data: processes}` (and its sharding plan)."""
    from reference_lm import Config
    from train_throughput import SPEC

    from seqc.compiler.compile import compile_task
    from seqc.compiler.sharding import plan_sharding
    from seqc.resolve.experiment import resolve
    from seqc.resolve.program import load_program

    cfg = Config()
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "bench_lm.seq"
        blocks = (ROOT / "examples" / "common" / "transformer.seq").as_posix()
        fields = {k: getattr(cfg, k) for k in ("vocab", "d", "layers", "heads", "ff", "lr")}
        spec.write_text(SPEC.format(blocks=blocks, clip_norm=cfg.clip_norm, **fields))
        program = load_program(spec)
        mesh = f"distribution.mesh={{data: {processes}}}"
        resolved = resolve(program, "bench", [mesh])
        task = compile_task(program, resolved, resolved.tasks[0])
    plan = plan_sharding(task.graph, resolved, resolved.tasks[0]) if processes > 1 else None
    return task, task.train, plan


# ------------------------------------------------------------------------------ measurements
def measure(backend: str, processes: int, args: argparse.Namespace) -> float:
    """tokens/s of `processes` pinned processes training together."""
    ports = _free_ports(processes + 1)
    workers = ",".join(f"127.0.0.1:{p}" for p in ports[1:]) if backend == "tf" else ""
    procs = []
    for rank in range(processes):
        cmd = [sys.executable, __file__, "--worker", "--backend", backend, "--rank", str(rank),
               "--processes", str(processes), "--core", str(rank % os.cpu_count()),
               "--coordinator", f"127.0.0.1:{ports[0]}", "--workers", workers,
               "--batch", str(args.batch), "--length", str(args.length),
               "--steps", str(args.steps), "--warmup", str(args.warmup)]  # fmt: skip
        env = os.environ | ONE_THREAD
        if backend == "tf" and processes > 1:
            tf_config = {"cluster": {"worker": workers.split(",")},
                         "task": {"type": "worker", "index": rank}}  # fmt: skip
            env["TF_CONFIG"] = json.dumps(tf_config)
        procs.append(
            subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
            )
        )
    try:
        outs = [p.communicate(timeout=args.timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (_, err) in zip(procs, outs, strict=True):
        if p.returncode != 0:
            raise SystemExit(f"{backend} x{processes} failed:\n{err[-3000:]}")
    line = [x for x in outs[0][0].splitlines() if x.startswith("{")][-1]
    return float(json.loads(line)["tokens_per_s"])


def measure_async(args: argparse.Namespace) -> tuple[float, float]:
    """tokens/s of TF parameter-server training against one process, through `seqc` itself:
    `lm.shakespeare.async` (the quick LM: d 128, 2 layers, batches of 32 x 64) launched with
    `seqc launch -n 2 --ps 1 --pin` (each worker on its own core; chief and server unpinned),
    and `lm.shakespeare.quick` on TF in one process pinned to one core. The mean of the logged
    tokens/s past the first window (compilation). Returns (one process, async)."""
    examples = ROOT / "examples" / "lm" / "shakespeare.seq"
    data = ROOT / ".cache" / "data" / "shakespeare" / "train.txt"
    if not data.exists():
        subprocess.run([sys.executable, "-m", "seqc.cli", "data", "prepare", "shakespeare"],
                       cwd=ROOT, check=True)  # fmt: skip
    common = ["--no-progress", "--set", f"train.steps={args.async_steps}", "--set",
              "train.eval_every=0", "--set", "train.log_every=20", "--set",
              "distribution.placement=single"]  # fmt: skip
    figures = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, prefix, experiment in (
            ("one", ["taskset", "-c", "0", sys.executable, "-m", "seqc.cli"], "quick"),
            ("async", [sys.executable, "-m", "seqc.cli", "launch", "-n", "2", "--ps", "1",
                       "--pin", "--"], "async"),
        ):  # fmt: skip
            run = Path(tmp) / name
            cmd = [*prefix, "train", str(examples), "-e", f"lm.shakespeare.{experiment}",
                   "--backend", "tf", "--run-dir", str(run), *common]  # fmt: skip
            # Default thread pools: a worker of an async run with one intra-op thread deadlocks
            # (a step's blocking receive holds the only thread); pinning keeps one core each.
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                                  timeout=args.timeout)  # fmt: skip
            if proc.returncode != 0:
                raise SystemExit(f"{name} run failed:\n{proc.stderr[-3000:]}")
            records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
            tps = [r["tokens_per_s"] for r in records if "tokens_per_s" in r][1:]
            figures.append(statistics.mean(tps))
            print(f"async bench, {name}: {figures[-1]:,.0f} tokens/s", flush=True)
    return figures[0], figures[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="jax,tf")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--batch", type=int, default=16, help="rows per process")
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=4000)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--async", dest="run_async", action="store_true")
    parser.add_argument("--async-steps", type=int, default=120)
    # one process of a measurement
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--backend", default="jax", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--processes", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--core", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--coordinator", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--workers", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    if (os.cpu_count() or 1) < 2:
        raise SystemExit("weak scaling needs at least 2 cores")
    figures: dict[str, float] = {}
    for backend in [b for b in args.backends.split(",") if b]:
        ones, twos = [], []
        for r in range(args.rounds):
            order = (1, 2) if r % 2 == 0 else (2, 1)
            for n in order:
                tps = measure(backend, n, args)
                (ones if n == 1 else twos).append(tps)
                print(f"{backend} round {r + 1}: {n} process(es): {tps:,.0f} tokens/s", flush=True)
        one, two = statistics.median(ones), statistics.median(twos)
        figures[f"tokens_per_s_1p_{backend}"] = one
        figures[f"tokens_per_s_2p_{backend}"] = two
        figures[f"dp2_efficiency_{backend}"] = two / (2 * one)
    if args.run_async:
        one, group = measure_async(args)
        figures["tokens_per_s_1p_tf_quick"] = one
        figures["tokens_per_s_ps_async_quick"] = group
        figures["ps_async_efficiency"] = group / (2 * one)
    for name, value in figures.items():
        if name.startswith("dp2"):
            verdict = "meets" if value >= TARGET else "below"
            print(f"{name}: {value:.3f} ({verdict} the {TARGET} target)")
    for name, value in figures.items():
        print(f"{name}: {value:.4g}" if "efficiency" in name else f"{name}: {value:.0f}")


if __name__ == "__main__":
    main()
