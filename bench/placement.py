"""Placement benchmark: Baechi's m-TOPO, m-ETF and m-SCT on random DAGs and on seqc's own
Transformer training step (`../shared/research/baechi.md` §7).

Graphs:
- layered random DAGs of 1k, 10k and 100k ops: layers 32-256 wide, each op reads 1-4 ops of
  the layer above; lognormal compute (median 100 µs), output bytes (median 1 MB) and persistent
  bytes (median 4 MB), temporary = output; edges carry the producer's output;
- the op graph of a 24- and a 48-layer Transformer LM (d 1024, 16 heads, ff 4096, vocab 32000,
  batches of 8 x 512) lowered by seqc from a generated spec, as `seqc place` builds it
  (`problem_from_graph`, fused), on the catalogue's default `gpu`; and the 24-layer one
  unfused (`tfm24_ops`: one node per op, so attention's parallel branches stay visible).

Devices: n in {2, 4, 8}, each with memory f x (Σ persistent + temporary + output) / n for
f in {1.1, 1.5, unlimited} (the 10k and 100k DAGs at n = 4 only, m-SCT on 10k at f = 1.5 only:
its scheduler takes ~10 s at 1k ops and 8 devices). Every plan is replayed by the independent
checker; a memory violation must never happen (`memory_violations` counts them), while a
placer may report a problem infeasible (`failures`: expected at f = 1.1, where memory barely fits).

Run `python bench/placement.py` (minutes) or `--quick` (a small subset, seconds). The last lines
are `name: value` pairs: `<algorithm>_<graph>_s`, the placement time at n = 4, f = 1.5 (m_sct on
the 100k graph is skipped: its LP has ~400k columns), `<algorithm>_<graph>_ratio` the worst
makespan / lower bound over the grid, then `failures` and `memory_violations`.
"""

from __future__ import annotations

import argparse
import math
import resource
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from seqc.compiler.compile import compile_task  # noqa: E402
from seqc.compiler.placement import algorithms  # noqa: E402
from seqc.compiler.placement.checker import check  # noqa: E402
from seqc.compiler.placement.from_graph import problem_from_graph  # noqa: E402
from seqc.compiler.placement.problem import (  # noqa: E402
    UNLIMITED,
    Comm,
    Device,
    Edge,
    Node,
    Plan,
    Problem,
)
from seqc.resolve.experiment import resolve  # noqa: E402
from seqc.resolve.program import load_program  # noqa: E402

SCT_LP_SECONDS = 120.0
"""Time cap of m-SCT's LP; past it the placer falls back to its critical-path favourites."""

FACTORS = (1.1, 1.5, math.inf)
DEVICES = (2, 4, 8)

SPEC = """seqc 1

# Written by bench/placement.py: a Transformer LM to place.

import "{blocks}"

input synthetic {{
  train = text("unused.txt")
  tokenizer = sentencepiece(vocab_size = {vocab}, model_type = "unigram")
}}

model BenchLM(vocab: int, d: int, layers: int, heads: int, ff: int) {{
  embed = Embedding(vocab, d, scale_output = true)
  pos = SinusoidalPosition(d, max_length = 1024)
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
  loss = cross_entropy()
}}

experiment bench {{
  tasks = [lm]
  train.optimizer = adam(lr = 1e-3)
}}
"""


def layered_dag(n: int, seed: int = 0, comm: str = "sequential") -> Problem:
    """A random layered DAG of `n` ops (§7): layers 32-256 wide, fan-in 1-4 from the layer above."""
    rng = np.random.default_rng(seed)
    compute = np.maximum(1, rng.lognormal(math.log(100), 1.0, n).astype(np.int64))
    out = rng.lognormal(math.log(1e6), 1.0, n).astype(np.int64)
    persistent = rng.lognormal(math.log(4e6), 1.0, n).astype(np.int64)
    nodes = [
        Node(i, f"op{i}", int(compute[i]), int(persistent[i]), int(out[i]), int(out[i]))
        for i in range(n)
    ]
    edges: list[Edge] = []
    prev: range | None = None
    i = 0
    while i < n:
        width = min(int(rng.integers(32, 257)), n - i)
        layer = range(i, i + width)
        if prev is not None:
            for v in layer:
                k = min(int(rng.integers(1, 5)), len(prev))
                for u in sorted(rng.choice(len(prev), size=k, replace=False)):
                    src = prev.start + int(u)
                    edges.append(Edge(src, v, nodes[src].output))
        prev, i = layer, i + width
    return Problem(nodes, edges, [Device("d0")], Comm(model=comm))


def transformer(layers: int, comm: str = "sequential", fuse: bool = True) -> tuple[Problem, int]:
    """seqc's lowered Transformer LM as `seqc place` sees it; also the unfused op count."""
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "bench_place.seq"
        blocks = ROOT / "examples" / "common" / "transformer.seq"
        spec.write_text(
            SPEC.format(
                blocks=blocks.as_posix(), vocab=32000, d=1024, layers=layers, heads=16, ff=4096
            )
        )
        program = load_program(spec)
        resolved = resolve(program, "bench")
        graph = compile_task(program, resolved, "lm").graph
    p = problem_from_graph(
        graph,
        [{"kind": "gpu", "flops": 1.5e13, "bandwidth": 9e11, "link": 1.6e10}],
        comm=comm,  # type: ignore[arg-type]
        batch_dims={"B": 8, "T": 512},
        fuse=fuse,
    )
    return p, len(graph.ops)


def on_devices(p: Problem, n: int, factor: float) -> Problem:
    total = sum(v.persistent + v.temporary + v.output for v in p.nodes)
    memory = UNLIMITED if math.isinf(factor) else int(factor * total / n)
    devices = [Device(f"d{i}", memory) for i in range(n)]
    return Problem(p.nodes, p.edges, devices, p.comm)


def place(name: str, p: Problem) -> Plan:
    if name == "m_topo":
        return algorithms.m_topo(p)
    if name == "m_etf":
        return algorithms.m_etf(p)
    return algorithms.m_sct(p, threshold=0.5, time_limit=SCT_LP_SECONDS)


@dataclass
class Row:
    graph: str
    algorithm: str
    devices: int
    factor: float
    seconds: float
    ratio: float | None
    status: str


def run(
    graphs: dict[str, Problem],
    algs: dict[str, list[str]],
    grids: dict[tuple[str, str], list[tuple[int, float]]],
) -> list[Row]:
    rows: list[Row] = []
    for gname, base in graphs.items():
        lb_work = base.total_work()
        print(
            f"# {gname}: {len(base.nodes)} nodes, {len(base.edges)} edges, work {lb_work / 1e3:.1f}"
            f" ms, critical path {base.critical_path() / 1e3:.1f} ms",
            flush=True,
        )
        for alg in algs[gname]:
            for n, f in grids[gname, alg]:
                p = on_devices(base, n, f)
                t0 = time.perf_counter()
                try:
                    plan = place(alg, p)
                except algorithms.PlacementError as e:
                    rows.append(Row(gname, alg, n, f, time.perf_counter() - t0, None, "infeasible"))
                    print(f"{gname:>8} {alg:>6} n={n} f={f}: infeasible ({e.message[:60]})")
                    continue
                seconds = time.perf_counter() - t0
                status = "ok"
                try:
                    check(p, plan)
                except ValueError as e:
                    status = "memory" if str(e).startswith("memory") else "invalid"
                    print(f"  CHECK FAILED: {e}")
                ratio = plan.makespan / p.lower_bound()
                rows.append(Row(gname, alg, n, f, seconds, ratio, status))
                print(
                    f"{gname:>8} {alg:>6} n={n} f={f}: {seconds:8.3f} s  "
                    f"makespan/LB {ratio:6.3f}  {status}",
                    flush=True,
                )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1k DAG and 24 layers, n = 4 only.")
    parser.add_argument("--comm", choices=("sequential", "parallel"), default="sequential")
    args = parser.parse_args()

    graphs: dict[str, Problem] = {}
    algs: dict[str, list[str]] = {}
    every = ["m_topo", "m_etf", "m_sct"]
    sizes = (1_000,) if args.quick else (1_000, 10_000, 100_000)
    for n in sizes:
        key = f"{n // 1000}k"
        t0 = time.perf_counter()
        graphs[key] = layered_dag(n, comm=args.comm)
        print(f"# built {key} in {time.perf_counter() - t0:.1f} s", flush=True)
        algs[key] = ["m_topo", "m_etf"] if n >= 100_000 else every
    variants = [(24, True)] if args.quick else [(24, True), (48, True), (24, False)]
    for layers, fuse in variants:
        t0 = time.perf_counter()
        p, n_ops = transformer(layers, args.comm, fuse)
        key = f"tfm{layers}" + ("" if fuse else "_ops")
        graphs[key], algs[key] = p, every
        print(
            f"# built {key}: {n_ops} ops -> {len(p.nodes)} nodes in "
            f"{time.perf_counter() - t0:.1f} s",
            flush=True,
        )
    full = [(n, f) for n in DEVICES for f in FACTORS]
    grids = {}
    for gname, names in algs.items():
        for alg in names:
            if args.quick:
                grids[gname, alg] = [(4, f) for f in FACTORS]
            elif gname in ("10k", "100k"):  # the large DAGs at n = 4; m-SCT at one point only
                grids[gname, alg] = [(4, 1.5)] if alg == "m_sct" else [(4, f) for f in FACTORS]
            else:
                grids[gname, alg] = full
    rows = run(graphs, algs, grids)

    print()
    for gname in graphs:
        for alg in algs[gname]:
            mine = [r for r in rows if r.graph == gname and r.algorithm == alg]
            rep = next((r for r in mine if r.devices == 4 and r.factor == 1.5), mine[0])
            print(f"{alg}_{gname}_s: {rep.seconds:.3f}")
            ratios = [r.ratio for r in mine if r.ratio is not None]
            if ratios:
                print(f"{alg}_{gname}_ratio: {max(ratios):.3f}")
    print(f"peak_rss_mib: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f}")
    print(f"failures: {sum(r.status == 'infeasible' for r in rows)}")
    print(f"invalid: {sum(r.status == 'invalid' for r in rows)}")
    print(f"memory_violations: {sum(r.status == 'memory' for r in rows)}")


if __name__ == "__main__":
    main()
