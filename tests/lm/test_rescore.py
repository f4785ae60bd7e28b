"""N-best rescoring: the arithmetic against a hand computation, weights chosen on dev, the
n-best file's format and its errors."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from seqc.run.lm.nbest import Hypothesis, NBest, read_nbest, write_nbest
from seqc.run.lm.rescore import Weights, choose, grid_search, oracle, rescored, totals
from seqc.run.scoring.wer import error_rates, word_edits
from seqc.spec.errors import FileError, UsageError

LIST = NBest(
    "u1",
    (
        Hypothesis("the cat sat", -3.0),
        Hypothesis("the cat sat down", -3.5),
        Hypothesis("a cat", -2.0),
    ),
    reference="the cat sat down",
)


def test_totals_are_the_hand_computation() -> None:
    lm = [-6.0, -7.0, -9.0]
    got = totals(LIST, lm, Weights(0.5, 1.0))
    # -3.0 + 0.5 * -6.0 + 1.0 * 3 = -3.0; -3.5 - 3.5 + 4 = -3.0; -2.0 - 4.5 + 2 = -4.5
    assert got.tolist() == pytest.approx([-3.0, -3.0, -4.5])
    assert choose([LIST], [lm], Weights(0.5, 1.0)) == ["the cat sat"]  # a tie: the first
    assert choose([LIST], [lm], Weights(0.5, 1.5)) == ["the cat sat down"]  # the bonus decides
    assert choose([LIST], [lm], Weights(0.0, 0.0)) == ["a cat"]  # the recogniser's own best


def test_the_weights_are_chosen_by_the_fewest_errors_and_the_wer_follows() -> None:
    sad = NBest(
        "u2",
        (
            Hypothesis("the cat sad", -2.5),
            Hypothesis("a cat", -2.8),
            Hypothesis("the cat sat", -3.0),
        ),
        reference="the cat sat",
    )
    lm = [[-9.0, -8.0, -5.0]]
    best, table = grid_search([sad], lm, lm_weights=(0.0, 0.5, 1.0), bonuses=(0.0, 1.5))
    assert best == Weights(0.5, 0.0)  # no bonus helps; of the weights that do, the smallest
    assert dict(table)[Weights(0.0, 0.0)] == 1 and dict(table)[Weights(1.0, 0.0)] == 0
    assert rescored([sad], lm, Weights(0.0, 0.0))["wer"] == pytest.approx(100 / 3)
    assert rescored([sad], lm, best)["wer"] == 0.0
    assert oracle([sad])["wer"] == 0.0


def test_word_edits_agree_with_the_corpus_error_rates() -> None:
    rng = random.Random(0)
    words = ["a", "b", "c", "d", "e"]
    for _ in range(200):
        hyp = " ".join(rng.choices(words, k=rng.randint(0, 6)))
        ref = " ".join(rng.choices(words, k=rng.randint(1, 6)))
        rates = error_rates([hyp], [ref])
        edits = rates["substitutions"] + rates["deletions"] + rates["insertions"]
        assert word_edits(hyp, ref) == edits, (hyp, ref)


def test_nbest_files_round_trip_and_a_damaged_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "dev.nbest.jsonl"
    path.write_text(write_nbest([LIST, NBest("u2", (Hypothesis("x", -1.0),))]))
    back = read_nbest(path)
    assert back[0] == LIST and back[1].reference is None
    lines = path.read_text().splitlines()
    lines.insert(1, json.dumps({"id": "u3", "hypotheses": []}))
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(FileError) as e:
        read_nbest(path)
    assert e.value.path == f"{path}:2" and "no hypotheses" in e.value.message
    with pytest.raises(FileError, match="no n-best file"):
        read_nbest(tmp_path / "missing.jsonl")


def test_error_rates_need_references() -> None:
    with pytest.raises(UsageError, match="no reference"):
        rescored([NBest("u", (Hypothesis("x", 0.0),))], [[0.0]], Weights(0.0, 0.0))
