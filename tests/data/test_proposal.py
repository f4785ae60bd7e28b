"""Proposal distributions for sampled training criteria (seqc.data.proposal).

What the training loop relies on: Q is a normalized distribution with no zero entries; draws
follow Q (chi-square) and have expected counts K * Q(y), which is what log_expected reports;
a draw is a pure function of (seed, step); log_uniform's closed-form sampler is the inverse CDF
of its pmf; and the counting and ordering helpers are right.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from scipy import special, stats

from seqc.data import proposal
from seqc.data.proposal import (
    Proposal,
    count_tokens,
    frequency_order,
    log_uniform,
    make,
    order_warning,
    uniform,
    unigram,
)

V = 50


def zipf_counts(v: int, zeros: int = 5) -> np.ndarray:
    """Counts sorted by descending frequency, with a tail of ids never seen."""
    counts = np.floor(10_000 / np.arange(1, v + 1)).astype(np.int64)
    counts[v - zeros :] = 0
    return counts


def all_kinds(v: int = V) -> list[Proposal]:
    return [uniform(v), unigram(zipf_counts(v)), log_uniform(v)]


KIND_IDS = ["uniform", "unigram", "log_uniform"]


# --- the distributions themselves ---------------------------------------------------------------


@pytest.mark.parametrize("v", [1, 2, 50, 200_000])
def test_log_uniform_pmf_is_the_closed_form_and_sums_to_one(v: int) -> None:
    q = np.exp(log_uniform(v).log_q)
    k = np.arange(v, dtype=np.float64)
    assert abs(q.sum() - 1.0) < 1e-9
    # rtol 1e-9, not tighter: the reference's log(k+2) - log(k+1) itself cancels to ~3e-10
    # relative at k = 2e5 (the module uses log1p(1/(k+1)), which does not).
    np.testing.assert_allclose(q, (np.log(k + 2) - np.log(k + 1)) / np.log(v + 1), rtol=1e-9)


@pytest.mark.parametrize("p", all_kinds(), ids=KIND_IDS)
def test_every_proposal_is_normalized_finite_and_float64(p: Proposal) -> None:
    assert p.log_q.dtype == np.float64 and p.log_q.shape == (V,) and p.vocab == V
    assert np.all(np.isfinite(p.log_q))
    assert abs(special.logsumexp(p.log_q)) < 1e-12
    assert not p.log_q.flags.writeable  # shared safely: nobody can change what is sampled


def test_unigram_gives_unseen_ids_mass_and_power_interpolates() -> None:
    counts = np.array([0, 1, 2, 5])
    q1 = np.exp(unigram(counts, power=1.0).log_q)
    np.testing.assert_allclose(q1, np.array([1, 2, 3, 6]) / 12, rtol=1e-12)
    w = np.array([1, 2, 3, 6]) ** 0.75
    np.testing.assert_allclose(np.exp(unigram(counts).log_q), w / w.sum(), rtol=1e-12)
    np.testing.assert_allclose(unigram(counts, power=0.0).log_q, uniform(4).log_q, atol=1e-15)
    assert np.all(np.exp(unigram(zipf_counts(V)).log_q) > 0)
    huge = unigram(np.array([0, 10**18, 10**15]), power=1.0)  # no overflow in (c + 1) ** power
    assert np.all(np.isfinite(huge.log_q)) and abs(special.logsumexp(huge.log_q)) < 1e-12


@pytest.mark.parametrize(
    ("counts", "power"),
    [([1, -1], 0.75), ([1.0, np.nan], 0.75), ([], 0.75), ([[1, 2]], 0.75), ([1, 2], -1.0)],
)
def test_unigram_rejects_bad_counts_and_power(counts: list, power: float) -> None:
    with pytest.raises(ValueError):
        unigram(np.array(counts), power)


def test_proposal_rejects_unnormalized_or_infinite_log_q() -> None:
    with pytest.raises(ValueError, match="normalized"):
        Proposal("uniform", np.zeros(3))
    with pytest.raises(ValueError, match="finite"):
        Proposal("unigram", np.array([0.0, -np.inf]))
    with pytest.raises(ValueError, match="unknown proposal kind"):
        Proposal("zipf", np.zeros(1))
    with pytest.raises(ValueError):
        uniform(0)


# --- sampling -----------------------------------------------------------------------------------


@pytest.mark.parametrize("p", all_kinds(), ids=KIND_IDS)
def test_draws_follow_q_chi_square(p: Proposal) -> None:
    n = 200_000
    observed = np.bincount(p.draw(seed=7, step=3, k=n), minlength=V)
    expected = n * np.exp(p.log_q)
    assert expected.min() >= 5  # the chi-square approximation holds
    assert stats.chisquare(observed, expected).pvalue > 1e-3


def test_log_uniform_closed_form_is_the_inverse_cdf() -> None:
    # A generic-CDF proposal over the same pmf, fed the same uniforms (same seed and step), must
    # pick the same ids: floor(exp(u log(V+1))) - 1 = k exactly when u is in k's CDF interval.
    for v in (V, 200_000):
        lu = log_uniform(v)
        by_cdf = Proposal("unigram", lu.log_q)
        closed, generic = lu.draw(1, 2, 100_000), by_cdf.draw(1, 2, 100_000)
        assert "_cdf" not in lu.__dict__  # log_uniform never built the [V] CDF table
        assert np.mean(closed != generic) < 1e-4  # only float rounding at interval edges


@pytest.mark.parametrize("p", all_kinds(20), ids=KIND_IDS)
def test_expected_counts_and_inclusion_match_k_q(p: Proposal) -> None:
    # Bonferroni over the V ids (family-wise false alarm 1e-3) rather than a bare 3 sigma per id,
    # which would fail about once in seven seeds by chance with 20 ids.
    v, k, steps = p.vocab, 32, 3000
    q = np.exp(p.log_q)
    counts = np.stack([np.bincount(p.draw(11, s, k), minlength=v) for s in range(steps)])
    z_crit = stats.norm.isf(1e-3 / (2 * v))

    mean_count = counts.mean(axis=0)  # E[count of y in a draw] = K Q(y), with replacement
    sigma = np.sqrt(k * q * (1 - q) / steps)
    assert np.max(np.abs(mean_count - k * q) / sigma) < z_crit

    incl = 1 - (1 - q) ** k  # P(y in the draw): what log_expected does NOT use
    rate = (counts > 0).mean(axis=0)
    assert np.max(np.abs(rate - incl) / np.sqrt(incl * (1 - incl) / steps)) < z_crit


@pytest.mark.parametrize("p", all_kinds(), ids=KIND_IDS)
def test_draw_is_a_pure_function_of_seed_and_step(p: Proposal) -> None:
    a = p.draw(seed=5, step=100, k=256)
    assert a.dtype == np.int32 and a.shape == (256,)
    assert a.min() >= 0 and a.max() < V
    p.draw(seed=5, step=3, k=256)  # other draws in between change nothing (a resumed run)
    np.testing.assert_array_equal(a, p.draw(seed=5, step=100, k=256))
    assert not np.array_equal(a, p.draw(seed=5, step=101, k=256))
    assert not np.array_equal(a, p.draw(seed=6, step=100, k=256))


def test_draw_rejects_bad_arguments() -> None:
    p = uniform(V)
    for seed, step, k in [(-1, 0, 4), (0, -1, 4), (0, 0, 0)]:
        with pytest.raises(ValueError):
            p.draw(seed, step, k)


def test_single_word_vocabulary_always_draws_id_zero() -> None:
    for p in all_kinds(1):
        np.testing.assert_array_equal(p.draw(0, 0, 16), np.zeros(16, np.int32))


@pytest.mark.parametrize("p", all_kinds(), ids=KIND_IDS)
def test_log_expected_is_log_k_plus_log_q(p: Proposal) -> None:
    ids = np.array([[0, 3, 49], [7, 7, 1]])
    got = p.log_expected(ids, 64)
    assert got.dtype == np.float32 and got.shape == ids.shape
    np.testing.assert_array_equal(got, (math.log(64) + p.log_q[ids]).astype(np.float32))
    with pytest.raises(ValueError):
        p.log_expected(ids, 0)


# --- frequency order ----------------------------------------------------------------------------


def test_sorted_counts_need_no_warning_and_shuffled_ones_do() -> None:
    counts = zipf_counts(1000, zeros=200)
    assert frequency_order(counts) > 0.99
    assert order_warning(counts) is None
    shuffled = np.random.default_rng(0).permutation(counts)
    rho = frequency_order(shuffled)
    assert abs(rho) < 0.2
    message = order_warning(shuffled)
    assert message is not None and "unigram(power = 0.75)" in message
    shown = re.search(r"frequency is (-?\d+\.\d\d)", message)
    assert shown is not None and abs(float(shown.group(1)) - rho) <= 0.005
    assert frequency_order(counts[::-1]) < -0.99
    assert order_warning(counts[::-1]) is not None


def test_frequency_order_is_spearman_between_id_and_minus_count() -> None:
    rng = np.random.default_rng(1)
    for _ in range(5):
        counts = rng.integers(0, 8, size=300)  # many ties
        expected = stats.spearmanr(np.arange(300), -counts).statistic
        assert frequency_order(counts) == pytest.approx(expected, abs=1e-12)
    assert frequency_order(np.array([3, 3, 3])) == 1.0  # all tied: any order is sorted
    assert frequency_order(np.array([5])) == 1.0


# --- counting and dispatch ----------------------------------------------------------------------


def test_count_tokens_counts_every_id(monkeypatch: pytest.MonkeyPatch) -> None:
    seqs = [[1, 2, 2], np.array([0, 5], dtype=np.int32), [], np.array([5])]
    got = count_tokens(seqs, vocab=7)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, [1, 1, 2, 0, 0, 2, 0])

    rng = np.random.default_rng(2)
    many = [rng.integers(0, 30, size=rng.integers(0, 20)) for _ in range(500)]
    monkeypatch.setattr(proposal, "_CHUNK_TOKENS", 64)  # exercise the chunked accumulation
    expected = np.bincount(np.concatenate(many), minlength=30)
    np.testing.assert_array_equal(count_tokens(iter(many), 30), expected)


@pytest.mark.parametrize("bad", [[0, 7], [-1, 2], np.array([0.0, 1.0])])
def test_count_tokens_rejects_ids_outside_the_vocabulary(bad: list | np.ndarray) -> None:
    with pytest.raises(ValueError, match="sequence 1"):
        count_tokens([[0, 1], bad], vocab=7)


def test_make_dispatches_and_needs_counts_for_unigram() -> None:
    counts = zipf_counts(V)
    assert make("uniform", V, None).kind == "uniform"
    assert make("log_uniform", V, counts).kind == "log_uniform"
    np.testing.assert_array_equal(make("unigram", V, counts, 0.5).log_q, unigram(counts, 0.5).log_q)
    with pytest.raises(ValueError, match="unigram needs token counts"):
        make("unigram", V, None)
    with pytest.raises(ValueError, match="vocab is 50"):
        make("unigram", V, counts[:-1])
    with pytest.raises(ValueError, match="unknown proposal kind"):
        make("zipf", V, None)
