"""Word and character error rates of transcripts, for speech recognition.

Why corpus-level: like BLEU, the rate is total edits over total reference words (characters)
across the corpus, not a mean of per-utterance rates, so a one-word utterance with one error
does not weigh as much as a twenty-word utterance with twenty. The alignment is jiwer's
(Levenshtein over words, and over characters with spaces counted as characters); rates are
percentages, 0-100 and more (insertions can push a rate past 100), as the project reports BLEU.

Text is compared after splitting on whitespace, so runs of spaces and leading or trailing
spaces are not errors; nothing else is normalized (case and punctuation count), since what
"the same word" means belongs to the task's tokenizer, not to the metric.

Empty transcripts, by our own rule rather than jiwer's (whose handling of an empty reference
changed between versions, from an error to a rate of 1 per utterance):
- empty reference, non-empty hypothesis: every hypothesis word (character) is an insertion;
  the utterance adds edits but no reference words;
- non-empty reference, empty hypothesis: every reference word (character) is a deletion;
- both empty: nothing.
A corpus whose references hold no words at all has a rate of 0 when there are no edits and 100
when there are any, since edits over zero words has no value.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class _Counts:
    """Edit counts summed over utterances, at one level (words or characters)."""

    reference: int = 0
    hits: int = 0
    substitutions: int = 0
    deletions: int = 0
    insertions: int = 0

    @property
    def edits(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    def rate(self) -> float:
        """Edits per reference unit, as a percentage; see the module docstring for no units."""
        if self.reference == 0:
            return 100.0 if self.edits else 0.0
        return 100.0 * self.edits / self.reference


def _units(text: str, chars: bool) -> list[str]:
    """The words of a text, or its characters with single spaces between its words."""
    words = text.split()
    return list(" ".join(words)) if chars else words


def _count(refs: list[str], hyps: list[str], chars: bool) -> _Counts:
    """Align each pair and sum the edits; empty sides are counted here, not passed to jiwer."""
    import jiwer

    counts = _Counts()
    both_ref: list[str] = []
    both_hyp: list[str] = []
    for ref, hyp in zip(refs, hyps, strict=True):
        r, h = _units(ref, chars), _units(hyp, chars)
        counts.reference += len(r)
        if not r:
            counts.insertions += len(h)
        elif not h:
            counts.deletions += len(r)
        else:
            # jiwer normalizes its input itself; hand it the whitespace-normalized text.
            both_ref.append(" ".join(ref.split()))
            both_hyp.append(" ".join(hyp.split()))
    if both_ref:
        process = jiwer.process_characters if chars else jiwer.process_words
        out = process(both_ref, both_hyp)
        counts.hits += out.hits
        counts.substitutions += out.substitutions
        counts.deletions += out.deletions
        counts.insertions += out.insertions
    return counts


def error_rates(hyps: list[str], refs: list[str]) -> dict[str, float]:
    """Corpus-level word and character error rates of `hyps` against `refs` (same order).

    Returns `wer` and `cer` (percentages) and the word-level counts behind `wer`: `words`
    (reference words), `substitutions`, `deletions`, `insertions`; and `chars` and `char_edits`
    behind `cer`, so that rates over several corpora can be combined by summing counts.
    """
    if len(hyps) != len(refs):
        raise ValueError(
            f"error_rates needs one hypothesis per reference; found {len(hyps)} hypotheses "
            f"and {len(refs)} references"
        )
    words = _count(refs, hyps, chars=False)
    chars = _count(refs, hyps, chars=True)
    return {
        "wer": words.rate(),
        "cer": chars.rate(),
        "words": words.reference,
        "substitutions": words.substitutions,
        "deletions": words.deletions,
        "insertions": words.insertions,
        "chars": chars.reference,
        "char_edits": chars.edits,
    }


def word_edits(hyp: str, ref: str) -> int:
    """The word-level edit distance of one pair (substitutions + deletions + insertions of the
    best alignment, what `error_rates` sums): for choosing among a list's hypotheses, which
    needs each one's errors without aligning the corpus again."""
    h, r = hyp.split(), ref.split()
    row = list(range(len(r) + 1))
    for i, word in enumerate(h, 1):
        diagonal, row[0] = row[0], i
        for j, target in enumerate(r, 1):
            diagonal, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, diagonal + (word != target))
    return row[-1]
