"""Shallow fusion of a word LM into CTC prefix beam search, on constructed frame scores and a
table LM: the LM moves the search towards the words it prefers, and only at word boundaries."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from seqc.data.tokenizers import WordTokenizer
from seqc.run.decoding.ctc import ctc_prefix_beam_nbest, log_softmax
from seqc.run.decoding.fusion import END, WordFusion, word_starts
from seqc.spec.errors import UsageError


class TableLM:
    """log p(word | previous word) from a table; every query is recorded."""

    def __init__(self, table: dict[tuple[str, str], float], floor: float = 0.01) -> None:
        self.table, self.floor = table, floor
        self.queries: list[tuple[tuple[str, ...], str]] = []

    def extend(self, history: tuple[str, ...], words: Sequence[str]) -> list[float]:
        before = history[-1] if history else "<s>"
        self.queries.extend((history, w) for w in words)
        return [math.log(self.table.get((before, w), self.floor)) for w in words]

    def forget(self) -> None:
        pass


def _frames(tok: WordTokenizer, path: list[dict[str, float]]) -> np.ndarray:
    """Frame log-probabilities: each frame's named words get their probability, the rest of
    the mass goes to blank."""
    z = np.full((len(path), tok.vocab_size), 1e-6)
    for t, probs in enumerate(path):
        for word, p in probs.items():
            z[t, tok.encode(word)[0]] = p
        z[t, 0] = max(1e-6, 1.0 - sum(probs.values()))
    return np.log(z / z.sum(axis=1, keepdims=True))


@pytest.fixture
def tok() -> WordTokenizer:
    return WordTokenizer.fit(["a b c"])


def _decode(tok: WordTokenizer, logp: np.ndarray, fusion: WordFusion | None) -> str:
    best = ctc_prefix_beam_nbest(logp, logp.shape[0], width=4, blank=0, bonus=fusion)
    return tok.decode(best[0][0])


def test_the_lm_moves_an_uncertain_word_its_way(tok: WordTokenizer) -> None:
    # "a", then b (0.55) or c (0.45): the acoustics say "a b", the LM says c follows a
    logp = _frames(tok, [{"a": 0.9}, {}, {"b": 0.55, "c": 0.45}, {}])
    lm = TableLM({("<s>", "a"): 0.5, ("a", "c"): 0.9, ("a", "b"): 0.05})
    assert _decode(tok, logp, None) == "a b"
    assert _decode(tok, logp, WordFusion(lm, tok, lm_weight=0.0)) == "a b"
    assert _decode(tok, logp, WordFusion(lm, tok, lm_weight=0.5)) == "a c"
    # a clear acoustic decision stands against the same LM at a small weight
    clear = _frames(tok, [{"a": 0.9}, {}, {"b": 0.95, "c": 0.01}, {}])
    assert _decode(tok, clear, WordFusion(lm, tok, lm_weight=0.5)) == "a b"


def test_the_fused_score_is_the_acoustic_one_plus_the_weighted_lm_and_bonus(
    tok: WordTokenizer,
) -> None:
    logp = _frames(tok, [{"a": 0.9}, {}, {"b": 0.8}, {}])
    lm = TableLM({("<s>", "a"): 0.5, ("a", "b"): 0.25, ("b", END): 0.8})
    plain = ctc_prefix_beam_nbest(logp, 4, width=64)  # wide: every path kept, scores exact
    fused = ctc_prefix_beam_nbest(logp, 4, width=64, bonus=WordFusion(lm, tok, 0.3, 2.0))
    acoustic = dict((tuple(ids), s) for ids, s in plain)
    ids, score = fused[0]
    assert tok.decode(ids) == "a b"
    lm_part = math.log(0.5) + math.log(0.25) + math.log(0.8)
    assert score == pytest.approx(acoustic[tuple(ids)] + 0.3 * lm_part + 2.0 * 2, abs=1e-9)


def test_words_are_scored_once_at_their_boundaries(tok: WordTokenizer) -> None:
    logp = _frames(tok, [{"a": 0.9}, {}, {"b": 0.55, "c": 0.45}, {}, {"a": 0.9}])
    lm = TableLM({})
    ctc_prefix_beam_nbest(logp, logp.shape[0], width=4, bonus=WordFusion(lm, tok, 0.5))
    assert len(lm.queries) == len(set(lm.queries))  # one query per (history, word)
    assert all(len(h) <= 2 for h, _ in lm.queries)


def test_without_a_bonus_the_search_is_unchanged() -> None:
    rng = np.random.default_rng(0)
    logp = log_softmax(rng.normal(size=(30, 7)) * 3)
    plain = ctc_prefix_beam_nbest(logp, 30, width=5)

    class Zero:
        def extension(self, prefix: tuple[int, ...], tokens: np.ndarray) -> np.ndarray:
            return np.zeros(tokens.shape)

        def final(self, prefix: tuple[int, ...]) -> float:
            return 0.0

    assert ctc_prefix_beam_nbest(logp, 30, width=5, bonus=Zero()) == plain


def test_word_starts_of_a_word_vocabulary_and_of_word_pieces() -> None:
    tok = WordTokenizer.fit(["the cat sat"])
    starts = word_starts(tok)
    assert starts[tok.encode("cat")[0]] and not starts[tok.bos_id] and not starts[tok.pad_id]
    from seqc.data.sentencepiece_model import SentencePieceTokenizer

    lines = [f"the {w}ing {w}er {w}s" for w in ("walk", "talk", "sing", "read", "play")] * 20
    pieces = SentencePieceTokenizer.train(lines, vocab_size=28)
    starts = word_starts(pieces)
    for word in ("walking", "talkers", "sings"):
        ids = pieces.encode(word)
        assert starts[ids[0]] and not starts[ids[1:]].any(), [pieces.decode([i]) for i in ids]


def test_word_pieces_are_scored_as_whole_words() -> None:
    from seqc.data.sentencepiece_model import SentencePieceTokenizer

    lines = [f"the {w}ing {w}er {w}s" for w in ("walk", "talk", "sing", "read", "play")] * 20
    pieces = SentencePieceTokenizer.train(lines, vocab_size=28)
    path = [*pieces.encode("the walking"), *pieces.encode("talkers")]
    logp = np.full((2 * len(path), pieces.vocab_size), math.log(1e-4))
    for t, i in enumerate(path):
        logp[2 * t, i], logp[2 * t + 1, 0] = 0.0, 0.0
    lm = TableLM({})
    best = ctc_prefix_beam_nbest(logp, logp.shape[0], 2, bonus=WordFusion(lm, pieces, 0.1))
    assert pieces.decode(best[0][0]) == "the walking talkers"
    asked = {w for _, w in lm.queries}
    assert {"the", "walking", "talkers", END} <= asked


def test_a_character_vocabulary_is_refused() -> None:
    from seqc.data.tokenizers import CharTokenizer

    with pytest.raises(UsageError, match="space token"):
        word_starts(CharTokenizer.fit(["ab ba"]))


def test_an_attention_beam_search_takes_the_same_bonus(tok: WordTokenizer) -> None:
    """`beam_step` with the fusion's bonus: each token's log-probability gains what the LM
    says of the word it completes, EOS what the LM says of ending there."""
    from seqc.run.decoding.search import Hypothesis, beam_step, best

    a, b, c = (tok.encode(w)[0] for w in "abc")
    steps = [{a: 0.9}, {b: 0.55, c: 0.4}, {tok.eos_id: 0.95}]

    def logp(probs: dict[int, float]) -> np.ndarray:
        z = np.full(tok.vocab_size, 1e-3)
        for t, p in probs.items():
            z[t] = p
        return np.log(z / z.sum())

    def search(fusion: WordFusion | None) -> str:
        beams, finished = [Hypothesis([], 0.0)], []
        for probs in steps:
            rows = np.stack([logp(probs)] * len(beams))
            chosen = beam_step(beams, rows, finished, 3, 0.0, tok.eos_id, fusion)
            beams = chosen.beams
        return tok.decode(best(finished, beams, 0.0))

    lm = TableLM({("<s>", "a"): 0.5, ("a", "c"): 0.9, ("a", "b"): 0.05})
    assert search(None) == "a b"
    assert search(WordFusion(lm, tok, lm_weight=0.0)) == "a b"
    assert search(WordFusion(lm, tok, lm_weight=0.5)) == "a c"


def test_output_ids_past_the_tokenizer_start_no_word(tok: WordTokenizer) -> None:
    """A model's output may be wider than its tokenizer (`vocab = 72` over 65 tokens)."""
    fusion = WordFusion(TableLM({}), tok, 1.0, 1.0)
    a = tok.encode("a")[0]
    tokens = np.arange(tok.vocab_size + 3)
    bonus = fusion.extension((a,), tokens)
    assert bonus[tok.vocab_size :].tolist() == [0.0, 0.0, 0.0]
    assert bonus[tok.encode("b")[0]] == pytest.approx(math.log(0.01) + 1.0)


def test_an_attention_decoders_nbest_is_merged_by_text_and_fused(tok: WordTokenizer) -> None:
    import dataclasses

    from seqc.compiler.config import DecodeConfig
    from seqc.data.calls import make_call
    from seqc.run.decoding.search import Hypothesis
    from seqc.run.scoring.transcribe import Transcriber
    from seqc.spec.errors import UsageError

    a, b = tok.encode("a")[0], tok.encode("b")[0]

    class Beams:
        def __init__(self) -> None:
            self.fusion: object = None
            self.asked: list[tuple[int, int]] = []

        def nbest(self, strategy: object, prompt: list[int], src: object, n: int) -> list:
            self.asked.append((strategy.width, n))  # type: ignore[attr-defined]
            return [Hypothesis([a, b], -1.0), Hypothesis([a, b, 0], -2.0), Hypothesis([a], -3.0)]

    beam = DecodeConfig.of(make_call("decode", "beam", width=2))
    beams = Beams()
    fusion = WordFusion(TableLM({}), tok, 0.5)
    listen = Transcriber(tok, beam, decoder=beams, fusion=fusion)  # type: ignore[arg-type]
    got = listen.nbest(np.zeros(1600, np.float32), 3)
    assert [t for t, _ in got] == ["a b", "a"]  # "a b" twice (a pad token) is one transcript
    assert got[0][1] == pytest.approx(np.logaddexp(-1.0, -2.0))
    assert beams.asked == [(3, 3)] and beams.fusion is fusion  # widened to n; the bonus given
    greedy = dataclasses.replace(listen, strategy=DecodeConfig.of(make_call("decode", "greedy")))
    with pytest.raises(UsageError, match="beam search"):
        greedy.nbest(np.zeros(1600, np.float32), 2)


class TableTokenLM:
    """log p(token | previous token) from a table of token ids; every query is recorded."""

    def __init__(self, table: dict[tuple[int, int], float], floor: float = 0.01) -> None:
        self.table, self.floor = table, floor
        self.queries: list[tuple[tuple[int, ...], int]] = []

    def extend_ids(self, history: tuple[int, ...], labels: Sequence[int]) -> list[float]:
        before = history[-1] if history else -1
        self.queries.extend((history, t) for t in labels)
        return [math.log(self.table.get((before, t), self.floor)) for t in labels]

    def forget(self) -> None:
        pass


def test_an_lm_of_the_recognisers_own_tokens_is_fused_at_every_token(tok: WordTokenizer) -> None:
    """A subword LM (here: over the same vocabulary) scores each token as it is appended, so
    it moves the search as a word LM does, and the fused score is the acoustic one plus the
    weighted LM log-probability of every token and of the end, and the bonus per word."""
    from seqc.run.decoding.fusion import TokenFusion

    a, b, c = (tok.encode(w)[0] for w in "abc")
    end = tok.eos_id
    lm = TableTokenLM({(-1, a): 0.5, (a, c): 0.9, (a, b): 0.05, (b, end): 0.8, (c, end): 0.8})
    logp = _frames(tok, [{"a": 0.9}, {}, {"b": 0.55, "c": 0.45}, {}])
    assert _decode(tok, logp, TokenFusion(lm, tok, 0.0)) == "a b"
    assert _decode(tok, logp, TokenFusion(lm, tok, 0.5)) == "a c"
    clear = _frames(tok, [{"a": 0.9}, {}, {"b": 0.8}, {}])
    plain = dict((tuple(i), s) for i, s in ctc_prefix_beam_nbest(clear, 4, width=64))
    lm.queries.clear()
    fused = ctc_prefix_beam_nbest(clear, 4, width=64, bonus=TokenFusion(lm, tok, 0.3, 2.0))
    ids, score = fused[0]
    assert tok.decode(ids) == "a b"
    lm_part = math.log(0.5) + math.log(0.05) + math.log(0.8)
    assert score == pytest.approx(plain[tuple(ids)] + 0.3 * lm_part + 2.0 * 2, abs=1e-9)
    # each prefix asks once per token it is extended by, however many frames it lives
    assert len(lm.queries) == len(set(lm.queries))


def test_the_fusion_follows_the_lms_vocabulary(tok: WordTokenizer) -> None:
    """An LM that shares the recogniser's tokenizer is fused at every token; another, at word
    boundaries (`fusion_of`)."""
    from types import SimpleNamespace

    from seqc.run.decoding.fusion import TokenFusion
    from seqc.run.lm.language_model import fusion_of

    same = SimpleNamespace(tokenizer=tok)
    other = SimpleNamespace(tokenizer=WordTokenizer.fit(["a b c d"]))
    assert isinstance(fusion_of(same, tok, 0.3, 1.0), TokenFusion)  # type: ignore[arg-type]
    assert isinstance(fusion_of(other, tok, 0.3, 1.0), WordFusion)  # type: ignore[arg-type]
