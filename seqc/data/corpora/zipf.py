"""A synthetic word corpus from a known model, with a 100,000-word vocabulary: the large-vocabulary
benchmark of the sampled criteria (`bench/sampled.py`, ../shared/research/snis.md, "Macro").

Why synthetic: no real corpus this project can build offline has 100k distinct words, and a
generated one has a known entropy, so a model's perplexity can be read against the floor.

The model, a class bigram: word b follows word a with probability
    P(b | a) = lam * Z(b) + (1 - lam) * S_c(a)(b),   c(a) = a mod C,
where Z is Zipf(1.0) over all V ids (id 0 the most frequent, so ids are sorted by frequency
as a `log_uniform` proposal wants) and S_c is Zipf(1.1) over a class-specific random subset of
M words. A model learns the class of the previous word to beat the unigram; the rest is noise of
known entropy. The entropy rate is exact: H = sum_c pi_c H(P_c), pi the stationary distribution
of the class chain, each H(P_c) summed over all V words.

Text: one stream cut into lines of 32 words (`w123` tokens); `manifest.json` records the
entropy rate and its perplexity (the floor for words whose previous word is on the line; the
first word of a line and its end-of-line token differ slightly, so a line's floor is a little
off). Deterministic: a fixed seed, the same files on every machine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from seqc.data.corpora.output import write_lines

NAME = "zipf"
FILES: tuple[str, ...] = ("train.txt", "dev.txt", "test.txt")
VOCAB = 100_000
CLASSES = 64
SUBSET = 5_000
MIX = 0.5
LINE = 32
WORDS = {"train.txt": 2_000_000, "dev.txt": 64_000, "test.txt": 64_000}
SEED = 20221111  # SNIS's arXiv date


def zipf(n: int, exponent: float) -> np.ndarray:
    p = 1.0 / np.arange(1, n + 1) ** exponent
    return p / p.sum()


class ClassBigram:
    """The generating model, and its exact entropy rate."""

    def __init__(self, seed: int = SEED) -> None:
        rng = np.random.default_rng(seed)
        self.rng = rng
        self.global_p = zipf(VOCAB, 1.0)
        self.subset_p = zipf(SUBSET, 1.1)
        self.subsets = np.stack([rng.choice(VOCAB, SUBSET, replace=False) for _ in range(CLASSES)])

    def conditional(self, c: int) -> np.ndarray:
        """P(. | a) for a previous word of class c, over all V words."""
        p = MIX * self.global_p
        np.add.at(p, self.subsets[c], (1.0 - MIX) * self.subset_p)
        return p

    def entropy_rate(self) -> float:
        """Nats per word: sum_c pi_c H(P_c)."""
        h = np.zeros(CLASSES)
        moves = np.zeros((CLASSES, CLASSES))
        classes = np.arange(VOCAB) % CLASSES
        for c in range(CLASSES):
            p = self.conditional(c)
            h[c] = -float(np.sum(p * np.log(p)))
            moves[c] = np.bincount(classes, weights=p, minlength=CLASSES)
        values, vectors = np.linalg.eig(moves.T)
        pi = np.real(vectors[:, np.argmin(np.abs(values - 1.0))])
        pi = pi / pi.sum()
        return float(pi @ h)

    def sample(self, n: int) -> np.ndarray:
        """n words of one stream."""
        rng = self.rng
        g = np.searchsorted(np.cumsum(self.global_p), rng.random(n) * (1 - 1e-12))
        j = np.searchsorted(np.cumsum(self.subset_p), rng.random(n) * (1 - 1e-12))
        mixed = (rng.random(n) < MIX).tolist()
        g_list, j_list, subsets = g.tolist(), j.tolist(), self.subsets.tolist()
        out = [0] * n
        prev = 0
        for t in range(n):  # sequential: each word's distribution depends on the last
            prev = g_list[t] if mixed[t] else subsets[prev % CLASSES][j_list[t]]
            out[t] = prev
        return np.asarray(out, np.int64)


def build(folder: Path, source: Path | None = None) -> dict[str, Any]:
    """Write train/dev/test; the manifest body records the model and its entropy."""
    del source  # generated here: nothing to read
    model = ClassBigram()
    entropy = model.entropy_rate()
    splits: dict[str, Any] = {}
    for name, n in WORDS.items():
        words = model.sample(n).reshape(-1, LINE)
        lines = [" ".join(f"w{i}" for i in row) for row in words.tolist()]
        splits[name.removesuffix(".txt")] = write_lines(folder / name, lines)
    return {
        "source": "generated: a class-bigram model of Zipfian words (seqc.data.corpora.zipf)",
        "vocab": VOCAB,
        "model": {"classes": CLASSES, "subset": SUBSET, "mix": MIX, "seed": SEED},
        "entropy_nats_per_word": entropy,
        "perplexity_floor": float(np.exp(entropy)),
        "splits": splits,
    }
