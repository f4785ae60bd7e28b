"""The mixture-of-experts LM against the dense quick LM, and what capacity drops.

Why: a mixture of experts buys parameters without FLOPs per token. `lm.shakespeare.moe`
(examples/lm/shakespeare_moe.seq) is `lm.shakespeare.quick` with each block's MLP (d 128 ->
512 -> 128) replaced by 8 experts of width 128, 2 per token: two experts of 128 (times the
capacity factor 1.25 in training) and the router and the dispatch cost what the MLP of 512
costs (0.98x the dense training graph's FLOPs per token), with twice the MLP params. This
bench trains both as a user does (`seqc train`, one process each, in turn, on the same
machine) and prints:

- FLOPs per token of each training graph (seqc's cost model, at the bucket's 32 x 64 tokens);
- equal steps: dev perplexity of each after the quick model's 400 steps;
- equal time: the dense model trained for as many steps as its measured tokens/s buys in the
  MoE run's training time, and its dev perplexity then;
- tokens/s of each (the runs' own figure: tokens over wall time between log lines, the first
  window, which compiles, left out);
- the fraction of token-to-expert assignments dropped by capacity, mean over the run's steps
  and both layers, at capacity factors 1.0, 1.25 (the MoE run) and 2.0 (`--cf-steps` steps
  each);
- the MoE run exported as the example asks (ONNX int8, TFLite int8; `seqc export`, gated on
  dev batches as every export is): each artifact's dev perplexity on the gate's batches.

Run `python bench/moe.py` (about 20 minutes on 2 idle cores; `--steps 100 --cf-steps 40` for a
look). Ends with `name: value` lines.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "runs" / "bench-moe"
DENSE = ("examples/lm/shakespeare.seq", "lm.shakespeare.quick")
MOE = ("examples/lm/shakespeare_moe.seq", "lm.shakespeare.moe")


def train(name: str, spec: tuple[str, str], *sets: str) -> tuple[list[dict], float]:
    """`seqc train` into runs/bench-moe/NAME; its metrics.jsonl records and wall seconds."""
    run = FOLDER / name
    shutil.rmtree(run, ignore_errors=True)
    args = [sys.executable, "-m", "seqc.cli", "train", spec[0], "-e", spec[1], "--run-dir"]
    args += [str(run), "--no-progress", "--set", "distribution.placement=single"]
    for s in sets:
        args += ["--set", s]
    started = time.perf_counter()
    subprocess.run(args, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - started
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines], seconds


def dev_ppl(records: list[dict]) -> float:
    return [r for r in records if r["split"] == "dev"][-1]["perplexity"]


def tokens_per_s(records: list[dict]) -> float:
    rates = [r["tokens_per_s"] for r in records if "tokens_per_s" in r]
    return float(np.median(rates[1:] if len(rates) > 1 else rates))


def dropped(records: list[dict]) -> float:
    values = [
        v for r in records if r["split"] == "train" for k, v in r.items() if k.endswith(".dropped")
    ]
    return float(np.mean(values))


def export(name: str, spec: tuple[str, str]) -> dict[str, dict]:
    """`seqc export` of a bench run with the experiment's formats (ONNX int8, TFLite int8),
    gated as any export is; each artifact's manifest."""
    args = [sys.executable, "-m", "seqc.cli", "export", spec[0], "-e", spec[1], "--run-dir"]
    args += [str(FOLDER / name), "--set", "distribution.placement=single"]
    subprocess.run(args, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    found = sorted((FOLDER / name / "export").glob("*/manifest.json"))
    return {m.parent.name: json.loads(m.read_text()) for m in found}


def flops_per_token() -> dict[str, float]:
    """The training graphs' FLOPs per token by seqc's cost model, at one 32 x 64 batch."""
    from seqc.compiler.compile import compile_task
    from seqc.compiler.cost import estimate
    from seqc.resolve.experiment import resolve
    from seqc.resolve.program import load_program

    out = {}
    for name, (spec, experiment) in (("dense", DENSE), ("moe", MOE)):
        program = load_program(ROOT / spec)
        resolved = resolve(program, experiment, symbols={"shakespeare.vocab_size": 2000})
        task = compile_task(program, resolved, "lm")
        graph = task.lowered_train_graph or task.graph
        out[name] = estimate(graph, {"B": 32, "T": 64}).flops / (32 * 64)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=400, help="steps of each model (equal steps)")
    ap.add_argument("--cf-steps", type=int, default=200, help="steps at capacity 1.0 and 2.0")
    args = ap.parse_args()
    FOLDER.mkdir(parents=True, exist_ok=True)
    every = max(args.steps // 4, 1)
    common = [f"train.steps={args.steps}", f"train.eval_every={every}", "train.log_every=20"]
    flops = flops_per_token()
    moe, moe_s = train("moe", MOE, *common)
    dense, dense_s = train("dense", DENSE, *common)
    moe_rate, dense_rate = tokens_per_s(moe), tokens_per_s(dense)
    # equal time: the dense model's steps in the MoE run's training time, at their rates
    equal = max(round(args.steps * dense_rate / moe_rate), 1)
    timed, timed_s = train(
        "dense-equal-time",
        DENSE,
        f"train.steps={equal}",
        "train.log_every=20",
        f"train.eval_every={equal}",
    )
    low, _ = train(
        "moe-cf1.0",
        MOE,
        f"train.steps={args.cf_steps}",
        "train.log_every=10",
        "lm.model.capacity_factor=1.0",
        "train.eval_every=0",
    )
    high, _ = train(
        "moe-cf2.0",
        MOE,
        f"train.steps={args.cf_steps}",
        "train.log_every=10",
        "lm.model.capacity_factor=2.0",
        "train.eval_every=0",
    )
    mid = [r for r in moe if r["split"] != "train" or r["step"] <= args.cf_steps]
    artifacts = export("moe", MOE)
    print(
        f"FLOPs per token (training graph, cost model): dense {flops['dense']:.0f}, "
        f"MoE {flops['moe']:.0f} ({flops['moe'] / flops['dense']:.2f}x)"
    )
    print(
        f"equal steps ({args.steps}): dense dev perplexity {dev_ppl(dense):.2f} "
        f"({dense_s / 60:.1f} min), MoE {dev_ppl(moe):.2f} ({moe_s / 60:.1f} min)"
    )
    print(f"tokens/s: dense {dense_rate:.0f}, MoE {moe_rate:.0f}")
    print(
        f"equal time: dense for {equal} steps: dev perplexity {dev_ppl(timed):.2f} "
        f"({timed_s / 60:.1f} min)"
    )
    lines = [
        f"moe_flops_per_token_ratio: {flops['moe'] / flops['dense']:.3f}",
        f"dense_dev_ppl_equal_steps: {dev_ppl(dense):.2f}",
        f"moe_dev_ppl_equal_steps: {dev_ppl(moe):.2f}",
        f"dense_dev_ppl_equal_time: {dev_ppl(timed):.2f}",
        f"dense_equal_time_steps: {equal}",
        f"dense_tokens_per_s: {dense_rate:.0f}",
        f"moe_tokens_per_s: {moe_rate:.0f}",
        f"moe_tokens_per_s_ratio: {moe_rate / dense_rate:.3f}",
        f"moe_dropped_cf_1_0: {dropped(low):.4f}",
        f"moe_dropped_cf_1_25: {dropped(mid):.4f}",
        f"moe_dropped_cf_2_0: {dropped(high):.4f}",
    ]
    for name, m in artifacts.items():
        ppl = m["quality"]["perplexity"]
        print(
            f"export {name}: dev perplexity {ppl:.2f} (the trained model on the same batches "
            f"{m['reference_quality']['perplexity']:.2f}), max |logit error| "
            f"{m['parity_max_abs_err']:.2e}"
        )
        lines.append(f"moe_{name.replace('-', '_')}_dev_ppl: {ppl:.2f}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
