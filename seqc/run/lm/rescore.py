"""N-best rescoring: each hypothesis's total is the recogniser's score plus a weighted
language-model score and a bonus per word, and the best total wins.

    total = score_am + lm_weight * score_lm + length_bonus * words

Why the bonus: an LM's log-probabilities are negative per word, so it prefers short
hypotheses (deletions); a bonus per word balances that. The two weights are chosen on dev
(`grid_search`: every pair of a small grid, the pair with the fewest word errors, ties to the
smaller LM weight), never on the split that is reported. The LM's score is whatever the scorer
gives (`seqc.run.lm.language_model`): normalised log-probabilities, or a self-normalised
model's raw scores, which is the comparison the SNIS paper makes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from seqc.run.lm.nbest import NBest
from seqc.run.scoring.wer import error_rates, word_edits

LM_WEIGHTS: tuple[float, ...] = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0, 1.5, 2.0)
LENGTH_BONUSES: tuple[float, ...] = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0)
"""The default grid `seqc rescore --dev` searches. Its edges were raised (from 1.0 and 3.0)
after a cross-entropy LM chose the largest bonus on dev over 32-best lists
(docs/results.md "LM fusion"): a choice at the grid's edge says the grid is too small."""


@dataclass(frozen=True)
class Weights:
    lm_weight: float
    length_bonus: float

    def __str__(self) -> str:
        return f"lm_weight = {self.lm_weight:g}, length_bonus = {self.length_bonus:g}"


def totals(nbest: NBest, lm: Sequence[float], w: Weights) -> np.ndarray:
    """Each hypothesis's rescored total."""
    am = np.asarray([h.score for h in nbest.hypotheses], np.float64)
    words = np.asarray([h.words for h in nbest.hypotheses], np.float64)
    return am + w.lm_weight * np.asarray(lm, np.float64) + w.length_bonus * words


def choose(lists: Sequence[NBest], lm: Sequence[Sequence[float]], w: Weights) -> list[str]:
    """The winning hypothesis of each list (the first of equal totals: the recogniser's
    order breaks ties)."""
    return [
        n.hypotheses[int(np.argmax(totals(n, s, w)))].text for n, s in zip(lists, lm, strict=True)
    ]


def rescored(lists: Sequence[NBest], lm: Sequence[Sequence[float]], w: Weights) -> dict:
    """WER and CER of the rescored lists against their references."""
    refs = _references(lists)
    return error_rates(choose(lists, lm, w), refs)


def grid_search(
    lists: Sequence[NBest],
    lm: Sequence[Sequence[float]],
    lm_weights: Sequence[float] = LM_WEIGHTS,
    bonuses: Sequence[float] = LENGTH_BONUSES,
) -> tuple[Weights, list[tuple[Weights, int]]]:
    """The weights with the fewest word errors on `lists` (dev), and every pair's errors."""
    refs = _references(lists)
    edits = [
        [word_edits(h.text, r) for h in n.hypotheses] for n, r in zip(lists, refs, strict=True)
    ]
    table: list[tuple[Weights, int]] = []
    for a in lm_weights:
        for b in bonuses:
            w = Weights(float(a), float(b))
            errors = sum(
                e[int(np.argmax(totals(n, s, w)))] for n, s, e in zip(lists, lm, edits, strict=True)
            )
            table.append((w, int(errors)))
    best = min(table, key=lambda row: (row[1], row[0].lm_weight, row[0].length_bonus))
    return best[0], table


def oracle(lists: Sequence[NBest]) -> dict:
    """WER of the best hypothesis each list holds (what no rescoring can beat)."""
    refs = _references(lists)
    best = [
        min(n.hypotheses, key=lambda h: word_edits(h.text, r)).text
        for n, r in zip(lists, refs, strict=True)
    ]
    return error_rates(best, refs)


def _references(lists: Sequence[NBest]) -> list[str]:
    missing = [n.id for n in lists if n.reference is None]
    if missing:
        from seqc.spec.errors import UsageError

        raise UsageError(
            f"{len(missing)} n-best lists have no reference (the first: {missing[0]}); word "
            "error rates need the transcripts",
            code="no-reference",
            hint="decode a manifest (seqc decode --manifest FILE --nbest N), whose lines hold "
            "the transcripts",
        )
    return [n.reference or "" for n in lists]
