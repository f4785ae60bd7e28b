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


def fastest_pair(
    a: Callable[[], object], b: Callable[[], object], reps: int
) -> tuple[float, float]:
    """The fastest wall seconds of `a()` and of `b()`, timed in alternation (after warm-up).

    For a difference of two timings (`b` doing what `a` does and more): alternating puts any
    slow spell of the machine on both, and the fastest run of each is the one least disturbed
    by other work, where noise only ever adds. A difference of medians of two separate series
    read 0 for a small product's backward on a busy machine."""
    for _ in range(WARMUP):
        a()
        b()
    best_a = best_b = float("inf")
    for _ in range(max(1, reps)):
        start = time.perf_counter()
        a()
        best_a = min(best_a, time.perf_counter() - start)
        start = time.perf_counter()
        b()
        best_b = min(best_b, time.perf_counter() - start)
    return best_a, best_b
