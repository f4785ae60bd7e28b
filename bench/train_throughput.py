"""Training throughput benchmark: a seqc-compiled Transformer LM against the same model in JAX.

Why: seqc lowers a spec to an op graph and interprets it inside `jax.jit`; the interpretation
happens at trace time only, so the compiled training step should run as fast as a model written
by hand. This measures that claim on one model: d=256, 4 layers, 4 heads, ff=1024, pre-norm
causal blocks with exact-erf GELU, tied embeddings, sinusoidal positions, vocab 4000, batches of
32 x 128 tokens, no dropout, adam(1e-3) after clipping the global norm to 1.

- seqc: a `.seq` spec written to a temporary folder (importing the blocks of
  `examples/common/transformer.seq`), loaded, resolved and lowered, trained by `JaxModel`;
- reference: `bench/reference_lm.py`, plain JAX + optax, no seqc.

Both run on the same synthetic random int32 batches (no data files). Before timing, the script
checks that they compute the same function: the reference's loss on seqc's initial params
(mapped by name) must equal seqc's own loss, and each model's initial loss (own init) must
agree within a few percent. Then both are warmed up and timed alternately, `--rounds` rounds of
`--steps` steps each; the medians of the per-round times give tokens/s. MFU is the achieved
model FLOP/s (3 x the forward FLOPs of `seqc.compiler.cost.estimate`, for forward + backward)
over a float32 matmul peak measured in the same run.

Run `python bench/train_throughput.py`; the last lines are `name: value` pairs for tools to read.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))
BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

from reference_lm import Config, ReferenceLM  # noqa: E402

from seqc.backends.jax.train import JaxModel  # noqa: E402
from seqc.compiler.cost import estimate  # noqa: E402
from seqc.compiler.graph import Graph  # noqa: E402
from seqc.compiler.lower import lower_model  # noqa: E402
from seqc.compiler.program import load_program  # noqa: E402
from seqc.compiler.resolve import resolve  # noqa: E402

TARGET_RATIO = 0.95
"""seqc's tokens/s over the reference's should be at least this."""

LOSS_RTOL = 0.05
"""Initial losses of the two models (each with its own random init) agree within this."""

SAME_PARAMS_RTOL = 1e-4
"""With seqc's params copied into the reference, the two losses agree within this."""

SPEC = """seqc 1

# Written by bench/train_throughput.py: the benchmark's Transformer LM, no dropout.

import "{blocks}"

input synthetic {{
  train = text("unused.txt")
  tokenizer = sentencepiece(vocab_size = {vocab}, model_type = "unigram")
}}

model BenchLM(vocab: int, d: int, layers: int, heads: int, ff: int) {{
  embed = Embedding(vocab, d, scale_output = true)
  pos = SinusoidalPosition(d)
  blocks = repeat(layers) CausalBlock(d, heads, ff = ff, dropout = 0.0)
  norm = LayerNorm(d)
  out = Softmax(vocab, d, tie = embed)
  forward (ids: int32[B, T]) -> float32[B, T, vocab] {{
    return out(norm(blocks(pos(embed(ids)))))
  }}
}}

task lm {{
  input = synthetic
  model = BenchLM(vocab = {vocab}, d = {d}, layers = {layers}, heads = {heads}, ff = {ff})
  loss = cross_entropy(label_smoothing = 0.0)
}}

experiment bench {{
  tasks = [lm]
  train {{
    optimizer = adam(lr = {lr})
    clip_norm = {clip_norm}
    compute_dtype = "float32"
  }}
}}
"""


@dataclass
class Batch:
    """What `JaxModel.train_step` reads: the arrays by field name and the task kind."""

    arrays: dict[str, Any]
    task: str = "lm"


def build_seqc(cfg: Config, workdir: Path) -> tuple[JaxModel, Graph]:
    """Write the spec, then load, resolve and lower it; the model trains with `JaxModel`."""
    blocks = ROOT / "examples" / "common" / "transformer.seq"
    spec = workdir / "bench_lm.seq"
    spec.write_text(
        SPEC.format(
            blocks=blocks.as_posix(),
            vocab=cfg.vocab,
            d=cfg.d,
            layers=cfg.layers,
            heads=cfg.heads,
            ff=cfg.ff,
            lr=cfg.lr,
            clip_norm=cfg.clip_norm,
        )
    )
    program = load_program(spec)
    resolved = resolve(program, "bench")
    task = resolved.tasks[0]
    decl = program.layers[resolved.config[task]["model"].kind]
    graph = lower_model(decl, resolved.models[task], program.layers)
    model = JaxModel(graph, resolved.config[task], resolved.config["train"])
    return model, graph


def make_batches(n: int, batch: int, length: int, vocab: int, seed: int) -> list[dict[str, Any]]:
    """Random token ids; every position counts. On the device already, shared by both models."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ids = rng.integers(0, vocab, size=(batch, length + 1), dtype=np.int32)
        arrays = {
            "inputs": ids[:, :-1],
            "targets": ids[:, 1:],
            "mask": np.ones((batch, length), np.bool_),
        }
        out.append({k: jax.device_put(v) for k, v in arrays.items()})
    return out


def seqc_params_as_reference(params: dict[str, jax.Array], cfg: Config) -> dict[str, Any]:
    """seqc's params (named by layer path) in the reference's tree, to compare the functions."""

    def dense(prefix: str) -> dict[str, jax.Array]:
        return {"w": params[f"{prefix}.w"], "b": params[f"{prefix}.b"]}

    def norm(prefix: str) -> dict[str, jax.Array]:
        return {"scale": params[f"{prefix}.scale"], "bias": params[f"{prefix}.bias"]}

    blocks = []
    for i in range(cfg.layers):
        p = f"blocks.{i}"
        blocks.append(
            {
                "norm1": norm(f"{p}.norm1"),
                "q": dense(f"{p}.attn.q"),
                "k": dense(f"{p}.attn.k"),
                "v": dense(f"{p}.attn.v"),
                "o": dense(f"{p}.attn.o"),
                "norm2": norm(f"{p}.norm2"),
                "w1": dense(f"{p}.mlp.w1"),
                "w2": dense(f"{p}.mlp.w2"),
            }
        )
    return {
        "embed": params["embed.table"],
        "blocks": blocks,
        "norm": norm("norm"),
        "out_bias": params["out.b"],
    }


@dataclass
class Pair:
    """The two models, their states and the batches, ready to step."""

    cfg: Config
    seqc: JaxModel
    graph: Graph
    reference: ReferenceLM
    seqc_state: dict[str, Any]
    reference_state: dict[str, Any]
    batches: list[dict[str, Any]]
    losses: dict[str, float]


def setup(
    cfg: Config,
    batch: int,
    length: int,
    seed: int = 0,
    n_batches: int = 4,
    loss_rtol: float = LOSS_RTOL,
) -> Pair:
    """Build both models, initialise them and check that they compute the same function."""
    with tempfile.TemporaryDirectory() as tmp:
        model, graph = build_seqc(cfg, Path(tmp))
    reference = ReferenceLM(cfg)
    batches = make_batches(n_batches, batch, length, cfg.vocab, seed)
    seqc_state = model.init(seed)
    reference_state = reference.init(seed)
    first = batches[0]
    seqc_loss = float(model.eval_step(seqc_state["params"], Batch(first))["loss"])
    reference_loss = float(reference.loss(reference_state["params"], first))
    same = float(reference.loss(seqc_params_as_reference(seqc_state["params"], cfg), first))
    losses = {"seqc": seqc_loss, "reference": reference_loss, "reference_on_seqc_params": same}
    if not math.isclose(same, seqc_loss, rel_tol=SAME_PARAMS_RTOL):
        raise AssertionError(
            f"different functions: seqc loss {seqc_loss:.6f}, reference loss on the same params "
            f"{same:.6f}"
        )
    if not math.isclose(seqc_loss, reference_loss, rel_tol=loss_rtol):
        raise AssertionError(
            f"initial losses disagree: seqc {seqc_loss:.4f}, reference {reference_loss:.4f}"
        )
    return Pair(cfg, model, graph, reference, seqc_state, reference_state, batches, losses)


def seqc_steps(pair: Pair, n: int) -> float:
    """Run n seqc training steps; the loss of the last."""
    state = pair.seqc_state
    metrics: dict[str, Any] = {}
    for i in range(n):
        state, metrics = pair.seqc.train_step(state, Batch(pair.batches[i % len(pair.batches)]))
    pair.seqc_state = state
    jax.block_until_ready(state)
    return float(metrics["loss"]) if metrics else float("nan")


def reference_steps(pair: Pair, n: int) -> float:
    state = pair.reference_state
    loss = jnp.nan
    for i in range(n):
        state, loss = pair.reference.train_step(state, pair.batches[i % len(pair.batches)])
    pair.reference_state = state
    jax.block_until_ready(state)
    return float(loss)


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


class PeakMatmul:
    """float32 FLOP/s of a jitted size x size @ size x size matmul, sampled between the rounds
    so that the peak sees the same machine load as the models (a shared CPU varies a lot)."""

    def __init__(self, size: int) -> None:
        key_a, key_b = jax.random.split(jax.random.PRNGKey(0))
        self.a = jax.random.normal(key_a, (size, size), jnp.float32)
        self.b = jax.random.normal(key_b, (size, size), jnp.float32)
        self.mm = jax.jit(jnp.matmul)
        self.mm(self.a, self.b).block_until_ready()  # compile and warm up
        self.flops = 2.0 * size**3
        self.times: list[float] = []

    def sample(self, reps: int) -> None:
        for _ in range(reps):
            self.times.append(_timed(lambda: self.mm(self.a, self.b).block_until_ready()))

    @property
    def median(self) -> float:
        return self.flops / statistics.median(self.times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2, help="training steps per timed round")
    ap.add_argument("--rounds", type=int, default=8, help="timed rounds per model, alternating")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps per model first")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=4000)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ff", type=int, default=1024)
    ap.add_argument("--matmul-size", type=int, default=2048)
    ap.add_argument("--matmul-reps", type=int, default=2, help="peak samples per round")
    args = ap.parse_args(argv)

    cfg = Config(vocab=args.vocab, d=args.d, layers=args.layers, heads=args.heads, ff=args.ff)
    tokens = args.batch * args.length
    print(
        f"device: {jax.devices()[0].device_kind} x {jax.device_count()}, jax {jax.__version__}; "
        f"d={cfg.d} layers={cfg.layers} heads={cfg.heads} ff={cfg.ff} vocab={cfg.vocab}, "
        f"batch {args.batch} x {args.length}"
    )
    t0 = time.perf_counter()
    pair = setup(cfg, args.batch, args.length)
    print(
        "initial loss: seqc {seqc:.4f}, reference {reference:.4f}, reference on seqc's params "
        "{reference_on_seqc_params:.4f} (log vocab {lv:.4f})".format(
            **pair.losses, lv=math.log(cfg.vocab)
        )
    )
    # Warm up (compiles each step once), then time alternately, the order flipping each round.
    warm = {
        "seqc": _timed(lambda: seqc_steps(pair, args.warmup)),
        "reference": _timed(lambda: reference_steps(pair, args.warmup)),
    }
    peak = PeakMatmul(args.matmul_size)
    runners = {"seqc": seqc_steps, "reference": reference_steps}
    times: dict[str, list[float]] = {"seqc": [], "reference": []}
    for r in range(args.rounds):
        order = ["seqc", "reference"] if r % 2 == 0 else ["reference", "seqc"]
        for name in order:
            run = runners[name]
            times[name].append(_timed(lambda run=run: run(pair, args.steps)) / args.steps)
        peak.sample(args.matmul_reps)
    loss_end = {"seqc": seqc_steps(pair, 1), "reference": reference_steps(pair, 1)}

    forward = estimate(pair.graph, {"B": args.batch, "T": args.length}).flops
    model_flops = 3 * forward
    step_s = {k: statistics.median(v) for k, v in times.items()}
    tps = {k: tokens / s for k, s in step_s.items()}
    ratio = tps["seqc"] / tps["reference"]
    peak_flops = peak.median
    mfu = {k: model_flops / s / peak_flops for k, s in step_s.items()}

    print()
    header = (
        f"{'model':<10} {'median ms':>10} {'min ms':>9} {'max ms':>9} {'tokens/s':>10} {'MFU':>7}"
    )
    print(header)
    for k in ("seqc", "reference"):
        print(
            f"{k:<10} {step_s[k] * 1e3:>10.1f} {min(times[k]) * 1e3:>9.1f} "
            f"{max(times[k]) * 1e3:>9.1f} {tps[k]:>10.0f} {mfu[k]:>7.1%}"
        )
    best = {k: min(v) for k, v in times.items()}
    print(
        f"ratio of medians {ratio:.3f}, of fastest rounds {best['reference'] / best['seqc']:.3f}; "
        f"peak matmul {args.matmul_size}^3: median {peak_flops / 1e9:.1f} GFLOP/s, best "
        f"{peak.flops / min(peak.times) / 1e9:.1f}"
    )
    print(
        f"warm-up (compile + {args.warmup} steps): seqc {warm['seqc']:.1f} s, "
        f"reference {warm['reference']:.1f} s; loss after training: "
        f"seqc {loss_end['seqc']:.4f}, reference {loss_end['reference']:.4f}"
    )
    print(
        f"{args.rounds} rounds x {args.steps} steps per model; total "
        f"{time.perf_counter() - t0:.0f} s; ratio target >= {TARGET_RATIO}"
    )
    print()
    print(f"seqc_tokens_per_s: {tps['seqc']:.1f}")
    print(f"reference_tokens_per_s: {tps['reference']:.1f}")
    print(f"ratio: {ratio:.3f}")
    print(f"mfu: {mfu['seqc']:.4f}")
    print(f"peak_matmul_gflops: {peak_flops / 1e9:.1f}")
    print(f"model_gflops_per_step: {model_flops / 1e9:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
