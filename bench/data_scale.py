"""Data-scale benchmark: the input pipeline of `lm.shakespeare.quick` on corpora of growing size.

Why: seqc's input pipeline encodes a corpus once into arrays on disk (`seqc data encode`, or a
run's first start) and streams batches from them, where it used to tokenise the whole corpus in
memory at every run: a run's memory should stay flat in the corpus size and its start should not
wait for the corpus to be tokenised again. This measures both, at each of `--sizes` MB of
training text (figures in docs/results.md, "Data at scale").

For each size, a work folder under `--work` holds a copy of `examples/lm/shakespeare.seq` and
`examples/common/` (the spec imports `../common/transformer.seq`; a `seqc.toml` makes the folder
the project root that imports resolve in), and the spec's corpus at
`.cache/data/shakespeare/` (read relative to the cwd) with `train.txt` replaced by the prepared
Shakespeare training text repeated to the size (whole lines); dev and test are the prepared
ones. Every size starts cold: its folder, with its tokenizer and shard cache, is made afresh.
Every command runs `python -m seqc.cli` in a subprocess, cwd the work folder:

- data_encode_mb_per_s: `seqc data encode` of every split (`--workers`), MB of train text a
  second; skipped, saying so, when this seqc has no `data encode` (then the first `seqc train`
  below is the cold run, which trains the tokenizer);
- data_first_step_s: wall time of a second two-step `seqc train` (`--no-dev-eval`), cache warm:
  process start to exit, so interpreter start, compilation and two steps are in it too (a run
  prints no per-step wall time);
- data_train_rss_gb: that run's peak RSS (`/usr/bin/time -v`; else `ru_maxrss` of a helper's
  children): the largest single process, so workers' memory is not summed in;
- data_input_tokens_per_s: the loader alone in a child process (`open_session`, then
  `--batches` train batches after `WARMUP` more), real tokens (the batch's `mask`) a second.

Run `python bench/data_scale.py` (1000 MB takes long) or `--sizes 5,20` for a quick look;
`--dry-run` only builds the corpora and prints the commands. The last lines are `name: value`
pairs for tools to read: each figure per size (`_100mb`), then unsuffixed for the largest size,
and `data_rss_ratio_largest_vs_smallest`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENT = "lm.shakespeare.quick"
SPEC = Path("examples/lm/shakespeare.seq")
CORPUS = Path(".cache/data/shakespeare")
WARMUP = 20
MB = 1_000_000
TIME = Path("/usr/bin/time")
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
"""Every child imports this checkout's seqc, whatever its cwd."""

_RUSAGE_HELPER = """import resource, subprocess, sys
rc = subprocess.run(sys.argv[2:]).returncode
kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
open(sys.argv[1], "w").write(f"Maximum resident set size (kbytes): {kb}\\n")
sys.exit(rc)
"""

_LOADER = """import json, sys, time
from pathlib import Path
from seqc.run.session import open_session
spec, experiment, cache, n, warmup = sys.argv[1:6]
t0 = time.perf_counter()
s = open_session(Path(spec), experiment, [], cache_dir=Path(cache))
opened = time.perf_counter() - t0
it = s.pipeline.batches("train")
for _ in range(int(warmup)):
    next(it)
t0, tokens = time.perf_counter(), 0
for _ in range(int(n)):
    tokens += int(next(it).arrays["mask"].sum())
print(json.dumps({"open_s": opened, "tokens": tokens, "s": time.perf_counter() - t0}))
"""


def build(work: Path, mb: int) -> tuple[Path, float]:
    """A fresh work folder for one size, and the MB of train text actually written."""
    folder = work / f"{mb}mb"
    shutil.rmtree(folder, ignore_errors=True)
    (folder / SPEC.parent).mkdir(parents=True)
    shutil.copy(ROOT / SPEC, folder / SPEC)
    shutil.copytree(ROOT / "examples" / "common", folder / "examples" / "common")
    # the folder is the spec's project root, so `../common/...` imports resolve under any --work
    (folder / "seqc.toml").write_text("# data_scale.py's copy of the example tree\n")
    data = folder / CORPUS
    data.mkdir(parents=True)
    for name in ("dev.txt", "test.txt"):
        shutil.copy(ROOT / CORPUS / name, data / name)
    text = (ROOT / CORPUS / "train.txt").read_bytes()
    copies, rest = divmod(mb * MB, len(text))
    tail = text[: text.rfind(b"\n", 0, rest) + 1]  # whole lines only
    with (data / "train.txt").open("wb") as f:
        for _ in range(copies):
            f.write(text)
        f.write(tail)
    written = copies * len(text) + len(tail)
    return folder, written / MB


def seqc(*args: str) -> list[str]:
    return [sys.executable, "-m", "seqc.cli", *args]


def run(cmd: list[str], cwd: Path, what: str) -> tuple[float, float, str]:
    """(wall seconds, peak RSS in GB, stdout) of a command; exits saying why if it fails."""
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        if TIME.exists():
            wrapped = [str(TIME), "-v", "-o", rss.name, *cmd]
        else:
            wrapped = [sys.executable, "-c", _RUSAGE_HELPER, rss.name, *cmd]
        t0 = time.perf_counter()
        proc = subprocess.run(wrapped, cwd=cwd, env=ENV, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        report = Path(rss.name).read_text()
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        sys.exit(f"data_scale: {what} failed (exit {proc.returncode}) in {cwd}:\n{tail}")
    found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", report)
    return wall, int(found.group(1)) * 1024 / 1e9 if found else float("nan"), proc.stdout


def has_encode() -> bool:
    """Whether this seqc has `seqc data encode` (the command is new)."""
    proc = subprocess.run(seqc("data", "encode", "--help"), capture_output=True, env=ENV)
    return proc.returncode == 0


def measure(folder: Path, train_mb: float, args: argparse.Namespace, encode: bool) -> dict:
    spec, cache = str(SPEC), str(folder / "cache")
    common = ["-e", EXPERIMENT, "--cache-dir", cache]
    train = [*common, "--set", "train.steps=2", "--no-dev-eval", "--no-progress"]
    counts = [str(args.batches), str(WARMUP)]
    cmds = {
        "encode": seqc("data", "encode", spec, *common, "--workers", str(args.workers)),
        "train1": seqc("train", spec, *train, "--run-dir", str(folder / "runs" / "cold")),
        "train2": seqc("train", spec, *train, "--run-dir", str(folder / "runs" / "warm")),
        "loader": [sys.executable, "-c", _LOADER, spec, EXPERIMENT, cache, *counts],
    }
    if args.dry_run:
        for name, cmd in cmds.items():
            if name != "encode" or encode:
                shown = " ".join(c if "\n" not in c else "<loader script>" for c in cmd)
                print(f"  [{folder.name}] {name}: (cd {folder} && {shown})")
        return {}
    out: dict = {"train_mb": train_mb}
    if encode:
        wall, rss, _ = run(cmds["encode"], folder, "seqc data encode")
        out |= {"encode_mb_per_s": train_mb / wall, "encode_rss_gb": rss}
    out["cold_train_s"], _, _ = run(cmds["train1"], folder, "the first seqc train")
    out["first_step_s"], out["train_rss_gb"], _ = run(cmds["train2"], folder, "seqc train")
    _, out["loader_rss_gb"], loaded = run(cmds["loader"], folder, "the loader")
    got = json.loads(loaded.strip().splitlines()[-1])
    out["input_tokens_per_s"] = got["tokens"] / got["s"]
    out["loader_open_s"] = got["open_s"]
    return out


COLUMNS = (  # (key, heading, format)
    ("train_mb", "train MB", "{:.1f}"),
    ("encode_mb_per_s", "encode MB/s", "{:.2f}"),
    ("cold_train_s", "cold train s", "{:.1f}"),
    ("first_step_s", "warm train s", "{:.1f}"),
    ("train_rss_gb", "train RSS GB", "{:.2f}"),
    ("loader_open_s", "loader open s", "{:.1f}"),
    ("input_tokens_per_s", "input tok/s", "{:,.0f}"),
    ("loader_rss_gb", "loader RSS GB", "{:.2f}"),
)
FIGURES = {  # `name: value` lines: figure name -> row key
    "data_encode_mb_per_s": "encode_mb_per_s",
    "data_first_step_s": "first_step_s",
    "data_train_rss_gb": "train_rss_gb",
    "data_input_tokens_per_s": "input_tokens_per_s",
}


def _num(x: float) -> str:
    return f"{x:.0f}" if abs(x) >= 1e4 else f"{x:.4g}"


def report(rows: dict[int, dict]) -> None:
    heads = ["size"] + [h for _, h, _ in COLUMNS]
    table = [
        [f"{mb} MB"] + [fmt.format(r[k]) if k in r else "-" for k, _, fmt in COLUMNS]
        for mb, r in rows.items()
    ]
    widths = [max(len(x) for x in col) for col in zip(heads, *table, strict=True)]
    for line in [heads, *table]:
        print("  ".join(x.rjust(w) for x, w in zip(line, widths, strict=True)))
    print()
    for mb, r in rows.items():
        for name, key in FIGURES.items():
            if key in r:
                print(f"{name}_{mb}mb: {_num(r[key])}")
    largest, smallest = rows[max(rows)], rows[min(rows)]
    for name, key in FIGURES.items():
        if key in largest:
            print(f"{name}: {_num(largest[key])}")
    ratio = largest["train_rss_gb"] / smallest["train_rss_gb"]
    print(f"data_rss_ratio_largest_vs_smallest: {ratio:.3f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--sizes", default="100,1000", help="MB of train text, comma-separated")
    ap.add_argument("--work", type=Path, default=ROOT / ".cache" / "bench-data-scale")
    ap.add_argument("--batches", type=int, default=2000, help="timed loader batches")
    ap.add_argument("--workers", type=int, default=2, help="`seqc data encode --workers`")
    ap.add_argument("--dry-run", action="store_true", help="build the corpora, print commands")
    args = ap.parse_args(argv)
    sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    if not (ROOT / CORPUS / "train.txt").is_file():
        sys.exit(f"data_scale: no {CORPUS}/train.txt; run `seqc data prepare shakespeare` first")
    encode = has_encode()
    if not encode:
        print("note - this seqc has no `seqc data encode`: the encode figure is skipped, and")
        print("  the first `seqc train` of each size is its cold run\n")
    rows: dict[int, dict] = {}
    for mb in sizes:
        folder, train_mb = build(args.work.resolve(), mb)
        print(f"[{mb} MB] {train_mb:.1f} MB of train text in {folder}", flush=True)
        rows[mb] = measure(folder, train_mb, args, encode)
    if not args.dry_run:
        print()
        report(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
