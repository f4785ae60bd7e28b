"""Do seqc's compiler passes pay? seqc with passes, seqc without, and a tight hand-written JAX
model, trained side by side on the benchmark LM of `train_throughput.py`.

Why: issue 18 asks a compiled spec to beat a tight hand-written program (`tight_lm.py`: one
fused q/k/v matrix, the attention scale folded into the queries) with the passes on
(`compile { passes = [...] }`, `seqc.compiler.passes`). Three contenders on the same
synthetic batches: `seqc` (the default passes: fuse_loss, fuse_matmul, fuse_attention, cse, dce),
`seqc_nopasses` (`compile.passes=[]`, the graph as lowered) and `tight`. Before timing, the
tight model's loss on seqc's initial params (q/k/v concatenated) must equal seqc's, and the two
seqc graphs must give the same loss. Then `--rounds` rounds of `--steps` steps each, the order
reversing every round; medians of the per-round times give tokens/s. The machine may be
shared: the ratios of one run, measured interleaved, are the figures to compare.

Run `python bench/passes_throughput.py`; the last lines are `name: value` pairs.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
for folder in (ROOT, BENCH):
    if str(folder) not in sys.path:  # run as a script from anywhere
        sys.path.insert(0, str(folder))

import train_throughput as tt  # noqa: E402
from reference_lm import Config  # noqa: E402
from tight_lm import TightLM, from_reference  # noqa: E402

from seqc.backends.jax.train import JaxModel  # noqa: E402
from seqc.compiler.compile import compile_task  # noqa: E402
from seqc.resolve.experiment import resolve  # noqa: E402
from seqc.resolve.program import load_program  # noqa: E402

SAME_RTOL = 1e-5


def seqc_model(cfg: Config, passes: list[str] | None) -> tuple[JaxModel, int]:
    """The benchmark spec compiled with `passes` (None: the default), and its op count."""
    with tempfile.TemporaryDirectory() as tmp:
        tt.compile_spec(cfg, Path(tmp))  # writes bench_lm.seq
        program = load_program(Path(tmp) / "bench_lm.seq")
        overrides = [] if passes is None else [f"compile.passes={json.dumps(passes)}"]
        resolved = resolve(program, "bench", overrides)
        task = compile_task(program, resolved, resolved.tasks[0])
    return JaxModel(task, task.train), len(task.training_graph.ops)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--layers", type=int, default=Config.layers)
    parser.add_argument("--d", type=int, default=Config.d)
    parser.add_argument("--heads", type=int, default=Config.heads)
    parser.add_argument("--vocab", type=int, default=Config.vocab)
    parser.add_argument(
        "--passes",
        default=None,
        help="the `seqc` contender's passes, comma-separated "
        "(default: the defaults); the `seqc_nopasses` one has none",
    )
    args = parser.parse_args(argv)
    cfg = Config(vocab=args.vocab, layers=args.layers, d=args.d, heads=args.heads, ff=4 * args.d)
    batches = tt.make_batches(4, args.batch, args.length, cfg.vocab, seed=0)

    chosen = None if args.passes is None else [p for p in args.passes.split(",") if p]
    on, on_ops = seqc_model(cfg, chosen)
    print(f"seqc's passes: {'the defaults' if chosen is None else chosen}")
    off, off_ops = seqc_model(cfg, [])
    tight = TightLM(cfg)
    first = tt.Batch(batches[0])
    on_state = on.init(0)
    # each its own copy: a step donates its state's buffers
    host = {k: np.array(v) for k, v in on_state["params"].items()}
    off_state = off.with_params(host)
    copied = {k: jax.device_put(v) for k, v in host.items()}
    tight_state = tight.state(from_reference(tt.seqc_params_as_reference(copied, cfg)))
    losses = {
        "seqc": float(on.eval_step(on_state["params"], first)["loss"]),
        "seqc_nopasses": float(off.eval_step(off_state["params"], first)["loss"]),
        "tight": float(tight.loss(tight_state["params"], batches[0])),
    }
    for loss in losses.values():
        if not math.isclose(loss, losses["seqc"], rel_tol=SAME_RTOL):
            raise AssertionError(f"different functions: {losses}")

    states: dict[str, Any] = {"seqc": on_state, "seqc_nopasses": off_state, "tight": tight_state}

    def seqc_steps(name: str, model: JaxModel) -> Callable[[int], None]:
        def run(n: int) -> None:
            st = states[name]
            for i in range(n):
                st, _ = model.train_step(st, tt.Batch(batches[i % len(batches)]), cfg.lr)
            jax.block_until_ready(st)
            states[name] = st

        return run

    def tight_steps(n: int) -> None:
        st = states["tight"]
        for i in range(n):
            st, _ = tight.train_step(st, batches[i % len(batches)])
        jax.block_until_ready(st)
        states["tight"] = st

    runners = {
        "seqc": seqc_steps("seqc", on),
        "seqc_nopasses": seqc_steps("seqc_nopasses", off),
        "tight": tight_steps,
    }
    for run in runners.values():  # compile and warm up
        run(2)
    times: dict[str, list[float]] = {name: [] for name in runners}
    order = list(runners)
    for _ in range(args.rounds):
        for name in order:
            start = time.perf_counter()
            runners[name](args.steps)
            times[name].append(time.perf_counter() - start)
        order.reverse()
    tokens = args.batch * args.length * args.steps
    rate = {name: tokens / statistics.median(t) for name, t in times.items()}
    best = {name: tokens / min(t) for name, t in times.items()}
    print(
        f"d {cfg.d}, {cfg.layers} layers, batch {args.batch} x {args.length}; "
        f"{args.rounds} rounds of {args.steps} steps; initial losses {losses}"
    )
    print(f"training graph ops: with passes {on_ops}, without {off_ops}")
    for name in runners:
        print(f"  {name:<15} {rate[name]:9.0f} tokens/s (fastest round {best[name]:.0f})")
    print(f"seqc_tokens_per_s: {rate['seqc']:.0f}")
    print(f"seqc_nopasses_tokens_per_s: {rate['seqc_nopasses']:.0f}")
    print(f"tight_jax_tokens_per_s: {rate['tight']:.0f}")
    print(f"passes_speedup: {rate['seqc'] / rate['seqc_nopasses']:.3f}")
    print(f"seqc_vs_tight_jax: {rate['seqc'] / rate['tight']:.3f}")
    print(f"seqc_vs_tight_jax_fastest_rounds: {best['seqc'] / best['tight']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
