"""Bucketed batching: examples of similar length batched together, with static shapes.

An input block's `buckets = {32: 128, 64: 64, 128: 32}` maps an upper bound on length to a batch
size. Each example goes to the smallest bucket it fits, and every batch of a bucket is padded to
the bucket's bound and has the bucket's batch size as its row count. Why:

- jit-compiled steps (JAX, XLA) compile once per input shape; a handful of buckets means a
  handful of compilations instead of one per distinct length;
- short examples in big batches and long ones in small batches keep tokens per batch, and so
  memory, roughly constant, while padding waste stays small.

Speech: with an audio reader the bounds are seconds of audio (`{2.0: 32, 4.0: 16, 8.0: 8}`,
floats allowed), turned into samples at the reader's sample rate by `make_audio_buckets`; from
there on a bucket is a bound in samples like any other, and a batch's audio is padded to it.

Examples longer than every bucket (or than `max_length`) are dropped and counted. The last,
partial batch of each bucket in an epoch is kept: its missing rows are all padding (mask 0), so
every kept example is seen exactly once per epoch and shapes stay static.

Order: examples stream in file order through a shuffle buffer of `shuffle_buffer` examples (as
in tf.data: a buffer the size of the split is a full shuffle, 0 keeps file order), seeded by
(seed, epoch), so the same seed and epoch give the same batches on any machine, and every epoch
differs. The number of batches in an epoch does not depend on the order, so a run restarted at
step k skips exactly k batches and continues where it stopped (`iterate(start_step=k)`).
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from seqc.data.errors import DataError
from seqc.data.report import DropReport

DEFAULT_BATCH_SIZE = 32
"""Batch size of the single bucket used when an input block declares no buckets."""


@dataclass(frozen=True, order=True)
class Bucket:
    """Examples of length <= `bound` (and above the previous bucket's), `batch_size` per batch."""

    bound: int
    batch_size: int


@dataclass(frozen=True)
class BatchPlan:
    """Which examples form one batch, and the bucket that fixes its shape."""

    bucket: Bucket
    indices: tuple[int, ...]

    @property
    def padding_rows(self) -> int:
        return self.bucket.batch_size - len(self.indices)


def make_buckets(
    buckets: Mapping[int, int] | Mapping[float, int] | None,
    max_length: int,
    default_batch_size: int = DEFAULT_BATCH_SIZE,
) -> tuple[Bucket, ...]:
    """Token buckets sorted by bound; an empty map is one bucket of `max_length` tokens. A bound
    is a whole number of tokens (seconds, which may be fractional, are for audio inputs)."""
    if not buckets:
        return (Bucket(int(max_length), int(default_batch_size)),)
    out = []
    for bound, size in buckets.items():
        _check_bucket(bound, size, "upper_length")
        if float(bound) != int(bound):
            raise DataError(
                f"bucket {bound}: {size} has a fractional length bound",
                code="bad-bucket",
                expected="whole numbers of tokens as bounds (seconds apply to audio inputs only)",
                found=f"{bound}",
            )
        out.append(Bucket(int(bound), int(size)))
    return tuple(sorted(out))


def seconds_to_samples(seconds: float, sample_rate: int) -> int:
    """Samples in `seconds` of audio, rounded to the nearest sample."""
    return round(float(seconds) * sample_rate)


def make_audio_buckets(
    buckets: Mapping[float, int] | Mapping[int, int] | None,
    sample_rate: int,
    default_bound: int,
    default_batch_size: int = DEFAULT_BATCH_SIZE,
) -> tuple[Bucket, ...]:
    """Buckets of audio from `{seconds: batch_size}`, their bounds in samples, sorted; an empty
    map is one bucket of `default_bound` samples (the pipeline passes the longest training
    utterance, rounded up to a whole second: a bound of `max_length` seconds, as text uses,
    would pad every batch to minutes)."""
    if not buckets:
        return (Bucket(int(default_bound), int(default_batch_size)),)
    out: dict[int, Bucket] = {}
    for seconds, size in buckets.items():
        _check_bucket(seconds, size, "seconds")
        bound = seconds_to_samples(seconds, sample_rate)
        if bound in out:
            raise DataError(
                f"buckets {seconds} s and {out[bound].bound / sample_rate:g} s are the same "
                f"length at {sample_rate} Hz",
                code="bad-bucket",
                expected="distinct bounds in seconds",
            )
        out[bound] = Bucket(bound, int(size))
    return tuple(sorted(out.values()))


def _check_bucket(bound: float, size: int, unit: str) -> None:
    if not float(bound) > 0 or not math.isfinite(float(bound)) or int(size) <= 0:
        raise DataError(
            f"bucket {bound}: {size} must have a positive bound and batch size",
            code="bad-bucket",
            expected=f"buckets = {{{unit}: batch_size, ...}} with positive numbers",
        )
    if float(size) != int(size):
        raise DataError(
            f"bucket {bound}: {size} has a fractional batch size",
            code="bad-bucket",
            expected="a whole number of examples per batch",
        )


def bucket_for(length: int, buckets: Sequence[Bucket]) -> Bucket | None:
    """The smallest bucket whose bound is >= length; None if it fits none."""
    i = bisect.bisect_left([b.bound for b in buckets], length)
    return buckets[i] if i < len(buckets) else None


def shuffled(n: int, buffer: int, rng: np.random.Generator) -> Iterator[int]:
    """0..n-1 through a shuffle buffer of `buffer` items (tf.data semantics)."""
    if buffer <= 1 or n <= 1:
        yield from range(n)
        return
    size = min(buffer, n)
    buf = list(range(size))
    picks = rng.integers(0, size, size=n - size)
    for nxt, j in zip(range(size, n), picks, strict=True):
        out = buf[j]
        buf[j] = nxt
        yield out
    for j in rng.permutation(size):
        yield buf[j]


def pad(
    seqs: Sequence[Sequence[int] | np.ndarray], rows: int, length: int, pad_id: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """int32 ids [rows, length] and a bool mask, True on real tokens; rows beyond `seqs` are
    all padding."""
    if len(seqs) > rows:
        raise ValueError(f"{len(seqs)} sequences do not fit {rows} rows")
    ids = np.full((rows, length), pad_id, dtype=np.int32)
    mask = np.zeros((rows, length), dtype=bool)
    for r, s in enumerate(seqs):
        n = len(s)
        if n > length:
            raise ValueError(f"a sequence of length {n} does not fit {length}")
        ids[r, :n] = s
        mask[r, :n] = True
    return ids, mask


@dataclass(frozen=True)
class EpochPlan:
    """The batches of one epoch as arrays: batch j is `members[lo[j]:hi[j]]` of bucket
    `bucket[j]`. An epoch of millions of examples is a few arrays, not a list of tuples."""

    bucket: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    members: np.ndarray

    def __len__(self) -> int:
        return len(self.bucket)


class BucketBatcher:
    """Plans the batches of one split: bucket assignment, drops, seeded order, resumption.

    Lengths are a numpy array (or any sequence); everything per example is an array, so a split
    of tens of millions of examples plans in seconds and in memory of a few bytes an example.
    A step's batch is found by its epoch's plan (`plan_for_step`), made once per epoch."""

    def __init__(
        self,
        lengths: Sequence[int] | np.ndarray,
        buckets: Sequence[Bucket],
        *,
        shuffle_buffer: int = 0,
        seed: int = 0,
        max_length: int | None = None,
        location: Callable[[int], str] | None = None,
    ) -> None:
        self.buckets = tuple(sorted(buckets))
        if not self.buckets:
            raise ValueError("at least one bucket is needed")
        self.shuffle_buffer = shuffle_buffer
        self.seed = seed
        self.drops = DropReport()
        lens = np.asarray(lengths, dtype=np.int64).reshape(-1)
        bounds = np.asarray([b.bound for b in self.buckets], dtype=np.int64)
        bucket_of = np.searchsorted(bounds, lens, side="left").astype(np.int64)
        too_long = lens > max_length if max_length is not None else np.zeros(len(lens), dtype=bool)
        beyond = (bucket_of == len(bounds)) & ~too_long
        for reason, hit in (("longer-than-max-length", too_long), ("longer-than-buckets", beyond)):
            where_ = np.flatnonzero(hit)
            if len(where_):
                for i in where_[: self.drops.max_examples]:
                    self.drops.add(reason, location(int(i)) if location else None)
                if len(where_) > self.drops.max_examples:
                    self.drops.add(reason, None, len(where_) - self.drops.max_examples)
        bucket_of[too_long | beyond] = -1
        self.bucket_of = bucket_of
        self.kept = np.flatnonzero(self.bucket_of >= 0)
        counts = np.bincount(self.bucket_of[self.kept], minlength=len(self.buckets))
        self.examples_per_bucket: tuple[int, ...] = tuple(int(c) for c in counts)
        self._plans: dict[tuple[int, bool], EpochPlan] = {}
        self._lock = threading.Lock()

    @property
    def num_examples(self) -> int:
        """Examples kept (not dropped)."""
        return len(self.kept)

    @property
    def steps_per_epoch(self) -> int:
        return sum(
            math.ceil(n / b.batch_size)
            for n, b in zip(self.examples_per_bucket, self.buckets, strict=True)
        )

    def order(self, epoch: int, shuffle: bool = True) -> np.ndarray:
        """Kept example indices in the order they leave the shuffle buffer in `epoch`."""
        if not shuffle or self.shuffle_buffer <= 1:
            return self.kept
        rng = np.random.default_rng([self.seed, epoch])
        kept = self.kept
        picks = np.fromiter(shuffled(len(kept), self.shuffle_buffer, rng), np.int64, len(kept))
        return kept[picks]

    def plan(self, epoch: int = 0, shuffle: bool = True) -> EpochPlan:
        """The batches of one epoch: a batch leaves as soon as its bucket fills; the partial
        batches left at the end follow, smallest bucket first. The last two epochs' plans are
        kept (a step's neighbours are in the same epoch, or the next)."""
        with self._lock:  # the loader's threads ask at once; one of them makes the plan
            key = (epoch, shuffle)
            if key not in self._plans:
                if len(self._plans) >= 2:
                    self._plans.pop(next(iter(self._plans)))
                self._plans[key] = self._make_plan(epoch, shuffle)
            return self._plans[key]

    def _make_plan(self, epoch: int, shuffle: bool) -> EpochPlan:
        order = self.order(epoch, shuffle)
        of = self.bucket_of[order]
        buckets, los, his, emits, parts = [], [], [], [], []
        base = 0
        for k, b in enumerate(self.buckets):
            pos = np.flatnonzero(of == k)  # where this bucket's examples leave the buffer
            n = len(pos)
            if not n:
                continue
            starts = np.arange(0, n, b.batch_size)
            ends = np.minimum(starts + b.batch_size, n)
            full = ends - starts == b.batch_size
            # a full batch leaves when its last example arrives; the partial one at the end
            emits.append(np.where(full, pos[ends - 1], len(order) + k))
            buckets.append(np.full(len(starts), k, np.int64))
            los.append(base + starts)
            his.append(base + ends)
            parts.append(order[pos])
            base += n
        if not parts:
            plan = EpochPlan(*(np.zeros(0, np.int64) for _ in range(4)))
        else:
            by = np.argsort(np.concatenate(emits), kind="stable")
            plan = EpochPlan(
                np.concatenate(buckets)[by],
                np.concatenate(los)[by],
                np.concatenate(his)[by],
                np.concatenate(parts),
            )
        return plan

    def batch(self, plan: EpochPlan, j: int) -> BatchPlan:
        """Batch j of an epoch's plan."""
        members = plan.members[int(plan.lo[j]) : int(plan.hi[j])]
        return BatchPlan(self.buckets[int(plan.bucket[j])], tuple(int(i) for i in members))

    def plan_for_step(self, step: int, shuffle: bool = True) -> BatchPlan:
        """The batch of global training step `step` (epoch after epoch, forever)."""
        epoch, j = divmod(step, self._per_epoch_or_error())
        return self.batch(self.plan(epoch, shuffle), j)

    def epoch(self, epoch: int = 0, shuffle: bool = True) -> Iterator[BatchPlan]:
        """The batches of one epoch, in order (see `plan`)."""
        plan = self.plan(epoch, shuffle)
        for j in range(len(plan)):
            yield self.batch(plan, j)

    def iterate(self, start_step: int = 0, shuffle: bool = True) -> Iterator[BatchPlan]:
        """Batches epoch after epoch, forever, starting at global step `start_step`: the same
        batches a run from step 0 would have seen from that step on."""
        per_epoch = self._per_epoch_or_error()
        epoch, skip = divmod(start_step, per_epoch)
        while True:
            plan = self.plan(epoch, shuffle)
            for j in range(skip, len(plan)):
                yield self.batch(plan, j)
            epoch, skip = epoch + 1, 0

    def _per_epoch_or_error(self) -> int:
        per_epoch = self.steps_per_epoch
        if per_epoch == 0:
            raise DataError(
                "no example fits any bucket",
                code="empty-corpus",
                found=str(self.drops),
                hint="raise `max_length` or add a larger bucket",
            )
        return per_epoch
