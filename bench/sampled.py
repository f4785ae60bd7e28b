"""Sampling-based criteria at a 100,000-word vocabulary: speed and quality against the full softmax.

Why: the sampled criteria exist to make a large-vocabulary step cheap without losing the model.
This measures both on `examples/lm/zipf.seq` (a 2 x 256 Transformer LM, tied output layer,
V = 95,644: every word of the train split, the tokenizer's cap being 100,004; K = 1024,
unigram^0.75 proposal; the synthetic corpus of `seqc data prepare zipf`, whose perplexity floor
is known), through seqc's own training loop (`seqc.run.train.loop.train`:
batches, candidates, the optimizer's dense update over V x d, all included), on JAX:

- speed: tokens/s of each criterion's steady steps (the first log window, which compiles, is
  left out), the runs alternating over `--rounds` so this machine's load hits each alike;
  `sampled_speedup_v100k` is the sampled softmax's tokens/s over the full softmax's;
- quality (`--quality`): each experiment trained for `--steps` steps (the same tokens), then
  the full-softmax dev perplexity, and log Z's mean and spread; the gaps are each criterion's
  perplexity over the full softmax's, in percent.

Run `python bench/sampled.py [--rounds 2] [--quality --steps 600]` after
`seqc data prepare zipf`. The last lines are `name: value` pairs.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SPEC = ROOT / "examples" / "lm" / "zipf.seq"
CRITERIA = {"ce": "lm.zipf.ce", "sampled": "lm.zipf.sampled", "nce": "lm.zipf.nce",
            "snis": "lm.zipf.snis", "sampled_lazy": "lm.zipf.sampled.lazy",
            "snis_lazy": "lm.zipf.snis.lazy", "snis_k4096": "lm.zipf.snis.k4096"}  # fmt: skip
"""Names for `--criteria`; `_lazy`: the same with `adam(lazy_rows = true)`; `snis_k4096`: SNIS
over 4096 candidates, lazy rows."""


def run(experiment: str, steps: int, log_every: int, folder: Path, eval_batches: int) -> dict:
    """Train `experiment` for `steps` steps; its steady tokens/s and the dev figures."""
    from seqc.run.report import SilentReporter
    from seqc.run.session import open_session
    from seqc.run.train.loop import train

    overrides = [f"train.steps={steps}", f"train.log_every={log_every}",
                 f"train.checkpoint_every={steps}"]  # fmt: skip
    session = open_session(SPEC, experiment, overrides, cache_dir=ROOT / ".cache")
    result = train(
        session,
        folder / experiment,
        progress=False,
        reporter=SilentReporter(),
        eval_batches=eval_batches,
    )
    rates = [h["tokens_per_s"] for h in result.history if "tokens_per_s" in h][1:]
    dev = result.dev_after or {}
    return {"tokens_per_s": statistics.median(rates) if rates else math.nan, "dev": dev}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--speed-steps", type=int, default=40)
    parser.add_argument("--quality", action="store_true")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--criteria", default="ce,sampled,nce,snis")
    args = parser.parse_args()
    names = args.criteria.split(",")
    speeds: dict[str, list[float]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = names if r % 2 == 0 else names[::-1]
            for name in order:
                got = run(CRITERIA[name], args.speed_steps, 10, Path(tmp) / f"speed{r}", 1)
                speeds[name].append(got["tokens_per_s"])
                print(f"round {r + 1}: {name}: {got['tokens_per_s']:,.0f} tokens/s", flush=True)
        quality: dict[str, dict] = {}
        if args.quality:
            for name in names:
                got = run(CRITERIA[name], args.steps, 50, Path(tmp) / "quality", 0)
                quality[name] = got["dev"]
                dev = got["dev"]
                print(f"{name}: {args.steps} steps, dev perplexity {dev.get('perplexity'):.1f}, "
                      f"log Z {dev.get('log_z_mean'):+.3f} +- {dev.get('log_z_std'):.3f}, "
                      f"raw {dev.get('raw_perplexity', math.nan):.1f}", flush=True)  # fmt: skip
    tps = {n: statistics.median(v) for n, v in speeds.items() if v}
    for n, v in tps.items():
        print(f"tokens_per_s_{n}_v100k: {v:.0f}")
    if "ce" in tps:
        for n in names:
            if n != "ce":
                print(f"{n}_speedup_v100k: {tps[n] / tps['ce']:.2f}")
    for n in names:  # lazy rows against the dense Adam update, same criterion
        base = n.removesuffix("_lazy")
        if n.endswith("_lazy") and base in tps:
            print(f"{n}_over_dense: {tps[n] / tps[base]:.2f}")
    if quality and "ce" in quality:
        base = quality["ce"]["perplexity"]
        for n in names:
            if n != "ce":
                gap = 100.0 * (quality[n]["perplexity"] / base - 1.0)
                print(f"{n}_ppl_gap_pct: {gap:.1f}")
        for n in names:
            print(f"{n}_dev_ppl: {quality[n]['perplexity']:.1f}")
            print(f"{n}_logz_std: {quality[n]['log_z_std']:.3f}")


if __name__ == "__main__":
    main()
