"""The synthetic large-vocabulary corpus (`seqc.data.corpora.zipf`): its entropy, computed in
closed form, is what its own samples measure, and ids run from the most frequent word down."""

from __future__ import annotations

import numpy as np

from seqc.data.corpora.zipf import CLASSES, VOCAB, ClassBigram


def test_the_entropy_rate_is_what_samples_measure() -> None:
    model = ClassBigram(seed=7)
    words = model.sample(200_000)
    table = np.stack([model.conditional(c) for c in range(CLASSES)])  # [C, V]
    assert np.allclose(table.sum(1), 1.0)
    nll = -np.log(table[words[:-1] % CLASSES, words[1:]])
    se = nll.std() / np.sqrt(len(nll))
    assert abs(nll.mean() - model.entropy_rate()) < 4 * se + 1e-3, (nll.mean(), se)


def test_ids_are_roughly_sorted_by_frequency() -> None:
    counts = np.bincount(ClassBigram(seed=7).sample(200_000), minlength=VOCAB)
    top = counts[:10]
    assert (np.diff(top) <= 0).mean() >= 0.7  # the head follows the global Zipf order
    assert counts[:1000].sum() > counts[-50_000:].sum()
