"""Bucketed batching, as properties over random lengths and bucket maps.

What a training loop relies on: each kept example exactly once per epoch, batches that respect
their bucket's size and bound, masks that match the lengths, an order fixed by (seed, epoch),
and a restart at step k that sees exactly what an uninterrupted run saw from step k on.
"""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqc.data.bucketing import Bucket, BucketBatcher, bucket_for, make_buckets, pad, shuffled
from seqc.data.errors import DataError

PROPS = settings(derandomize=True, max_examples=60, deadline=None, database=None)

bucket_maps = st.dictionaries(st.integers(1, 40), st.integers(1, 9), min_size=1, max_size=4).map(
    lambda m: make_buckets(m, max_length=64)
)
lengths = st.lists(st.integers(0, 50), min_size=0, max_size=120)


@PROPS
@given(lengths, bucket_maps, st.integers(0, 64), st.integers(0, 3), st.integers(0, 2))
def test_each_kept_example_once_per_epoch(
    lens: list[int], buckets: tuple[Bucket, ...], buffer: int, seed: int, epoch: int
) -> None:
    batcher = BucketBatcher(lens, buckets, shuffle_buffer=buffer, seed=seed)
    plans = list(batcher.epoch(epoch))
    seen = Counter(i for plan in plans for i in plan.indices)
    top = buckets[-1].bound
    assert sorted(seen) == [i for i, n in enumerate(lens) if n <= top]
    assert set(seen.values()) <= {1}
    assert batcher.drops.total == sum(n > top for n in lens)
    assert len(plans) == batcher.steps_per_epoch
    for plan in plans:
        assert 0 < len(plan.indices) <= plan.bucket.batch_size
        assert all(lens[i] <= plan.bucket.bound for i in plan.indices)
        assert bucket_for(max(lens[i] for i in plan.indices), buckets) is not None
        # the smallest bucket that fits: no example could have gone to a smaller one
        smaller = [b.bound for b in buckets if b.bound < plan.bucket.bound]
        assert all(lens[i] > max(smaller, default=-1) for i in plan.indices)


@PROPS
@given(st.lists(st.lists(st.integers(1, 99), max_size=12), max_size=8), st.integers(0, 4))
def test_padding_masks_match_lengths(seqs: list[list[int]], extra_rows: int) -> None:
    length = max((len(s) for s in seqs), default=0) + 1
    ids, mask = pad(seqs, len(seqs) + extra_rows, length)
    assert ids.dtype == np.int32 and mask.dtype == np.bool_
    assert ids.shape == mask.shape == (len(seqs) + extra_rows, length)
    assert mask.sum(axis=1).tolist() == [len(s) for s in seqs] + [0] * extra_rows
    assert (ids[~mask] == 0).all()
    for row, s in enumerate(seqs):
        assert ids[row, : len(s)].tolist() == s


@PROPS
@given(st.integers(10, 150), st.integers(4, 200), st.integers(0, 1000))
def test_same_seed_same_order_and_epochs_differ(n: int, buffer: int, seed: int) -> None:
    lens = [1 + i % 7 for i in range(n)]
    buckets = make_buckets({4: 3, 8: 5}, 64)
    a = BucketBatcher(lens, buckets, shuffle_buffer=buffer, seed=seed)
    b = BucketBatcher(lens, buckets, shuffle_buffer=buffer, seed=seed)
    assert list(a.epoch(1)) == list(b.epoch(1))
    assert list(a.order(0)) != list(a.order(1))


def test_shuffle_buffer_zero_keeps_file_order() -> None:
    batcher = BucketBatcher([1] * 7, [Bucket(4, 3)], shuffle_buffer=0, seed=5)
    assert [p.indices for p in batcher.epoch(3)] == [(0, 1, 2), (3, 4, 5), (6,)]


def test_a_small_buffer_shuffles_only_locally() -> None:
    rng = np.random.default_rng(0)
    out = list(shuffled(1000, 10, rng))
    assert sorted(out) == list(range(1000))
    assert max(abs(i - pos) for pos, i in enumerate(out)) < 200


@PROPS
@given(st.integers(1, 80), st.integers(0, 60), st.integers(0, 99))
def test_resuming_at_a_step_continues_the_same_stream(n: int, start: int, seed: int) -> None:
    lens = [1 + (i * 7) % 15 for i in range(n)]
    batcher = BucketBatcher(lens, make_buckets({5: 2, 15: 3}, 64), shuffle_buffer=16, seed=seed)
    whole = list(itertools.islice(batcher.iterate(0), start + 10))
    resumed = list(itertools.islice(batcher.iterate(start), 10))
    assert resumed == whole[start:]


def test_max_length_drops_are_counted_with_locations() -> None:
    batcher = BucketBatcher(
        [3, 9, 20, 2],
        make_buckets({4: 2, 8: 2}, 64),
        max_length=10,
        location=lambda i: f"f.txt:{i + 1}",
    )
    assert batcher.num_examples == 2
    assert batcher.drops.counts == {"longer-than-max-length": 1, "longer-than-buckets": 1}
    assert batcher.drops.examples["longer-than-max-length"] == ["f.txt:3"]
    assert batcher.drops.examples["longer-than-buckets"] == ["f.txt:2"]


def test_empty_bucket_map_is_one_bucket_of_max_length() -> None:
    assert make_buckets({}, 256, default_batch_size=16) == (Bucket(256, 16),)
    assert make_buckets({64: 8, 16: 32}, 256) == (Bucket(16, 32), Bucket(64, 8))
    with pytest.raises(DataError):
        make_buckets({16: 0}, 256)


def test_nothing_fits_is_an_error_not_an_endless_loop() -> None:
    batcher = BucketBatcher([50, 60], [Bucket(8, 2)])
    with pytest.raises(DataError, match="no example fits"):
        next(batcher.iterate())


def _streamed_epoch(
    batcher: BucketBatcher, epoch: int, shuffle: bool
) -> list[tuple[Bucket, tuple[int, ...]]]:
    """The batches as they were made before plans became arrays (issue 35): examples stream
    through the buffer into their bucket, a batch leaves when its bucket fills, the partial
    ones follow at the end, smallest bucket first."""
    pending: list[list[int]] = [[] for _ in batcher.buckets]
    out = []
    for i in batcher.order(epoch, shuffle):
        k = int(batcher.bucket_of[i])
        pending[k].append(int(i))
        if len(pending[k]) == batcher.buckets[k].batch_size:
            out.append((batcher.buckets[k], tuple(pending[k])))
            pending[k] = []
    out += [(batcher.buckets[k], tuple(rest)) for k, rest in enumerate(pending) if rest]
    return out


@PROPS
@given(lengths, bucket_maps, st.integers(0, 64), st.integers(0, 3), st.integers(0, 2))
def test_array_plans_are_the_streamed_batches(
    lens: list[int], buckets: tuple[Bucket, ...], buffer: int, seed: int, epoch: int
) -> None:
    batcher = BucketBatcher(lens, buckets, shuffle_buffer=buffer, seed=seed, max_length=45)
    for shuffle in (True, False):
        planned = [(p.bucket, p.indices) for p in batcher.epoch(epoch, shuffle)]
        assert planned == _streamed_epoch(batcher, epoch, shuffle)
    if batcher.steps_per_epoch:
        step = epoch * batcher.steps_per_epoch + 1
        assert batcher.plan_for_step(step) == next(batcher.iterate(step))


def test_drops_are_counted_with_a_few_locations() -> None:
    lens = [99] * 10 + [1]
    batcher = BucketBatcher(lens, [Bucket(8, 2)], max_length=50, location=lambda i: f"f:{i + 1}")
    assert batcher.drops.counts["longer-than-max-length"] == 10
    assert batcher.drops.examples["longer-than-max-length"] == ["f:1", "f:2", "f:3"]
    assert batcher.num_examples == 1
