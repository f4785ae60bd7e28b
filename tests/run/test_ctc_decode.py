"""CTC greedy and prefix beam decoding, checked against brute force, and the speech error rates.

The brute force enumerates every path of a small case (vocab**frames of them), collapses each to
its labelling and sums their probabilities: the exact distribution over labellings that a beam
wide enough to hold every prefix must reproduce.
"""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
import time

import numpy as np
import pytest

from seqc.run.decoding.ctc import (
    ctc_decode_batch,
    ctc_greedy,
    ctc_prefix_beam,
    ctc_prefix_beam_nbest,
    log_softmax,
)
from seqc.run.scoring.wer import error_rates

A, B = 1, 2  # token ids; 0 is the blank


def _onehot(path: list[int], vocab: int = 3) -> np.ndarray:
    """Scores whose argmax per frame is `path`."""
    scores = np.full((len(path), vocab), -5.0)
    scores[np.arange(len(path)), path] = 5.0
    return scores


def _collapse(path: tuple[int, ...], blank: int = 0) -> tuple[int, ...]:
    return tuple(t for i, t in enumerate(path) if t != blank and (i == 0 or path[i - 1] != t))


def _brute_force(logp: np.ndarray, blank: int = 0) -> dict[tuple[int, ...], float]:
    """log P(labelling) for every labelling some path reads."""
    frames, vocab = logp.shape
    found: dict[tuple[int, ...], float] = {}
    for path in itertools.product(range(vocab), repeat=frames):
        score = float(sum(logp[t, c] for t, c in enumerate(path)))
        label = _collapse(path, blank)
        found[label] = np.logaddexp(found.get(label, -math.inf), score)
    return found


def _random_logp(rng: np.random.Generator, frames: int, vocab: int, scale: float = 2.0):
    return log_softmax(rng.normal(scale=scale, size=(frames, vocab)))


# greedy


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ([A, A, 0, A], [A, A]),  # a blank separates a real repeat
        ([A, A, A], [A]),  # a run collapses to one
        ([0, A, B, B, 0, 0, B], [A, B, B]),
        ([0, 0, 0], []),
        ([A, 0, 0, B], [A, B]),
        ([B, A, B, A], [B, A, B, A]),
    ],
)
def test_greedy_collapses_repeats_and_drops_blanks(path: list[int], expected: list[int]) -> None:
    assert ctc_greedy(_onehot(path), len(path)) == expected


def test_greedy_reads_only_the_real_frames() -> None:
    scores = _onehot([A, 0, B, B, A])
    assert ctc_greedy(scores, 3) == [A, B]
    assert ctc_greedy(scores, 0) == []


def test_greedy_with_another_blank_id() -> None:
    # blank = 2: token 0 is an ordinary label
    assert ctc_greedy(_onehot([0, 0, 2, 0, 1]), 5, blank=2) == [0, 0, 1]


def test_bad_inputs_are_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match=r"\[frames, vocab\]"):
        ctc_greedy(np.zeros((2, 3, 4)), 3)
    with pytest.raises(ValueError, match="frames = 7"):
        ctc_prefix_beam(np.zeros((3, 4)), 7, width=2)
    with pytest.raises(ValueError, match="width"):
        ctc_prefix_beam(np.zeros((3, 4)), 3, width=0)
    with pytest.raises(ValueError, match="strategy"):
        ctc_decode_batch(np.zeros((1, 3, 4)), np.ones((1, 3), bool), strategy="viterbi")


# prefix beam search


@pytest.mark.parametrize("seed", range(40))
def test_wide_beam_equals_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    frames, vocab = int(rng.integers(1, 6)), int(rng.integers(2, 4))
    logp = _random_logp(rng, frames, vocab)
    exact = _brute_force(logp)

    nbest = ctc_prefix_beam_nbest(logp, frames, width=1000)
    # every labelling is found, with its exact log-probability
    assert {tuple(label): score for label, score in nbest}.keys() == exact.keys()
    for label, score in nbest:
        assert score == pytest.approx(exact[tuple(label)], abs=1e-9)
    # best first, and the best is the most probable labelling
    assert [s for _, s in nbest] == sorted((s for _, s in nbest), reverse=True)
    assert exact[tuple(nbest[0][0])] == pytest.approx(max(exact.values()), abs=1e-12)
    assert math.fsum(math.exp(s) for _, s in nbest) == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("seed", range(20))
def test_narrow_beam_scores_are_lower_bounds(seed: int) -> None:
    """A pruned beam drops paths, never invents them: each score is at most the exact one."""
    rng = np.random.default_rng(100 + seed)
    logp = _random_logp(rng, 5, 3)
    exact = _brute_force(logp)
    for label, score in ctc_prefix_beam_nbest(logp, 5, width=3):
        assert score <= exact[tuple(label)] + 1e-12


def test_repeats_need_a_blank_between() -> None:
    # a, a, blank, a: the paths through the blank read "a a"; the beam keeps both readings apart
    probs = np.array([[0.1, 0.9, 1e-9], [0.1, 0.9, 1e-9], [0.8, 0.2, 1e-9], [0.1, 0.9, 1e-9]])
    logp = np.log(probs / probs.sum(1, keepdims=True))
    nbest = dict((tuple(label), s) for label, s in ctc_prefix_beam_nbest(logp, 4, width=100))
    exact = _brute_force(logp)
    assert max(exact, key=exact.__getitem__) == (A, A)
    assert ctc_prefix_beam(logp, 4, width=4) == [A, A]
    for label in [(A,), (A, A)]:
        assert nbest[label] == pytest.approx(exact[label], abs=1e-9)
    assert (A, A, A) not in nbest  # three a's need two blanks between them: five frames


def test_beam_merges_alignments_that_greedy_keeps_apart() -> None:
    """Greedy's best path reads "a b", but "a" is more probable summed over its paths."""
    probs = np.array([[0.25, 0.4, 0.35], [0.3, 0.3, 0.4]])
    logp = np.log(probs)
    assert ctc_greedy(logp, 2) == [A, B]
    assert ctc_prefix_beam(logp, 2, width=1) == [A]
    exact = _brute_force(logp)
    assert exact[(A,)] > exact[(A, B)]


@pytest.mark.parametrize("seed", range(20))
def test_width_one_agrees_with_greedy_on_confident_frames(seed: int) -> None:
    """When every frame's best token holds most of its mass, the best path is the best prefix."""
    rng = np.random.default_rng(200 + seed)
    path = rng.integers(0, 4, size=12)
    probs = rng.uniform(0.0, 1.0, size=(12, 4))
    probs /= probs.sum(1, keepdims=True) / 0.3  # rows sum to 0.3 ...
    probs[np.arange(12), path] += 0.7  # ... and the path's token takes the other 0.7
    logp = np.log(probs)
    assert ctc_prefix_beam(logp, 12, width=1) == ctc_greedy(logp, 12)


def test_pruning_keeps_the_answer_on_peaky_frames() -> None:
    rng = np.random.default_rng(7)
    path = rng.integers(0, 40, size=200)
    logits = rng.normal(size=(200, 40))
    logits[np.arange(200), path] += 8.0
    logp = log_softmax(logits)
    full = ctc_prefix_beam_nbest(logp, 200, width=8)
    assert ctc_prefix_beam_nbest(logp, 200, width=8, top_k=4)[0] == full[0]
    assert ctc_prefix_beam_nbest(logp, 200, width=8, prune=math.log(1e-3))[0] == full[0]


def test_only_blank_and_no_frames() -> None:
    assert ctc_prefix_beam_nbest(np.zeros((3, 1)), 3, width=4) == [([], 0.0)]
    assert ctc_prefix_beam_nbest(log_softmax(np.zeros((3, 5))), 0, width=4) == [([], 0.0)]


def test_beam_speed() -> None:
    """40 tokens, 200 frames, width 8: well under 50 ms here; the bound is loose for CI."""
    logp = log_softmax(np.random.default_rng(0).normal(scale=3.0, size=(200, 40)))
    ctc_prefix_beam(logp, 200, width=8)  # warm up
    start = time.perf_counter()
    ctc_prefix_beam(logp, 200, width=8)
    assert time.perf_counter() - start < 0.5


def test_batch_skips_masked_frames() -> None:
    rng = np.random.default_rng(3)
    logits = rng.normal(scale=3.0, size=(3, 6, 4)).astype(np.float32)
    mask = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0]], bool)
    greedy = ctc_decode_batch(logits, mask, "greedy", width=1)
    beam = ctc_decode_batch(logits, mask, "beam", width=100)
    logp = log_softmax(logits)
    for b, frames in enumerate(mask.sum(1)):
        assert greedy[b] == ctc_greedy(logits[b], int(frames))
        exact = _brute_force(logp[b, :frames])
        assert tuple(beam[b]) == max(exact, key=exact.__getitem__)
    assert greedy[2] == beam[2] == []


def test_decoding_loads_no_framework() -> None:
    """Decoding an artifact's output must not pull in JAX or TensorFlow (seconds, gigabytes)."""
    probe = (
        "import sys, seqc.run.decoding.ctc, seqc.run.scoring.wer; "
        "print([m for m in ('jax', 'tensorflow', 'seqc.backends') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# word and character error rates


def test_error_rates_known_values() -> None:
    r = error_rates(["one too"], ["one two three"])
    assert r["wer"] == pytest.approx(200 / 3)  # one substitution, one deletion, of 3 words
    assert (r["words"], r["substitutions"], r["deletions"], r["insertions"]) == (3, 1, 1, 0)
    # characters, spaces included: "one two three" -> "one too" is 7 edits of 13
    assert r["cer"] == pytest.approx(100 * 7 / 13)
    assert (r["chars"], r["char_edits"]) == (13, 7)


def test_identical_and_whitespace_only_differences() -> None:
    r = error_rates(["  one   two "], ["one two"])
    assert r["wer"] == r["cer"] == 0.0


def test_empty_transcripts() -> None:
    # empty hypothesis: all deletions
    r = error_rates([""], ["one two"])
    assert (r["wer"], r["deletions"], r["cer"]) == (100.0, 2, 100.0)
    # empty reference: the hypothesis words are insertions, and add no reference words
    r = error_rates(["uh", "one two"], ["", "one two"])
    assert (r["wer"], r["insertions"], r["words"]) == (50.0, 1, 2)
    # a corpus of empty references: 0 with no edits, 100 with any
    assert error_rates([""], [""])["wer"] == 0.0
    assert error_rates(["x"], [" "])["wer"] == 100.0
    assert error_rates([], [])["wer"] == 0.0


def test_corpus_level_sums_errors_rather_than_averaging() -> None:
    hyps = ["one", "one two three four five six seven eight nine ten"]
    refs = ["two", "one two three four five six seven eight nine ten"]
    r = error_rates(hyps, refs)
    assert r["wer"] == pytest.approx(100 / 11)  # not the per-utterance mean, 50
    assert r["substitutions"] == 1


def test_mismatched_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="one hypothesis per reference"):
        error_rates(["a"], ["a", "b"])
