"""Generation from a trained model: greedy, temperature sampling, and beam search with length
normalisation, for language models (continue a prompt) and encoder-decoders (translate).

The search rules here (`beam_step`, `best`, `sample_token`, `log_softmax64`) are shared by every
decoder that searches on the host, so they all keep the same hypotheses. `Decoder` runs them over
the whole compiled forward pass on a fixed-length buffer and reads the logits at the current
position; causal attention makes the positions after it irrelevant. Fixed shapes mean one
compilation per (beams, length) rather than one per step. Decoding over an encoder and a decoder
step with explicit caches (exported artifacts) is `seqc.run.decoding.steps`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from seqc.backends.api import Model
from seqc.compiler.config import Beam, DecodeConfig, Sample
from seqc.compiler.signature import buffer_length
from seqc.run.decoding.ctc import PrefixBonus

Source = np.ndarray | Mapping[str, np.ndarray]
"""A source as the model reads it: token ids [rows, S], or audio arrays (`audio`,
`audio_mask`) of one utterance."""


@dataclass
class Hypothesis:
    tokens: list[int]
    logprob: float

    def score(self, alpha: float) -> float:
        if alpha == 0.0:
            return self.logprob
        return self.logprob / (((5.0 + len(self.tokens)) / 6.0) ** alpha)


def log_softmax64(logits: Any) -> np.ndarray:
    """Log-probabilities in float64 from float32 logits [rows, V]: every decoder ranks tokens on
    the same numbers, so near-ties break the same way."""
    z = np.asarray(logits, np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


@dataclass
class BeamStep:
    """The survivors of one beam-search step: open hypotheses with the row each extends."""

    beams: list[Hypothesis]
    parents: list[int]
    tokens: list[int]
    done: bool
    """True when `width` hypotheses have finished and the best of them beats every open one."""


def beam_step(
    current: list[Hypothesis],
    logp: np.ndarray,
    finished: list[Hypothesis],
    width: int,
    alpha: float,
    eos: int,
    bonus: PrefixBonus | None = None,
) -> BeamStep:
    """Top `width + 1` tokens of each open hypothesis, ranked together; EOS candidates join
    `finished` (in place) until `width` open ones are collected. Shared by every decoder that
    runs beam search on the host, so they all keep the same hypotheses.

    `bonus` (shallow fusion, `seqc.run.decoding.fusion`): each token's log-probability gains
    what appending it adds to the hypothesis's LM bonus (a completed word's weighted LM score),
    and EOS what ending it adds; the hypotheses' scores carry the sum."""
    if bonus is not None:
        logp = np.array(logp, dtype=np.float64)
        every = np.arange(logp.shape[-1])
        for i, h in enumerate(current):
            prefix = tuple(h.tokens)
            logp[i] += bonus.extension(prefix, every)
            logp[i, eos] += bonus.final(prefix)
    candidates: list[tuple[float, int, int]] = []
    k = min(width + 1, logp.shape[-1])
    for i, h in enumerate(current):
        # the k best in order: a partition, then a sort of those k (not of the vocabulary)
        part = np.argpartition(-logp[i], k - 1)[:k]
        top = part[np.argsort(-logp[i][part], kind="stable")]
        candidates += [(h.logprob + float(logp[i, t]), i, int(t)) for t in top]
    candidates.sort(key=lambda c: -c[0])
    beams, parents, tokens = [], [], []
    for total, i, tok in candidates:
        if tok == eos:
            finished.append(Hypothesis(current[i].tokens, total))
        else:
            beams.append(Hypothesis([*current[i].tokens, tok], total))
            parents.append(i)
            tokens.append(tok)
        if len(beams) == width:
            break
    best_open = max((h.score(alpha) for h in beams), default=-math.inf)
    done = len(finished) >= width and max(f.score(alpha) for f in finished) >= best_open
    return BeamStep(beams, parents, tokens, done)


def best(finished: list[Hypothesis], beams: list[Hypothesis], alpha: float) -> list[int]:
    pool = finished or beams
    return max(pool, key=lambda h: h.score(alpha)).tokens


def ranked(
    finished: list[Hypothesis], beams: list[Hypothesis], alpha: float, n: int
) -> list[Hypothesis]:
    """The `n` best hypotheses of a search, best first: the finished ones by score, then, where
    fewer than `n` finished, the open ones by score. The first is `best`'s."""
    done = sorted(finished, key=lambda h: -h.score(alpha))
    if len(done) >= n:
        return done[:n]
    return [*done, *sorted(beams, key=lambda h: -h.score(alpha))][:n]


class Decoder:
    """Decodes with any backend's model over its `logits` (a language model continues a
    prompt; an encoder-decoder translates a source)."""

    fusion: PrefixBonus | None = None
    """Shallow fusion in beam search (`beam_step`'s bonus); None: none."""

    def __init__(self, model: Model, params: Any, bos: int, eos: int, pad: int) -> None:
        self.model, self.params, self.task = model, params, model.task.kind
        self.bos, self.eos, self.pad = bos, eos, pad

    def _logits(self, prefix: np.ndarray, src: Source | None, pos: int) -> np.ndarray:
        """Log-probabilities [rows, V] of the next token after prefix[:, :pos + 1]."""
        if self.task == "lm":
            arrays = {"inputs": prefix}
        elif isinstance(src, Mapping):  # a speech model's audio, one row for every hypothesis
            rows = prefix.shape[0]
            arrays = {k: np.repeat(v[:1], rows, axis=0) for k, v in src.items()}
            arrays |= {"tgt_in": prefix, "tgt_mask": prefix != self.pad}
        else:
            assert src is not None
            arrays = {
                "src": src,
                "src_mask": src != self.pad,
                "tgt_in": prefix,
                "tgt_mask": prefix != self.pad,
            }
        return log_softmax64(np.asarray(self.model.logits(self.params, arrays))[:, pos, :])

    def generate(
        self,
        strategy: DecodeConfig,
        prompt: list[int],
        src: list[int] | Mapping[str, np.ndarray] | None = None,
        seed: int = 0,
        stop_at_eos: bool = True,
    ) -> list[int]:
        """Token ids after the prompt (LM) or of the translation (seq2seq), without BOS.

        With `stop_at_eos` False a language model runs on past the end of a line (its EOS is
        kept in the output), which is what a multi-line sample wants."""
        max_len = strategy.max_length
        if isinstance(strategy, Beam):
            return self._beam(strategy, prompt, src, max_len)
        rng = np.random.default_rng(seed or seed_of(strategy))
        start = [self.bos, *prompt]
        length = buffer_length(len(start) + max_len)
        buf = np.full((1, length), self.pad, np.int32)
        buf[0, : len(start)] = start
        src_arr = _source(src, 1)
        out: list[int] = []
        for pos in range(len(start) - 1, len(start) - 1 + max_len):
            logp = self._logits(buf, src_arr, pos)[0]
            if isinstance(strategy, Sample):
                tok = sample_token(logp, strategy, rng)
            else:
                tok = int(np.argmax(logp))
            if tok == self.eos and stop_at_eos:
                break
            out.append(tok)
            buf[0, pos + 1] = tok
        return out

    def _beam(
        self,
        strategy: Beam,
        prompt: list[int],
        src: list[int] | Mapping[str, np.ndarray] | None,
        max_len: int,
    ) -> list[int]:
        width, alpha = strategy.width, strategy.length_penalty
        start = [self.bos, *prompt]
        length = buffer_length(len(start) + max_len)
        beams = [Hypothesis([], 0.0)]
        finished: list[Hypothesis] = []
        src_arr = _source(src, width)
        for step in range(max_len):
            buf = np.full((width, length), self.pad, np.int32)
            for i, h in enumerate(beams):
                seq = start + h.tokens
                buf[i, : len(seq)] = seq
            logp = self._logits(buf, src_arr, len(start) - 1 + step)[: len(beams)]
            chosen = beam_step(beams, logp, finished, width, alpha, self.eos, self.fusion)
            beams = chosen.beams
            if chosen.done:
                break
        return best(finished, beams, alpha)


def _source(src: list[int] | Mapping[str, np.ndarray] | None, rows: int) -> Source | None:
    """The source as arrays of `rows` rows: token ids, or a speech model's audio arrays."""
    if src is None or isinstance(src, Mapping):
        return src
    return np.repeat(np.asarray([src], np.int32), rows, axis=0)


def seed_of(strategy: DecodeConfig) -> int:
    """The seed a strategy draws with when the caller gives none: a `sample`'s own, else 0
    (greedy and beam search draw nothing)."""
    return strategy.seed if isinstance(strategy, Sample) else 0


def sample_token(logp: np.ndarray, strategy: Sample, rng: np.random.Generator) -> int:
    """One token drawn from log-probabilities `logp` [V] as a `sample(...)` strategy shapes
    them (temperature, then top-k, then top-p): every host decoder draws through here, so the
    same seed gives the same tokens whichever decoder runs."""
    temperature = max(strategy.temperature, 1e-6)
    logits = logp / temperature
    top_k = strategy.top_k
    if top_k > 0:
        cut = np.sort(logits)[-top_k]
        logits = np.where(logits < cut, -np.inf, logits)
    top_p = strategy.top_p
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    if top_p < 1.0:
        order = np.argsort(-probs)
        keep = np.cumsum(probs[order]) - probs[order] < top_p
        mask = np.zeros_like(probs, bool)
        mask[order[keep]] = True
        probs = np.where(mask, probs, 0.0)
        probs /= probs.sum()
    return int(rng.choice(len(probs), p=probs))
