"""Proposal distributions Q over a vocabulary, for sampling-based training criteria.

Sampled softmax, NCE and self-normalized importance sampling score a target against K candidate
ids drawn from a context-independent Q instead of against all V words. Each needs, for the
candidates and for the targets, the log expected count log E_y of y in the candidate set.

Design, and why:

- one set of K candidates per training step, shared by the whole batch (as TF, RETURNN and
  Lingvo do): the candidate logits are then one [N, d] x [d, K] matmul;
- drawn WITH replacement, so E_y = K * Q(y) exactly and log E_y = log K + log Q(y) is exact for
  every criterion (TF's `unique=True` only approximates the inclusion probability);
- drawn on the host with numpy from a generator seeded by (seed, step, a tag of this stream):
  a run resumed at step k draws what an uninterrupted run drew, every backend sees the same
  candidates, and the tag keeps the stream independent of the batcher's (seed, epoch) one;
- Q is stored as float64 log probabilities, all finite: a Q(y) = 0 would make log E_y = -inf and
  the loss of a target y infinite or NaN, so every proposal gives every id some mass.

Proposals: `uniform`; `unigram` (smoothed counts, (count + 1) ** power, power 0.75 as in
word2vec); `log_uniform` (Zipf over ids, P(k) = (log(k+2) - log(k+1)) / log(V+1), the TF
default), which is only a good proposal when ids are sorted by descending frequency:
`frequency_order` and `order_warning` check that from training counts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Final

import numpy as np

KINDS: Final[tuple[str, ...]] = ("uniform", "unigram", "log_uniform")

# Third seed word: keeps this stream apart from other generators seeded from the same numbers
# (e.g. the batcher's (seed, epoch)). Arbitrary but fixed: changing it changes every draw.
_DRAW_STREAM: Final[int] = 0x51_50_52_4F  # "QPRO"

# Below this rank correlation between id and frequency rank, log_uniform puts its mass on the
# wrong words; 0.5 is loose on purpose so a mostly sorted vocab with a shuffled tail passes.
ORDER_THRESHOLD: Final[float] = 0.5

_CHUNK_TOKENS: int = 1 << 20  # ids per bincount in count_tokens


def _logsumexp(x: np.ndarray) -> float:
    m = float(np.max(x))  # shifted by the max so exp cannot overflow
    return m + math.log(float(np.sum(np.exp(x - m))))


@dataclass(frozen=True, eq=False)
class Proposal:
    """A proposal Q over ids [0, V): its kind and its log probabilities (float64 [V]).

    Immutable (log_q is made read-only), so one instance can be shared by the training loop and
    any diagnostics without one of them changing what the other samples from.
    """

    kind: str
    log_q: np.ndarray

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown proposal kind {self.kind!r}; expected one of {KINDS}")
        log_q = np.array(self.log_q, dtype=np.float64)  # a copy: the caller's array stays theirs
        if log_q.ndim != 1 or log_q.size == 0:
            raise ValueError(f"log_q must be a non-empty 1-D array, got shape {log_q.shape}")
        if not np.all(np.isfinite(log_q)):
            raise ValueError("log_q must be finite: Q(y) = 0 would make log E_y = -inf")
        total = _logsumexp(log_q)
        if abs(total) > 1e-9:
            raise ValueError(f"log_q must be normalized (logsumexp 0), got {total:.3g}")
        log_q.setflags(write=False)
        object.__setattr__(self, "log_q", log_q)

    @property
    def vocab(self) -> int:
        """V, the number of ids Q is defined over."""
        return int(self.log_q.shape[0])

    @cached_property
    def _cdf(self) -> np.ndarray:
        # Divided by its last entry so it ends at exactly 1.0: u in [0, 1) then never falls
        # past the end, and no mass is moved onto the last id by rounding.
        cdf = np.cumsum(np.exp(self.log_q))
        return cdf / cdf[-1]

    def draw(self, seed: int, step: int, k: int) -> np.ndarray:
        """K candidate ids (int32 [k]) for training step `step`, with replacement.

        A pure function of (seed, step, k): resuming at step n redraws what was drawn before.
        """
        if seed < 0 or step < 0:
            raise ValueError(f"seed and step must be >= 0, got seed={seed}, step={step}")
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        u = np.random.default_rng([int(seed), int(step), _DRAW_STREAM]).random(k)
        last = self.vocab - 1
        if self.kind == "log_uniform":
            # Closed form: O(k), no [V] table; floor(exp(u log(V+1))) lies in [1, V].
            ids = np.floor(np.exp(u * math.log1p(self.vocab))) - 1.0
            return np.clip(ids, 0, last).astype(np.int32)
        ids = np.searchsorted(self._cdf, u, side="right")
        return np.minimum(ids, last).astype(np.int32)

    def log_expected(self, ids: np.ndarray, k: int) -> np.ndarray:
        """log E_y = log k + log Q(y) (float32, shape of `ids`): the count of y expected in a draw
        of k with replacement, the term every sampled criterion subtracts from the logits."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        return (math.log(k) + self.log_q[np.asarray(ids)]).astype(np.float32)


def _check_vocab(vocab: int) -> int:
    if int(vocab) < 1:
        raise ValueError(f"vocab must be >= 1, got {vocab}")
    return int(vocab)


def uniform(vocab: int) -> Proposal:
    """Q(y) = 1/V: needs no counts, but wastes samples on rare words under a Zipfian corpus."""
    v = _check_vocab(vocab)
    return Proposal("uniform", np.full(v, -math.log(v)))


def unigram(counts: np.ndarray, power: float = 0.75) -> Proposal:
    """Q(y) proportional to (counts[y] + 1) ** power.

    The add-one keeps Q > 0 for ids never seen in training and for special tokens: a target with
    Q = 0 has log E = -inf and makes the loss infinite. `power` < 1 flattens the distribution
    (0.75 is word2vec's choice) so rare words are still sampled; 0 gives uniform, 1 raw counts.
    """
    c = np.asarray(counts)
    if c.ndim != 1 or c.size == 0:
        raise ValueError(f"counts must be a non-empty 1-D array, got shape {c.shape}")
    c = c.astype(np.float64)
    if not np.all(np.isfinite(c)) or np.any(c < 0):
        raise ValueError("counts must be finite and >= 0")
    if not (math.isfinite(power) and power >= 0):
        raise ValueError(f"power must be finite and >= 0, got {power}")
    log_w = power * np.log1p(c)  # log domain: (count + 1) ** power cannot overflow
    return Proposal("unigram", log_w - _logsumexp(log_w))


def log_uniform(vocab: int) -> Proposal:
    """P(k) = (log(k+2) - log(k+1)) / log(V+1): Zipf over ids (TF's log_uniform sampler).

    Needs no counts, but is only a good proposal when id 0 is the most frequent word and ids are
    sorted by descending frequency; see `order_warning`.
    """
    v = _check_vocab(vocab)
    k = np.arange(v, dtype=np.float64)
    # log(k+2) - log(k+1) = log1p(1/(k+1)), accurate for large k where the difference is tiny.
    return Proposal("log_uniform", np.log(np.log1p(1.0 / (k + 1.0))) - math.log(math.log1p(v)))


def _average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 0..n-1 of x, ties sharing their mean rank (as Spearman's rho needs)."""
    order = np.argsort(x, kind="stable")
    _, inverse, counts = np.unique(x[order], return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    mean_rank = ends - (counts + 1) / 2.0
    ranks = np.empty(x.shape[0], dtype=np.float64)
    ranks[order] = mean_rank[inverse]
    return ranks


def frequency_order(counts: np.ndarray) -> float:
    """How close ids are to descending-frequency order, in [-1, 1]: Spearman's rho between id and
    -count (1.0 sorted, about 0 shuffled, -1.0 ascending).

    Ties share a rank, so the long tail of equal (often zero) counts does not count against a
    sorted vocabulary. Equal counts everywhere (or V < 2) are trivially sorted: 1.0.
    """
    c = np.asarray(counts, dtype=np.float64)
    if c.ndim != 1:
        raise ValueError(f"counts must be a 1-D array, got shape {c.shape}")
    if c.size < 2 or np.all(c == c[0]):
        return 1.0
    ids, ranks = np.arange(c.size, dtype=np.float64), _average_ranks(-c)
    ids, ranks = ids - ids.mean(), ranks - ranks.mean()
    rho = float(ids @ ranks / math.sqrt(float(ids @ ids) * float(ranks @ ranks)))
    return max(-1.0, min(1.0, rho))


def order_warning(counts: np.ndarray, threshold: float = ORDER_THRESHOLD) -> str | None:
    """A one-sentence message when log_uniform would be a poor proposal for these counts (ids far
    from descending-frequency order), else None."""
    rho = frequency_order(counts)
    if rho >= threshold:
        return None
    shown = round(rho, 2) + 0.0  # + 0.0 turns -0.0 into 0.0: no "-0.00" in the message
    return (
        f"proposal = log_uniform assumes ids sorted by descending frequency, but the rank "
        f"correlation between id and frequency is {shown:.2f} (below {threshold:.2f}), so it "
        f"would sample the wrong words; use proposal = unigram(power = 0.75) instead."
    )


def count_tokens(sequences: Iterable[np.ndarray | list[int]], vocab: int) -> np.ndarray:
    """Occurrences of each id over all sequences: int64 [vocab], the counts `unigram` takes.

    Ids are batched into chunks of about a million before each bincount, so a corpus of many
    short sequences costs O(tokens + V * tokens / chunk), not O(V) per sequence.
    """
    v = _check_vocab(vocab)
    total = np.zeros(v, dtype=np.int64)
    pending: list[np.ndarray] = []
    size = 0
    for i, seq in enumerate(sequences):
        ids = np.asarray(seq)
        if ids.size == 0:
            continue
        if not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"sequence {i}: token ids must be integers, got dtype {ids.dtype}")
        ids = ids.reshape(-1).astype(np.int64, copy=False)
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= v:
            bad = lo if lo < 0 else hi
            raise ValueError(f"sequence {i}: token id {bad} is outside the vocabulary [0, {v})")
        pending.append(ids)
        size += ids.size
        if size >= _CHUNK_TOKENS:
            total += np.bincount(np.concatenate(pending), minlength=v)
            pending, size = [], 0
    if pending:
        total += np.bincount(np.concatenate(pending), minlength=v)
    return total


def make(kind: str, vocab: int, counts: np.ndarray | None, power: float = 0.75) -> Proposal:
    """The proposal named by a spec's `proposal = ...`; counts are needed only for unigram."""
    if kind == "uniform":
        return uniform(vocab)
    if kind == "log_uniform":
        return log_uniform(vocab)
    if kind == "unigram":
        if counts is None:
            raise ValueError(
                "proposal = unigram needs token counts from the training data, but none were "
                "given; count them with count_tokens, or use uniform or log_uniform"
            )
        if np.shape(counts) != (vocab,):
            raise ValueError(f"unigram counts have shape {np.shape(counts)}; vocab is {vocab}")
        return unigram(counts, power)
    raise ValueError(f"unknown proposal kind {kind!r}; expected one of {KINDS}")
