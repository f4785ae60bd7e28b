"""The split of a chain of units into contiguous stages that a pipeline runs fastest.

A pipeline's step takes about (M + S - 1) times its slowest stage's time per micro-batch, so
the best split is the one whose slowest stage is fastest: the classic linear partition
problem, solved exactly by dynamic programming over (units placed, stages used) in
O(S * U^2). A stage must also fit its device: its params, their gradients and optimizer state,
and the activations its micro-batches keep until their backward pass; a split that puts more
on some device is never chosen, and where none fits the caller reports the smallest excess.
Ties go to the split that keeps the most even memory, then the earliest cuts (deterministic).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence


def best_split(
    times: Sequence[float], memory: Sequence[float], stages: int, limit: float = math.inf
) -> list[int] | None:
    """The first unit of each stage after the first (S - 1 cut indices into `times`) of the
    split into `stages` contiguous, non-empty stages that minimises the slowest stage's time
    with every stage's memory at most `limit`; None when no split fits."""
    n = len(times)
    if stages < 1 or stages > n:
        return None
    t_pre = [0.0]
    m_pre = [0.0]
    for t, m in zip(times, memory, strict=True):
        t_pre.append(t_pre[-1] + t)
        m_pre.append(m_pre[-1] + m)
    inf = (math.inf, math.inf)
    # best[k][i]: (slowest stage, most memory) of units [0, i) in k stages; cut[k][i]: where
    # the k-th stage begins
    best = [[inf] * (n + 1) for _ in range(stages + 1)]
    cut = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = (0.0, 0.0)
    for k in range(1, stages + 1):
        for i in range(k, n - (stages - k) + 1):
            for j in range(k - 1, i):
                if best[k - 1][j] == inf:
                    continue
                mem = m_pre[i] - m_pre[j]
                if mem > limit:
                    continue
                prev_t, prev_m = best[k - 1][j]
                cand = (max(prev_t, t_pre[i] - t_pre[j]), max(prev_m, mem))
                if cand < best[k][i]:
                    best[k][i], cut[k][i] = cand, j
    if best[stages][n] == inf:
        return None
    cuts, i = [], n
    for k in range(stages, 0, -1):
        i = cut[k][i]
        cuts.append(i)
    return sorted(cuts)[1:]


def stage_sums(values: Sequence[float], cuts: Sequence[int]) -> list[float]:
    """The sum of `values` over each stage of the split at `cuts`."""
    bounds = [0, *cuts, len(values)]
    return [sum(values[a:b]) for a, b in itertools.pairwise(bounds)]
