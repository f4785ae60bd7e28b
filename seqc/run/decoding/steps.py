"""Decoding over an encoder and a decoder-step function with explicit caches, one source at a
time or several at once.

This is how exported artifacts decode (onnxruntime, LiteRT) and how any backend can decode in
O(T) rather than O(T^2): the step function computes one position and returns its caches, and
the loop here feeds them back. The strategies are the reference decoder's
(`seqc.run.decoding.search.Decoder`), step for step: the same prompt handling, stop rules,
sampling and beam bookkeeping (top `width + 1` per beam, finished hypotheses, GNMT length
penalty), so on the same weights the tokens are the same. Beam search keeps `width` rows and
reorders every cache along its batch axis by the surviving beams' parents.

Several sources at once (`decode_all`, `StepDecoder.generate_many`). Why: one source at a time,
beam 4 runs the step on 4 rows, and in a framework (JAX, TF) much of a step's time goes to
dispatching it, not to arithmetic. Stacking `batch` sources gives the step `batch * width` rows,
so a test set decodes faster with the same search (`DEFAULT_BATCH` has the figures): each source
keeps its own beams, finished hypotheses and stop rule (`beam_step`, as `StepDecoder.generate`),
only the rows are shared. On JAX and TF a source whose search is over keeps its rows (fed
padding, never read) until the whole batch is done, so that the step's shapes, and the programs
compiled for them, stay the same; on a runtime that runs any shape without compiling
(onnxruntime, LiteRT: `StepFunctions.shrinks`) its rows leave the batch at once, so a server's
batch costs what its live sources do. Sorting sources by length first (`decode_all`) keeps
the sources of one batch finishing close together. Encoding sources of different lengths in
one batch pads them to the longest; the source mask makes that padding neutral, so the
hypotheses are those of one-at-a-time decoding up to float rounding (a near-tie between two
beams could in principle break the other way).

A program without a step (a CTC model, `StepSignature.encoder_only`) runs in one pass
(`seqc.run.decoding.forced.one_pass`): it has nothing to decode here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from seqc.backends.api import StepFunctions
from seqc.compiler.config import Beam, DecodeConfig, Greedy, Sample
from seqc.compiler.incremental import POS
from seqc.compiler.signature import buffer_length
from seqc.compiler.step_signature import StepSignature
from seqc.run.decoding.ctc import PrefixBonus
from seqc.run.decoding.search import (
    Hypothesis,
    beam_step,
    best,
    log_softmax64,
    ranked,
    sample_token,
    seed_of,
)
from seqc.spec.errors import UsageError

Source = list[int] | Mapping[str, Any]
"""A source: token ids, or the audio arrays (`audio`, `audio_mask`) of one utterance."""


FIRST_HISTORY = 32
"""History slots a decode starts with (more for a longer prompt); `StepDecoder.grown` doubles
them as decoding goes on."""


def first_history(prompt: int, length: int) -> int:
    """The history caches' first length for a prompt of `prompt` tokens (BOS included), at most
    the decode's whole buffer `length`."""
    return min(length, max(FIRST_HISTORY, buffer_length(prompt + 1)))


class StepDecoder:
    """Greedy, sampling and beam search over `StepFunctions`, as `Decoder` does over logits."""

    fusion: PrefixBonus | None = None
    """Shallow fusion in beam search (`beam_step`'s bonus); None: none."""

    def __init__(
        self, fns: StepFunctions, sig: StepSignature, bos: int, eos: int, pad: int
    ) -> None:
        if sig.score_input is not None:
            raise UsageError(
                "this artifact scores given tokens (exported with normalize = false); it has "
                "no logits over the vocabulary to decode from",
                code="scoring-artifact",
                hint="decode with an artifact exported with normalize = true",
            )
        if sig.token_input is None:
            raise UsageError(
                "this artifact runs in one pass (a CTC model's frame logits); it has no decoder "
                "step to generate tokens with",
                code="no-step",
                hint="transcribe audio with it: seqc decode --artifact DIR --input utt.wav",
            )
        self.fns, self.sig = fns, sig
        self.token_input: str = sig.token_input
        self.bos, self.eos, self.pad = bos, eos, pad

    # ---------------------------------------------------------------- state
    def _memory(self, src: Source | None, rows: int) -> dict[str, np.ndarray]:
        """The encoder's outputs for one source (token ids, or a speech model's audio arrays
        of one utterance), repeated for `rows` hypotheses."""
        if not self.sig.encoder_inputs:
            return {}
        if src is None:
            raise ValueError("an encoder-decoder needs a source to decode")
        if not isinstance(src, Mapping):
            return self.encoded([src], rows)
        arrays = {k: np.asarray(v)[:1] for k, v in src.items()}
        feeds = {name: arrays[field] for name, field in self.sig.encoder_inputs.items()}
        return self.repeated(self.fns.encode(feeds), rows)

    def encoded(self, sources: Sequence[list[int]], rows: int) -> dict[str, Any]:
        """The encoder's outputs for token-id sources, padded to the longest, each repeated
        `rows` times along the batch axis (source i's rows are i*rows .. i*rows + rows - 1)."""
        longest = max(len(s) for s in sources)
        ids = np.full((len(sources), longest), self.pad, np.int32)
        for i, src in enumerate(sources):
            ids[i, : len(src)] = src
        arrays = {"src": ids, "src_mask": ids != self.pad}
        feeds = {name: arrays[field] for name, field in self.sig.encoder_inputs.items()}
        return self.repeated(self.fns.encode(feeds), rows)

    def repeated(self, memory: dict[str, np.ndarray], rows: int) -> dict[str, Any]:
        """The encoder's outputs with each source's row repeated `rows` times along its batch
        axis (source i's rows are i*rows .. i*rows + rows - 1), held by the runtime when it
        keeps arrays of its own (`StepFunctions`): the step reads them at every position."""
        out = {
            name: np.repeat(v, rows, axis=self.sig.batch_axis(self.sig.encoder_outputs[name]))
            for name, v in memory.items()
        }
        hold = getattr(self.fns, "hold", None)
        return hold(out) if hold is not None else out

    def step(
        self, tokens: np.ndarray, pos: int, memory: dict[str, Any], caches: dict[str, Any]
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Log-probabilities [rows, V] (float64, as the reference) after `tokens` (one a row) at
        `pos`, and the caches with that position written."""
        feeds = {self.token_input: tokens.reshape(-1, 1).astype(np.int32)}
        feeds |= {POS: np.asarray(pos, np.int32), **memory, **caches}
        logits, caches = self.fns.step({k: feeds[k] for k in self.sig.step_inputs})
        return log_softmax64(np.asarray(logits)[:, 0, :]), caches

    def _prefill(
        self, start: list[int], rows: int, length: int, memory: dict
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        caches = self.sig.zero_caches(rows, first_history(len(start), length))
        logp = np.empty(0)
        for pos, tok in enumerate(start):
            logp, caches = self.step(np.full(rows, tok), pos, memory, caches)
        return logp, caches

    def grown(self, caches: dict[str, Any], pos: int, length: int) -> dict[str, Any]:
        """The caches with room for position `pos`: history caches start short
        (`first_history`) and double, up to `length`, when decoding reaches their end. Why: a
        step reads and rewrites every history slot, so a buffer sized for `max_length` (136
        slots for 128 tokens) made each step of a 35-token verse cost four times what it
        needs; the slots added are zeros past `pos`, which the step masks as it masks the
        rest of an unwritten buffer."""
        now = self.sig.history_length(caches)
        if now is None or pos < now:
            return caches
        new = min(length, max(2 * now, buffer_length(pos + 1)))
        return self.sig.pad_history(caches, new)

    def reordered(self, caches: dict[str, Any], parents: np.ndarray) -> dict[str, Any]:
        """The caches with row i taken from row `parents[i]` along each cache's batch axis: the
        surviving beams' histories after a beam-search step (on the runtime's device when its
        step functions `reorder` there)."""
        reorder = getattr(self.fns, "reorder", None)
        if reorder is not None:
            axes = {
                name: self.sig.batch_axis(shape) for name, (shape, _) in self.sig.caches.items()
            }
            return reorder(caches, parents, axes)
        return {
            name: np.take(v, parents, axis=self.sig.batch_axis(self.sig.caches[name][0]))
            for name, v in caches.items()
        }

    @property
    def shrinks(self) -> bool:
        """Whether a batch drops the rows of its finished sources (`StepFunctions.shrinks`):
        on a runtime that runs any number of rows without compiling again (onnxruntime,
        LiteRT), a source whose search is over costs nothing more; on JAX and TF, whose
        programs are compiled per shape, its rows stay, padded, until the batch is done."""
        return bool(getattr(self.fns, "shrinks", False))

    def kept_memory(self, memory: dict[str, Any], rows: np.ndarray) -> dict[str, Any]:
        """The encoder's outputs of the rows `rows` only, along each one's batch axis (where
        the runtime holds them, when it `reorder`s there)."""
        axes = {name: self.sig.batch_axis(self.sig.encoder_outputs[name]) for name in memory}
        reorder = getattr(self.fns, "reorder", None)
        if reorder is not None:
            return dict(reorder(memory, rows, axes))
        return {name: np.take(v, rows, axis=axes[name]) for name, v in memory.items()}

    # ---------------------------------------------------------------- strategies
    def generate(
        self,
        strategy: DecodeConfig,
        prompt: list[int],
        src: Source | None = None,
        seed: int = 0,
        stop_at_eos: bool = True,
        decided: Callable[[list[int]], None] | None = None,
    ) -> list[int]:
        """The tokens after `prompt` (and for an encoder-decoder, from `src`). `decided`, if
        given, hears the tokens as they become certain, in order, each once: greedy and
        sampling decide one a step; beam search decides a token once every live and finished
        hypothesis agrees on it (their common prefix), and the rest of the best at the end.
        Why: a server streams them to its client as they are decided (`seqc serve`)."""
        max_len = strategy.max_length
        if isinstance(strategy, Beam):
            return self._beam(strategy, prompt, src, max_len, decided)
        rng = np.random.default_rng(seed or seed_of(strategy))
        start = [self.bos, *prompt]
        length = buffer_length(len(start) + max_len)
        memory = self._memory(src, 1)
        logp, caches = self._prefill(start, 1, length, memory)
        out: list[int] = []
        for i in range(max_len):
            row = logp[0]
            tok = (
                sample_token(row, strategy, rng)
                if isinstance(strategy, Sample)
                else int(np.argmax(row))
            )
            if tok == self.eos and stop_at_eos:
                break
            out.append(tok)
            if decided is not None:
                decided([tok])
            if i + 1 < max_len:
                pos = len(start) + i
                caches = self.grown(caches, pos, length)
                logp, caches = self.step(np.asarray([tok]), pos, memory, caches)
        return out

    def generate_many(
        self, strategy: DecodeConfig, sources: list[list[int]], batch: int = 0
    ) -> list[list[int]]:
        """Each source's tokens, as `generate` gives them, several sources a step
        (`decode_all`); `batch` 0 takes the runtime's own choice (its step functions'
        `batch_sources`, else one at a time), 1 decodes one at a time."""
        return decode_all(self, strategy, sources, batch or getattr(self.fns, "batch_sources", 1))

    def nbest(
        self, strategy: Beam, prompt: list[int], src: Source | None, n: int
    ) -> list[Hypothesis]:
        """The `n` best hypotheses of beam search (n <= its width), best first, each with its
        log-probability: the first one's tokens are `generate`'s. Why: a server's `nbest`, and
        rescoring with a language model."""
        if n > strategy.width:
            raise ValueError(f"{n} best of a beam of {strategy.width}")
        finished, beams = self._search(strategy, prompt, src, strategy.max_length)
        return ranked(finished, beams, strategy.length_penalty, n)

    def _beam(
        self,
        strategy: Beam,
        prompt: list[int],
        src: Source | None,
        max_len: int,
        decided: Callable[[list[int]], None] | None = None,
    ) -> list[int]:
        told = [0]

        def heard(beams: list[Hypothesis], finished: list[Hypothesis]) -> None:
            agreed = common_prefix([h.tokens for h in (*beams, *finished)])
            if decided is not None and len(agreed) > told[0]:
                decided(agreed[told[0] :])
                told[0] = len(agreed)

        finished, beams = self._search(strategy, prompt, src, max_len, heard)
        out = best(finished, beams, strategy.length_penalty)
        if decided is not None and len(out) > told[0]:
            decided(out[told[0] :])
        return out

    def _search(
        self,
        strategy: Beam,
        prompt: list[int],
        src: Source | None,
        max_len: int,
        each_step: Callable[[list[Hypothesis], list[Hypothesis]], None] | None = None,
    ) -> tuple[list[Hypothesis], list[Hypothesis]]:
        """Beam search of one source: its finished hypotheses and the open ones at the end."""
        width, alpha = strategy.width, strategy.length_penalty
        start = [self.bos, *prompt]
        length = buffer_length(len(start) + max_len)
        memory = self._memory(src, width)
        logp, caches = self._prefill(start, width, length, memory)
        beams = [Hypothesis([], 0.0)]
        finished: list[Hypothesis] = []
        for step in range(max_len):
            chosen = beam_step(beams, logp, finished, width, alpha, self.eos, self.fusion)
            beams = chosen.beams
            if each_step is not None:
                each_step(beams, finished)
            if chosen.done or step + 1 == max_len:
                break
            pad = width - len(chosen.parents)
            caches = self.reordered(caches, np.asarray(chosen.parents + [0] * pad))
            feed = np.asarray(chosen.tokens + [self.pad] * pad)
            caches = self.grown(caches, len(start) + step, length)
            logp, caches = self.step(feed, len(start) + step, memory, caches)
        return finished, beams


def common_prefix(sequences: list[list[int]]) -> list[int]:
    """The tokens every sequence starts with (none for no sequences)."""
    if not sequences:
        return []
    first = sequences[0]
    n = min(len(q) for q in sequences)
    for i in range(n):
        if any(q[i] != first[i] for q in sequences):
            return first[:i]
    return first[:n]


DEFAULT_BATCH = 16
"""Sources decoded together by a runtime that gains from it (`batch_sources` of its step
functions): the JAX and TF backends, whose every step pays a fixed dispatch cost. Measured on
the recipe translator (beam 6, 32-64 dev or test verses, 2 idle cores): JAX 3.6 -> 5.7 verses/s,
TF 3.9 -> 5.3. onnxruntime and LiteRT run a step of 6 rows with little overhead and lose by it
(ONNX 13.0 -> 8.5, TFLite 18.5 -> 8.3: every row of a source whose search is over is still
computed, before their rows left the batch: `StepDecoder.shrinks`), so `seqc decode` of an
artifact decodes one source at a time; `seqc serve` batches its requests' sources."""


def batchable(strategy: DecodeConfig) -> bool:
    """Greedy and beam search decode in batches; sampling draws from one generator per source,
    in order, so it stays one source at a time (and reproducible by its seed)."""
    return isinstance(strategy, Greedy | Beam)


def decode_all(
    dec: StepDecoder,
    strategy: DecodeConfig,
    sources: Sequence[list[int]],
    batch: int = DEFAULT_BATCH,
) -> list[list[int]]:
    """Each source's tokens (no prompt), in the order given: sorted by length into batches of
    `batch`, so that a batch's sources pad little and finish close together."""
    if not batchable(strategy) or batch <= 1 or not dec.sig.encoder_inputs:
        return [dec.generate(strategy, [], src) for src in sources]
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out: list[list[int]] = [[] for _ in sources]
    for at in range(0, len(order), batch):
        chunk = order[at : at + batch]
        results = decode_batch(dec, strategy, [sources[i] for i in chunk])
        for i, tokens in zip(chunk, results, strict=True):
            out[i] = tokens
    return out


def decode_batch(
    dec: StepDecoder, strategy: DecodeConfig, sources: Sequence[list[int]]
) -> list[list[int]]:
    """The tokens of each of `sources` (token ids of an encoder-decoder), decoded together."""
    width = strategy.width if isinstance(strategy, Beam) else 1
    max_len = strategy.max_length
    length = buffer_length(1 + max_len)
    memory = dec.encoded(sources, width)
    rows = len(sources) * width
    caches = dec.sig.zero_caches(rows, first_history(1, length))
    logp, caches = dec.step(np.full(rows, dec.bos), 0, memory, caches)
    if isinstance(strategy, Beam):
        alpha = strategy.length_penalty
        return _beam_batch(dec, logp, caches, memory, len(sources), width, alpha, max_len, length)
    return _greedy_batch(dec, logp, caches, memory, len(sources), max_len, length)


def _greedy_batch(
    dec: StepDecoder,
    logp: np.ndarray,
    caches: dict[str, np.ndarray],
    memory: dict[str, np.ndarray],
    n: int,
    max_len: int,
    length: int,
) -> list[list[int]]:
    out: list[list[int]] = [[] for _ in range(n)]
    sources = np.arange(n)  # the source of each row
    open_ = np.ones(n, bool)
    for i in range(max_len):
        tokens = np.argmax(logp, axis=-1)
        open_ &= tokens != dec.eos
        for row in np.flatnonzero(open_):
            out[sources[row]].append(int(tokens[row]))
        if not open_.any() or i + 1 == max_len:
            break
        if dec.shrinks and not open_.all():  # the finished sources leave the batch
            keep = np.flatnonzero(open_)
            caches, memory = dec.reordered(caches, keep), dec.kept_memory(memory, keep)
            sources, tokens, open_ = sources[keep], tokens[keep], open_[keep]
        feed = np.where(open_, tokens, dec.pad)
        caches = dec.grown(caches, 1 + i, length)
        logp, caches = dec.step(feed, 1 + i, memory, caches)
    return out


def _beam_batch(
    dec: StepDecoder,
    logp: np.ndarray,
    caches: dict[str, np.ndarray],
    memory: dict[str, np.ndarray],
    n: int,
    width: int,
    alpha: float,
    max_len: int,
    length: int,
) -> list[list[int]]:
    beams: list[list[Hypothesis]] = [[Hypothesis([], 0.0)] for _ in range(n)]
    finished: list[list[Hypothesis]] = [[] for _ in range(n)]
    done = [False] * n
    live = list(range(n))  # the source of each block of `width` rows
    for step in range(max_len):
        parents = np.arange(len(live) * width)  # a finished source's rows stay where they are
        feed = np.full(len(live) * width, dec.pad)
        for b, s in enumerate(live):
            if done[s]:
                continue
            base = b * width
            chosen = beam_step(
                beams[s], logp[base : base + width], finished[s], width, alpha, dec.eos, dec.fusion
            )
            beams[s] = chosen.beams
            done[s] = chosen.done
            k = len(chosen.parents)
            parents[base : base + k] = base + np.asarray(chosen.parents, int)
            parents[base + k : base + width] = base
            feed[base : base + k] = chosen.tokens
        if all(done) or step + 1 == max_len:
            break
        if dec.shrinks and any(done[s] for s in live):  # the finished sources leave the batch
            blocks = [b for b, s in enumerate(live) if not done[s]]
            rows = np.concatenate([np.arange(b * width, (b + 1) * width) for b in blocks])
            parents, feed = parents[rows], feed[rows]
            memory = dec.kept_memory(memory, rows)
            live = [live[b] for b in blocks]
        caches = dec.grown(dec.reordered(caches, parents), 1 + step, length)
        logp, caches = dec.step(feed, 1 + step, memory, caches)
    return [best(finished[s], beams[s], alpha) for s in range(n)]
