"""This machine's device numbers for the placement cost model, measured (`seqc calibrate`).

The placer prices an op by max(FLOPs / flops, bytes / bandwidth) and a transfer by latency +
bytes / link; the catalogue's defaults per device kind are round figures. This measures them on
the machine with the backend that runs placed programs (`registry.CALIBRATION`, TF's
`seqc.backends.tf.calibrate`: flops of a matmul, memory bandwidth, link and latency between two
logical devices) and prints a device call to paste into a distribution block.

The measurement runs in a child process: logical devices must be configured before the framework
starts, and the command's own process may already have started it.
"""

from __future__ import annotations

import json
import subprocess
import sys

from seqc.backends.registry import CALIBRATION
from seqc.spec.errors import UsageError


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


def measure(quick: bool = False) -> dict[str, float]:
    """This machine's flops, memory bandwidth and memory, and the link and latency between two
    logical devices, measured in a child process (see the module docstring); `quick`: smaller
    sizes, fewer repetitions."""
    args = [sys.executable, "-m", CALIBRATION] + (["--quick"] if quick else [])
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise UsageError(f"the measurement failed: {tail[0]}", code="calibrate-failed")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def described(m: dict[str, float]) -> list[str]:
    """The measurements as `seqc calibrate` prints them, the device call last."""
    return [
        f"flops:     {m['flops'] / 1e9:.1f} GFLOP/s (float32 matmul)",
        f"bandwidth: {m['bandwidth'] / 1e9:.1f} GB/s (array copy)",
        f"link:      {m['link'] / 1e9:.1f} GB/s between two logical CPUs",
        f"latency:   {m['latency'] * 1e6:.1f} µs per transfer",
        device_call(m),
    ]
