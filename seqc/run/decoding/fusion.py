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
token of its own, is refused: fuse a character model with a character LM instead (not built).
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
