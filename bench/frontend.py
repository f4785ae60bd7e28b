"""Front-end benchmark: parse, load, check and resolve a large generated spec.

Why: `seqc check` runs on every save in an editor and in CI on every spec of a project; it must
stay interactive (well under a second) for a program far larger than the examples. The
generated program has `--layers` user layers in several imported files (built-in calls plus
calls of earlier layers, some under `repeat`, never a cycle), a few models, inputs and tasks, and
`--experiments` experiments in `extends` chains with `train { }` blocks and overrides such as
`lm0.model.d = 128`.

Each phase is timed `--reps` times on a fresh program and the median is reported:

- parse: `parse_text` of every file (text already in memory);
- load: `load_program` (parse again, follow imports, index the declarations);
- check: `check_layers`, every user layer checked statically;
- resolve: every experiment resolved after the check (all; one's median; the slowest one);
- total: `check_file(root)`, what `seqc check FILE` does, from empty caches (every file
  parsed and its parse entry written, everything checked, the verdict written), timed inside a
  fresh process after its imports, as a `seqc check` runs it; the later half of the imports is
  parsed by a forked helper (`seqc.resolve.prefetch`);
- total_serial: the same with the helper off (`SEQC_PARALLEL_PARSE=0`), in the same rep;
- warm: the same again, as on a second `seqc check` of an unchanged program: the verdict of the
  first is still true (`seqc.compiler.check_cache`: every file is read and its digest compared);
- warm_parse: with the verdict removed but every file in the parse cache
  (`seqc.spec.parse_cache`): the IR is loaded, not parsed, and then checked in full, as after
  an edit that the parse cache absorbs (an edited file is parsed again on top of this);
- check_example_wall / _parse_wall / _cold_wall: `seqc check examples/lm/shakespeare.seq` as a
  whole process (interpreter start and imports included): again unchanged, with only its parse
  entries, and with an empty cache folder.

The parse cache lives in a temporary folder for the run (`SEQC_PARSE_CACHE`). The machine may be
shared: every figure is a median over `--reps`, and figures meant to be compared are measured in
the same run.

Run `python bench/frontend.py`; the last lines are `name: value` pairs for tools to read.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from seqc.compiler.check import check_program  # noqa: E402
from seqc.compiler.check_cache import check_file  # noqa: E402
from seqc.resolve import prefetch  # noqa: E402
from seqc.resolve.experiment import resolve  # noqa: E402
from seqc.resolve.layers.check import check_layers  # noqa: E402
from seqc.resolve.program import Program, load_program  # noqa: E402
from seqc.spec import parse_cache  # noqa: E402
from seqc.spec.parser import parse_text  # noqa: E402

TIERS = 3
"""Layers of tier t > 0 call layers of tier t - 1 only, so there is no cycle and a model's
instance tree stays the size of a real model's rather than growing exponentially with depth."""

CHAIN = 5
"""Experiments come in `extends` chains of this length."""

TARGET_S = 1.2
"""What `seqc check` of a program this size may take from an empty parse cache (issue 17)."""

TARGET_WARM_S = 0.3
"""... and again, unchanged (issue 17)."""

TARGET_EXAMPLE_S = 0.3
"""`seqc check` of a bundled example as a whole process, imports included."""

EXAMPLE = ROOT / "examples" / "lm" / "shakespeare.seq"

N_TASKS = 4
N_MODELS = 3
N_INPUTS = 2


def _tier0(i: int) -> str:
    """A pre-norm block of built-in layers; every few a variant, so the checker sees variety."""
    norm = "RMSNorm" if i % 3 == 0 else "LayerNorm"
    causal = "true" if i % 2 else "false"
    mlp = (
        'FeedForward(d, ff, activation = "gelu", dropout = dropout)'
        if i % 4
        else "FeedForward(d, ff, gated = true)"
    )
    params = 'd: int, heads: int = 4, ff: int = 4 * d "hidden width", dropout: float = 0.1'
    return f"""layer L{i}({params}) {{
  "Generated block {i}: attention then an MLP, each with a residual."
  norm1 = {norm}(d)
  attn = SelfAttention(d, heads, causal = {causal}, dropout = dropout)
  norm2 = {norm}(d)
  mlp = {mlp}  # position-wise
  forward (x: float32[B, T, d]) -> float32[B, T, d] {{
    x = x + attn(norm1(x))
    return x + mlp(norm2(x))
  }}
}}
"""


def _tiered(i: int, inner: int, repeat: bool) -> str:
    """A block wrapping one layer of the tier below, sometimes repeated."""
    rep = "repeat(2) " if repeat else ""
    return f"""layer L{i}(d: int, heads: int = 4, dropout: float = 0.1) {{
  norm = LayerNorm(d)
  inner = {rep}L{inner}(d, heads, dropout = dropout)
  proj = Linear(d, d, activation = "relu")
  drop = Dropout(dropout)
  forward (x: float32[B, T, d], mask: bool[B, T]) -> float32[B, T, d] {{
    h = inner(norm(x))
    return x + drop(proj(h))
  }}
}}
"""


def _tier_bounds(n_layers: int) -> list[range]:
    """Layer indices of each tier (tier 0 first)."""
    edges = [t * n_layers // TIERS for t in range(TIERS + 1)]
    return [range(edges[t], edges[t + 1]) for t in range(TIERS)]


def _layers(n_layers: int) -> list[str]:
    tiers = _tier_bounds(n_layers)
    out: list[str] = []
    for t, indices in enumerate(tiers):
        below = tiers[t - 1] if t else range(0)
        for i in indices:
            if t == 0 or not below:
                out.append(_tier0(i))
            else:
                out.append(_tiered(i, below[(i * 7) % len(below)], repeat=i % 3 == 0))
    return out


def _model(k: int, block: int) -> str:
    params = (
        'vocab: int, d: int = 256 "model width", layers: int = 2, heads: int = 4, '
        "dropout: float = 0.1"
    )
    return f"""model Net{k}({params}) {{
  "Generated model {k}: an embedding, a stack of L{block}, a tied softmax."
  embed = Embedding(vocab, d, scale_output = true)
  pos = SinusoidalPosition(d)
  blocks = repeat(layers) L{block}(d, heads, dropout = dropout)
  norm = LayerNorm(d)
  out = Softmax(vocab, d, tie = embed)
  forward (ids: int32[B, T]) -> float32[B, T, vocab] {{
    return out(norm(blocks(pos(embed(ids)))))
  }}
}}
"""


def _input(k: int) -> str:
    return f"""input corpus{k} {{
  "Generated corpus {k}."
  train = text("data/{k}/train.txt")
  dev = text("data/{k}/dev.txt")
  tokenizer = sentencepiece(vocab_size = {4000 + 1000 * k}, model_type = "unigram")
  buckets = {{32: 128, 64: 64, 128: 32}}
}}
"""


def _task(k: int) -> str:
    return f"""task lm{k} {{
  input = corpus{k % N_INPUTS}
  model = Net{k % N_MODELS}(vocab = input.vocab_size)
  loss = cross_entropy(label_smoothing = 0.1)
  metrics = [perplexity, accuracy]
}}
"""


def _experiment(i: int) -> str:
    group, pos = divmod(i, CHAIN)
    name = f"bench.g{group}.e{pos}"
    task = f"lm{group % N_TASKS}"
    if pos == 0:
        tasks = task if group % 2 else f"{task}, lm{(group + 1) % N_TASKS}"
        # what `seqc train` would run (`seqc check` refuses the rest): a multi-task model on one
        # device, unplaced
        placement = "m_etf" if group % 2 else "single"
        return f"""experiment {name} {{
  "Root of chain {group}."
  tasks = [{tasks}]
  description = "generated root {group}"
  tags = ["bench", "g{group}"]
  train {{
    optimizer = adam(lr = warmup_rsqrt(peak = 1e-3, warmup = 200), beta2 = 0.98)
    steps = 1_000
    seed = {group}
  }}
  distribution {{
    mesh = {{data: 1}}
    devices = 4 x gpu(memory = "16GiB")
    placement = {placement}
  }}
  export {{
    onnx(quantize = "int8")
  }}
}}
"""
    lines = [f"experiment {name} extends bench.g{group}.e{pos - 1} {{"]
    lines.append(f"  {task}.model.d = {64 * (pos + 1)}")
    lines.append(f"  {task}.model.layers = {1 + pos % 3}")
    if pos % 2:
        lines.append("  train {")
        lines.append(f"    optimizer = adamw(lr = cosine({pos}e-4, warmup = 100))")
        lines.append(f"    steps = {1000 * (pos + 1)}")
        lines.append("  }")
    else:
        lines.append(f"  train.steps = {500 * pos}")
        lines.append(f"  {task}.input.max_length = {64 * pos}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def generate(n_layers: int = 1000, n_experiments: int = 200, n_files: int = 10) -> dict[str, str]:
    """The generated program as relative path -> text; `main.seq` is the root."""
    layers = _layers(n_layers)
    n_files = max(1, min(n_files, n_layers))
    files: dict[str, str] = {}
    for f in range(n_files):
        part = layers[f * len(layers) // n_files : (f + 1) * len(layers) // n_files]
        header = f"seqc 1\n\n# Generated layers, part {f}.\n\n"
        files[f"layers/part{f}.seq"] = header + "\n".join(part)
    top = _tier_bounds(n_layers)[-1]
    blocks = top if len(top) else range(n_layers)
    head = ["seqc 1", "", *(f'import "{p}"' for p in files), ""]
    body = [
        *(_input(k) for k in range(N_INPUTS)),
        *(_model(k, blocks[(k * 13) % len(blocks)]) for k in range(N_MODELS)),
        *(_task(k) for k in range(N_TASKS)),
        *(_experiment(i) for i in range(n_experiments)),
    ]
    files["main.seq"] = "\n".join(head) + "\n" + "\n".join(body)
    return files


def write(files: dict[str, str], root: Path) -> Path:
    """Write the files under `root`; returns the root spec's path."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "main.seq"


def _timed(fn: Callable[[], object], collect: bool = True) -> float:
    """Seconds `fn` takes, from a collected heap so earlier runs' garbage is not billed to it.

    The collector stays on while timing: its passes are part of what a user waits for."""
    if collect:
        gc.collect()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _once(main: Path, files: dict[str, str]) -> dict[str, float]:
    """Seconds of each phase in one run, on a freshly loaded program."""
    t: dict[str, float] = {}
    t["parse"] = _timed(lambda: [parse_text(text, rel) for rel, text in files.items()])
    loaded: list[Program] = []
    t["load"] = _timed(lambda: loaded.append(load_program(main)))
    program = loaded[0]
    t["check"] = _timed(lambda: check_layers(program))
    t["resolve"] = _timed(lambda: [resolve(program, n) for n in program.experiments])
    each = [_timed(lambda n=n: resolve(program, n), collect=False) for n in program.experiments]
    t["resolve_one"] = statistics.median(each)
    t["resolve_max"] = max(each)
    t["total_serial"] = _cold_check(main, helper=False)
    t["total"] = _cold_check(main, helper=True)
    check_file(main)  # the caches as that left them, in this process too
    t["warm"] = _timed(lambda: check_file(main))  # the verdict of the run before holds
    _empty_cache(parses=False)
    t["warm_parse"] = _timed(lambda: check_file(main))  # every file's IR from the parse cache
    return t


_COLD_PROBE = """
import sys, time
from seqc.compiler.check_cache import check_file
from seqc.spec.parser import parse_text
parse_text("seqc 1\\n", "warm-up.seq")  # Lark built, as in the phases measured in-process
start = time.perf_counter()
check_file(sys.argv[1])
print(time.perf_counter() - start)
"""


def _cold_check(main: Path, helper: bool) -> float:
    """Seconds of `check_file(main)` from empty caches, in a fresh process as `seqc check`
    runs (its heap holds only what that check built, which is what a fork copies), after
    Python's and seqc's imports and the parser's construction."""
    _empty_cache()
    env = {**os.environ, prefetch.ENV: "1" if helper else "0"}
    run = subprocess.run(
        [sys.executable, "-c", _COLD_PROBE, str(main)],
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    return float(run.stdout.strip().splitlines()[-1])


def _empty_cache(parses: bool = True) -> None:
    """Remove the verdicts of `seqc check` and, with `parses`, the parse entries."""
    folder = parse_cache.cache_dir()
    if folder is not None:
        for entry in [*folder.glob("checks/*.json"), *(folder.glob("*.ir") if parses else ())]:
            entry.unlink()


def _check_wall(mode: str) -> float:
    """Seconds of `seqc check EXAMPLE` as a process. `mode`: "warm" (its verdict holds),
    "parse" (no verdict, its files in the parse cache) or "cold" (an empty cache folder)."""
    env = dict(os.environ)
    folder = None
    if mode == "cold":
        folder = Path(tempfile.mkdtemp(prefix="seqc-bench-cold-"))
        env[parse_cache.ENV] = str(folder)
    elif mode == "parse":
        _empty_cache(parses=False)
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "seqc.cli", "check", str(EXAMPLE)],
        env=env,
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    seconds = time.perf_counter() - start
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
    return seconds


def measure_example(reps: int) -> dict[str, float]:
    """Median wall seconds of `seqc check EXAMPLE` in each mode, interleaved rep by rep."""
    _check_wall("warm")  # fills the caches
    seconds: dict[str, list[float]] = {"warm": [], "parse": [], "cold": []}
    for _ in range(reps):
        for mode, runs in seconds.items():
            runs.append(_check_wall(mode))
            if mode == "parse":
                _check_wall("warm")  # the verdict back, for the next rep's warm run
    return {mode: statistics.median(runs) for mode, runs in seconds.items()}


def measure(main: Path, files: dict[str, str], reps: int) -> dict[str, float]:
    """Median seconds of each phase over `reps` runs."""
    runs = [_once(main, files) for _ in range(reps)]
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=1000)
    parser.add_argument("--experiments", type=int, default=200)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args(argv)

    files = generate(args.layers, args.experiments)
    with tempfile.TemporaryDirectory(prefix="seqc-bench-") as tmp:
        os.environ[parse_cache.ENV] = str(Path(tmp) / "parse-cache")
        main_path = write(files, Path(tmp) / "spec")
        program = load_program(main_path)
        check_program(program)  # fail loudly, before timing, if the generator rots
        n_layers = sum(1 for d in program.layers.values() if d.kind == "layer")
        n_models = len(program.layers) - n_layers
        n_exps = len(program.experiments)
        lines = sum(t.count("\n") for t in files.values())
        t = measure(main_path, files, args.reps)
        example = measure_example(args.reps)

    print(f"seqc front end on {len(files)} files, {lines} lines: {n_layers} layers, ", end="")
    print(f"{n_models} models, {n_exps} experiments; median of {args.reps} runs")
    rows = [
        ("parse (all files)", t["parse"]),
        ("load + index", t["load"]),
        ("check all layers", t["check"]),
        ("resolve one experiment", t["resolve_one"]),
        ("resolve one (slowest)", t["resolve_max"]),
        (f"resolve all {n_exps}", t["resolve"]),
        ("total: check_file, no caches", t["total"]),
        ("  the same, no parse helper", t["total_serial"]),
        ("warm: the same again (verdict)", t["warm"]),
        ("warm, parse cache only", t["warm_parse"]),
        (f"seqc check {EXAMPLE.name} (process)", example["warm"]),
        ("  the same, parse cache only", example["parse"]),
        ("  the same, empty cache", example["cold"]),
    ]
    for label, seconds in rows:
        print(f"  {label:<34} {seconds * 1000:9.1f} ms")
    for label, value, target in (
        ("total", t["total"], TARGET_S),
        ("warm", t["warm"], TARGET_WARM_S),
        ("check_example_wall", example["warm"], TARGET_EXAMPLE_S),
    ):
        verdict = "met" if value <= target else "MISSED"
        print(f"  target: {label} at most {target:g} s: {verdict}")
    print(f"frontend_parse_s: {t['parse']:.4f}")
    print(f"frontend_load_s: {t['load']:.4f}")
    print(f"frontend_check_s: {t['check']:.4f}")
    print(f"frontend_resolve_s: {t['resolve']:.4f}")
    print(f"frontend_total_s: {t['total']:.4f}")
    print(f"frontend_total_serial_s: {t['total_serial']:.4f}")
    print(f"frontend_warm_s: {t['warm']:.4f}")
    print(f"frontend_warm_parse_s: {t['warm_parse']:.4f}")
    print(f"frontend_warm_over_total: {t['warm'] / t['total']:.3f}")
    print(f"check_example_wall_s: {example['warm']:.4f}")
    print(f"check_example_parse_wall_s: {example['parse']:.4f}")
    print(f"check_example_cold_wall_s: {example['cold']:.4f}")
    print(f"frontend_layers: {n_layers}")
    print(f"frontend_experiments: {n_exps}")


if __name__ == "__main__":
    main()
