"""Timing a compiled function the way a profiler should: warm-up first, then the median.

The first calls compile (XLA, `tf.function`) and fill caches; a machine shared with other work
gives a few slow outliers. So every timing here calls the function `WARMUP` times untimed, then
`reps` times, and reports the median.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

WARMUP = 2


def median_seconds(fn: Callable[[], object], reps: int) -> float:
    """Median wall seconds of `fn()` (which must block until its result is ready)."""
    for _ in range(WARMUP):
        fn()
    times = []
    for _ in range(max(1, reps)):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
