"""Shallow fusion of a word language model into CTC prefix beam search.

A prefix's rank is its CTC log-probability plus, for every word it has completed,
`lm_weight * log p_LM(word | the words before) + length_bonus`, and a labelling that ends also
gains `lm_weight * log p_LM(</s> | its words)` and its last word's share. The recogniser's
tokens may be pieces of words (SentencePiece): a word is complete when a token that starts a
new word is appended (a piece with SentencePiece's word mark, any token of a word vocabulary),
or when the labelling ends. So a word LM is asked only about whole words, at their boundaries,
and the prefixes of one word in the beam share one query. The bonus depends on the labelling
alone, which is what lets prefixes that merge in the CTC search keep one score
(`seqc.run.decoding.ctc.PrefixBonus`).

How a token "starts a word" is read off the tokenizer, not its kind: token t starts a word when
the text of (a word, t) puts a space before t's text. A character vocabulary, whose space is a
token of its own, is refused for a word LM.

An LM over the recogniser's own vocabulary (a subword LM of the same SentencePiece model, or a
character LM of a character recogniser) is fused at every token instead (`TokenFusion`): each
token a prefix appends gains `lm_weight * log p_LM(token | the prefix)`, with `length_bonus`
per word as above. `seqc.run.lm.language_model.fusion_of` picks the one that fits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from seqc.spec.errors import UsageError

if TYPE_CHECKING:
    from seqc.data.tokenizers import Tokenizer

END = "</s>"


class TokenScorer(Protocol):
    """log-scores of tokens after a history of tokens (`LanguageModel.extend_ids`)."""

    def extend_ids(self, history: tuple[int, ...], labels: Sequence[int]) -> list[float]: ...

    def forget(self) -> None: ...


class WordScorer(Protocol):
    """log-scores of words after a history (`seqc.run.lm.language_model.LanguageModel`)."""

    def extend(self, history: tuple[str, ...], words: Sequence[str]) -> list[float]: ...

    def forget(self) -> None: ...


def word_starts(tokenizer: Tokenizer) -> np.ndarray:
    """bool [vocab]: which tokens begin a new word when they follow a word."""
    probe = _probe(tokenizer)
    head = tokenizer.decode([probe])
    out = np.zeros(tokenizer.vocab_size, bool)
    special = {tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id}
    for t in range(tokenizer.vocab_size):
        if t in special:
            continue
        text = tokenizer.decode([probe, t])
        out[t] = text.startswith(head + " ") and len(text) > len(head) + 1
    if not out.any() or any(tokenizer.decode([t]).isspace() for t in range(tokenizer.vocab_size)):
        raise UsageError(
            "word-LM fusion needs targets of words or word pieces (words or sentencepiece "
            "tokenizers); this tokenizer spells words with a space token",
            code="fusion-needs-words",
            hint="use a words(...) or sentencepiece(...) tokenizer for the transcripts",
        )
    return out


def _probe(tokenizer: Tokenizer) -> int:
    """A token that decodes to a word of letters (what another token follows in the probe)."""
    for t in range(tokenizer.vocab_size):
        text = tokenizer.decode([t])
        if text.strip().isalpha() and text == text.strip():
            return t
    raise UsageError("the tokenizer has no token of letters to find word boundaries with",
                     code="fusion-needs-words")  # fmt: skip


@dataclass
class WordFusion:
    """The bonus of shallow fusion with a word LM (a `PrefixBonus`)."""

    lm: WordScorer
    tokenizer: Tokenizer
    lm_weight: float
    length_bonus: float = 0.0
    starts: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    _words: dict[tuple[int, ...], tuple[str, ...]] = field(default_factory=dict, repr=False)
    _complete: dict[tuple[str, ...], float] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.starts.size == 0:
            self.starts = word_starts(self.tokenizer)

    def words(self, prefix: tuple[int, ...]) -> tuple[str, ...]:
        known = self._words.get(prefix)
        if known is None:
            known = tuple(self.tokenizer.decode(list(prefix)).split())
            self._words[prefix] = known
        return known

    def _completion(self, words: tuple[str, ...]) -> float:
        """What completing the last of `words` adds: weighted LM score and the bonus."""
        if not words:
            return 0.0
        known = self._complete.get(words)
        if known is None:
            (logp,) = self.lm.extend(words[:-1], [words[-1]])
            known = self.lm_weight * logp + self.length_bonus
            self._complete[words] = known
        return known

    def extension(self, prefix: tuple[int, ...], tokens: np.ndarray) -> np.ndarray:
        out = np.zeros(tokens.shape, np.float64)
        # a model's output may be wider than its tokenizer (`vocab = 72` over 65 tokens): the
        # ids past the tokenizer's are no word's start
        inside = tokens < self.starts.size
        starting = np.zeros(tokens.shape, bool)
        starting[inside] = self.starts[tokens[inside]]
        if starting.any():
            out[starting] = self._completion(self.words(prefix))
        return out

    def final(self, prefix: tuple[int, ...]) -> float:
        words = self.words(prefix)
        if not words:
            (end,) = self.lm.extend((), [END])
            return self.lm_weight * end
        (end,) = self.lm.extend(words, [END])
        return self._completion(words) + self.lm_weight * end

    def reset(self) -> None:
        """Before the next utterance: its prefixes share nothing with this one's."""
        self._words.clear()
        self._complete.clear()
        self.lm.forget()


@dataclass
class TokenFusion:
    """The bonus of shallow fusion with a subword LM over the recogniser's own vocabulary (a
    `PrefixBonus`): every token a prefix appends gains `lm_weight * log p_LM(token | the
    prefix)`, and one that starts a word `length_bonus`; a labelling that ends gains
    `lm_weight * log p_LM(</s> | it)`. Each prefix's scores are asked once, for the tokens
    the search tries after it (`fusion_of` picks this where the tokenizers are one)."""

    lm: TokenScorer
    tokenizer: Tokenizer
    lm_weight: float
    length_bonus: float = 0.0
    starts: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    _scores: dict[tuple[int, ...], dict[int, float]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.starts.size == 0:
            try:
                self.starts = word_starts(self.tokenizer)
            except UsageError:  # characters: a word starts after the space token
                spaces = [self.tokenizer.decode([t]).isspace() for t in range(self.vocab)]
                self.starts = np.asarray(spaces, bool)

    @property
    def vocab(self) -> int:
        return int(self.tokenizer.vocab_size)

    def _after(self, prefix: tuple[int, ...], tokens: Sequence[int]) -> list[float]:
        known = self._scores.setdefault(prefix, {})
        missing = [t for t in dict.fromkeys(tokens) if t not in known]
        if missing:
            known.update(zip(missing, self.lm.extend_ids(prefix, missing), strict=True))
        return [known[t] for t in tokens]

    def extension(self, prefix: tuple[int, ...], tokens: np.ndarray) -> np.ndarray:
        out = np.zeros(tokens.shape, np.float64)
        # ids past the tokenizer's (a model's output may be wider) are no token of the LM's
        inside = tokens < self.starts.size
        if inside.any():
            ids = [int(t) for t in tokens[inside]]
            scores = np.asarray(self._after(prefix, ids), np.float64)
            out[inside] = self.lm_weight * scores + self.length_bonus * self.starts[ids]
        return out

    def final(self, prefix: tuple[int, ...]) -> float:
        (end,) = self._after(prefix, [self.tokenizer.eos_id])
        return self.lm_weight * end

    def reset(self) -> None:
        """Before the next utterance: its prefixes share nothing with this one's."""
        self._scores.clear()
        self.lm.forget()
