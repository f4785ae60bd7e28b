"""Device numbers of this machine for the placement cost model, measured with TensorFlow.

TF is the backend that runs placed programs, so its numbers are the ones a plan pays:
- flops: a float32 matmul (1024^3, 2048^3 in full mode), the median of repeated runs;
- bandwidth: bytes read and written by copying a large array, median;
- link and latency: copies of 1 KiB to 16 MiB (64 MiB in full mode) tensors from one logical
  CPU device to another, a least-squares line time = latency + bytes / link over the medians.

Run as a module in a fresh process (`python -m seqc.backends.tf.calibrate [--quick]`, which
`seqc calibrate` does): logical devices must be configured before TensorFlow starts. It prints
the figures as one JSON line.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

import numpy as np


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
    matmul = tf.function(lambda x, y: tf.reduce_sum(tf.matmul(x, y)), autograph=False)
    flops = 2 * n**3 / _median_s(lambda: matmul(a, b).numpy(), reps)

    big = np.ones((64 if quick else 256) * 2**20 // 4, np.float32)
    bandwidth = 2 * big.nbytes / _median_s(lambda: big.copy(), reps)

    sizes = [2**k for k in range(10, 25 if quick else 27, 2)]
    medians = []
    for size in sizes:
        with tf.device("/device:CPU:0"):
            x = tf.ones([size // 4], tf.float32)

        @tf.function(autograph=False)
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


if __name__ == "__main__":
    print(json.dumps(measure("--quick" in sys.argv)))
