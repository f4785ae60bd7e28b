"""`seqc calibrate`: measure this machine's device numbers for the placement cost model.

The placer prices an op by max(FLOPs / flops, bytes / bandwidth) and a transfer by latency +
bytes / link; the catalogue's defaults per device kind are round figures. This measures them on
the machine, with the TF backend (the one that runs placed programs), and prints a device call to
paste into a distribution block:

- flops: a float32 matmul (1024^3, 2048^3 in full mode), the median of repeated runs;
- bandwidth: bytes read and written by copying a large array, median;
- link and latency: copies of 1 KiB to 16 MiB (64 MiB in full mode) tensors from one logical
  CPU device to another, a least-squares line time = latency + bytes / link over the medians.

The measurement runs in a child process: logical devices must be configured before TensorFlow
starts, and the command's own process may already have started it.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from typing import Annotated, Any

import numpy as np
import typer
from rich.console import Console

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def _median_s(fn: Any, reps: int) -> float:
    fn()  # warm up
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def measure(quick: bool) -> dict[str, float]:
    """The measurements, in this process (TF must not have started yet)."""
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    reps = 5 if quick else 15

    n = 1024 if quick else 2048
    a = tf.random.normal([n, n])
    b = tf.random.normal([n, n])
    matmul = tf.function(lambda x, y: tf.reduce_sum(tf.matmul(x, y)))
    flops = 2 * n**3 / _median_s(lambda: matmul(a, b).numpy(), reps)

    big = np.ones((64 if quick else 256) * 2**20 // 4, np.float32)
    bandwidth = 2 * big.nbytes / _median_s(lambda: big.copy(), reps)

    sizes = [2**k for k in range(10, 25 if quick else 27, 2)]
    medians = []
    for size in sizes:
        with tf.device("/device:CPU:0"):
            x = tf.ones([size // 4], tf.float32)

        @tf.function
        def copy(t: tf.Tensor) -> tf.Tensor:
            with tf.device("/device:CPU:1"):
                return tf.reduce_sum(tf.identity(t))

        medians.append(_median_s(lambda c=copy, t=x: c(t).numpy(), reps))
    slope, intercept = np.polyfit(np.asarray(sizes, np.float64), np.asarray(medians), 1)
    link = 1.0 / slope if slope > 0 else float("inf")
    return {
        "flops": float(flops),
        "bandwidth": float(bandwidth),
        "link": float(link),
        "latency": float(max(intercept, 0.0)),
        "memory": float(_memory_bytes()),
    }


def _memory_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 * 2**30


def _size(nbytes: float, unit: str = "GB") -> str:
    return f'"{nbytes / 1e9:.1f}{unit}"'


def device_call(m: dict[str, float], devices: int = 2) -> str:
    """The `devices = ...` line of a distribution block with these numbers."""
    memory = f'"{m["memory"] / devices / 2**30:.0f}GiB"'
    return (
        f"devices = {devices} x cpu(memory = {memory}, flops = {m['flops']:.3g}, "
        f"bandwidth = {_size(m['bandwidth'])}, link = {_size(m['link'])}, "
        f"latency = {m['latency']:.3g})"
    )


def calibrate_cmd(
    quick: Annotated[bool, typer.Option(help="Smaller sizes, fewer repetitions.")] = False,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the measurements as JSON.")
    ] = False,
) -> None:
    """Measure this machine's flops, memory bandwidth, and link and latency between two logical
    devices, and print a device line for a distribution block."""
    from seqc.spec.errors import UsageError

    args = [sys.executable, "-m", "seqc.run.calibrate"] + (["--quick"] if quick else [])
    err.print("measuring (matmul, memory copy, transfers between two logical CPUs) ...")
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise UsageError(f"the measurement failed: {tail[0]}", code="calibrate-failed")
    m = json.loads(proc.stdout.strip().splitlines()[-1])
    if json_out:
        out.print(json.dumps(m, indent=2))
        return
    out.print(f"flops:     {m['flops'] / 1e9:.1f} GFLOP/s (float32 matmul)")
    out.print(f"bandwidth: {m['bandwidth'] / 1e9:.1f} GB/s (array copy)")
    out.print(f"link:      {m['link'] / 1e9:.1f} GB/s between two logical CPUs")
    out.print(f"latency:   {m['latency'] * 1e6:.1f} µs per transfer")
    out.print(device_call(m), soft_wrap=True)


if __name__ == "__main__":
    print(json.dumps(measure("--quick" in sys.argv)))
