"""`seqc serve` under load: throughput and latency at several concurrencies, with batching on and
off, against the sequential `seqc decode --artifact` loop over the same sentences.

    python bench/serve.py                       # trains and exports the smoke translator
    python bench/serve.py --artifact runs/X/export/onnx-none --artifact runs/X/export/onnx-dynamic

Each artifact is served by a real `seqc serve` process on a free localhost port; an asyncio
httpx client sends one sentence per request (dev verses of bible-en-es) from C concurrent
workers, a bounded number of requests each round. Measured side by side in one run (the
machine is noisy): the server with its default batching, the server with --max-batch-size 1,
and the decode loop (the artifact's `TextDecoder`, one sentence after another, in this
process). Ends with `name: value` lines (the first artifact's plain, later ones suffixed by
their folder's name).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "examples" / "mt" / "bible_transformer.seq"
EXPERIMENT = "mt.bible.transformer.smoke"
RUN = ROOT / "runs" / "bench-serve"
DEV = ROOT / ".cache" / "data" / "bible-en-es" / "dev.tsv"
TRAIN_SETS = ["train.steps=600", "translate.decode=greedy(max_length = 64)"]
CONCURRENCY = (1, 8, 32, 64)


def _seqc(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "seqc.cli", *args], check=True, cwd=ROOT)


def smoke_artifacts() -> list[Path]:
    """The smoke translator trained (600 steps) and exported to ONNX, fp32 and int8, once."""
    export = RUN / "export"
    wanted = [export / "onnx-none", export / "onnx-dynamic"]
    if all((p / "manifest.json").is_file() for p in wanted):
        return wanted
    if not DEV.is_file():
        _seqc("data", "prepare", "bible-en-es")
    sets = [a for s in TRAIN_SETS for a in ("--set", s)]
    base = [str(SPEC), "-e", EXPERIMENT, "--run-dir", str(RUN), *sets]
    _seqc("train", *base, "--no-progress")
    _seqc("export", *base, "--format", "onnx", "--quantize", "none", "--quantize", "dynamic")
    return wanted


def sentences(n: int) -> list[str]:
    lines = DEV.read_text(encoding="utf-8").splitlines()
    return [line.split("\t")[0] for line in lines[:n]]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    """A `seqc serve` process for one artifact, started and stopped around a `with`."""

    def __init__(self, artifact: Path, *flags: str) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = [sys.executable, "-m", "seqc.cli", "serve", str(artifact), "--name", "m"]
        self.args += ["--port", str(self.port), "--max-queue", "4096", *flags]

    def __enter__(self) -> Served:
        self.proc = subprocess.Popen(
            self.args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/v2/health/ready", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"seqc serve exited {self.proc.returncode}")
            time.sleep(0.2)
        raise RuntimeError("seqc serve did not become ready")

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def __exit__(self, *exc: object) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


async def load(
    url: str, texts: list[str], concurrency: int, params: dict[str, int]
) -> tuple[float, list[float]]:
    """Requests per second and each request's latency (ms): `concurrency` workers, one
    sentence a request, every sentence once."""
    queue: asyncio.Queue[str] = asyncio.Queue()
    for t in texts:
        queue.put_nowait(t)
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=concurrency)

    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:

        async def worker() -> None:
            while not queue.empty():
                text = queue.get_nowait()
                t = time.perf_counter()
                r = await client.post(
                    "/v1/models/m/translate", json={"text": [text], "parameters": params}
                )
                r.raise_for_status()
                latencies.append(1000 * (time.perf_counter() - t))

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return len(texts) / elapsed, latencies


def decode_loop_rps(artifact: Path, texts: list[str], beam: int | None) -> float:
    """The sequential loop `seqc decode --artifact` runs: one sentence after another (with the
    requests' beam where --beam gives one)."""
    from seqc.run.decoding.text_decoder import from_artifact, hypothesis
    from seqc.run.export.artifact import load_artifact
    from seqc.serve.params import strategy_for

    gen = from_artifact(load_artifact(artifact))
    if beam is not None:
        gen.strategy = strategy_for(gen.strategy, {"beam": beam}, gen.strategy.max_length)
    hypothesis(gen, texts[0])  # warm up, as the server does
    started = time.perf_counter()
    for t in texts:
        hypothesis(gen, t)
    return len(texts) / (time.perf_counter() - started)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def bench(
    artifact: Path, n: int, suffix: str, delay_ms: float, batch: int | None, beam: int | None
) -> list[str]:
    texts = sentences(n)
    rows, out = [], []
    results: dict[tuple[str, int], tuple[float, list[float]]] = {}
    params = {} if beam is None else {"beam": beam}
    batched: tuple[str, ...] = ("--max-delay-ms", str(delay_ms))
    if batch is not None:
        batched += ("--max-batch-size", str(batch))
    for mode, flags in (("batched", batched), ("unbatched", ("--max-batch-size", "1"))):
        with Served(artifact, *flags) as s:
            if mode == "batched":
                rss = s.rss_mb()
            for c in CONCURRENCY:
                if mode == "unbatched" and c not in (1, 32):
                    continue
                count = len(texts) if c > 1 else max(16, len(texts) // 4)
                results[(mode, c)] = asyncio.run(load(s.url, texts[:count], c, params))
    loop = decode_loop_rps(artifact, texts[: max(16, len(texts) // 4)], beam)
    for (mode, c), (rps, lat) in sorted(results.items()):
        p50, p99 = statistics.median(lat), pct(lat, 0.99)
        rows.append(f"  {mode:9s} c={c:<3d} {rps:7.2f} req/s  p50 {p50:8.1f} ms  p99 {p99:8.1f} ms")
    print(f"{artifact} ({n} dev sentences; decode loop {loop:.2f} sentences/s)")
    print("\n".join(rows))
    b = results
    out += [
        f"serve_rps_c1{suffix}: {b[('batched', 1)][0]:.2f}",
        f"serve_rps_c8{suffix}: {b[('batched', 8)][0]:.2f}",
        f"serve_rps_c32{suffix}: {b[('batched', 32)][0]:.2f}",
        f"serve_rps_c64{suffix}: {b[('batched', 64)][0]:.2f}",
        f"serve_p50_ms_c1{suffix}: {statistics.median(b[('batched', 1)][1]):.1f}",
        f"serve_p99_ms_c32{suffix}: {pct(b[('batched', 32)][1], 0.99):.1f}",
        f"serve_batching_speedup{suffix}: {b[('batched', 32)][0] / b[('unbatched', 32)][0]:.2f}",
        f"serve_vs_decode_loop{suffix}: {b[('batched', 32)][0] / loop:.2f}",
        f"serve_rss_mb{suffix}: {rss:.0f}",
    ]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--artifact", type=Path, action="append", help="a translator's export")
    ap.add_argument("--sentences", type=int, default=128)
    ap.add_argument("--max-delay-ms", type=float, default=5.0, help="the batched server's")
    ap.add_argument("--max-batch-size", type=int, help="the batched server's (default its own)")
    ap.add_argument(
        "--beam", type=int, help="every request's beam (1: greedy; default: the model's)"
    )
    args = ap.parse_args()
    os.chdir(ROOT)
    artifacts = args.artifact or smoke_artifacts()
    lines = []
    for i, artifact in enumerate(artifacts):
        suffix = "" if i == 0 else f"_{artifact.name}"
        lines += bench(
            artifact, args.sentences, suffix, args.max_delay_ms, args.max_batch_size, args.beam
        )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
