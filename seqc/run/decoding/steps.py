"""Decoding over an encoder and a decoder-step function with explicit caches.

This is how exported artifacts decode (onnxruntime, LiteRT) and how any backend can decode in
O(T) rather than O(T^2): the step function computes one position and returns its caches, and
the loop here feeds them back. The strategies are the reference decoder's
(`seqc.run.decode.Decoder`), step for step: the same prompt handling, stop rules, sampling and
beam bookkeeping (top `width + 1` per beam, finished hypotheses, GNMT length penalty), so on the
same weights the tokens are the same. Beam search keeps `width` rows and reorders every cache
along its batch axis by the surviving beams' parents.

A program without a step (a CTC model, `StepSignature.encoder_only`) runs in one pass:
`one_pass` gives its frame logits, which `seqc.run.transcribe` decodes on the host.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from seqc.backends.api import StepFunctions
from seqc.compiler.incremental import POS
from seqc.compiler.signature import buffer_length
from seqc.compiler.step_signature import StepSignature
from seqc.resolve.values import CallValue
from seqc.run.decode import Hypothesis, _sample, beam_step, best, log_softmax64
from seqc.spec.errors import UsageError

Source = list[int] | Mapping[str, Any]
"""A source: token ids, or the audio arrays (`audio`, `audio_mask`) of one utterance."""


def encoder_feeds(sig: StepSignature, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The encoder's inputs from a batch's arrays (none for a language model)."""
    return {n: arrays[f] for n, f in sig.encoder_inputs.items()}


def one_pass(
    fns: StepFunctions, sig: StepSignature, arrays: Mapping[str, np.ndarray]
) -> np.ndarray:
    """The output of an encoder-only program for a batch (a CTC model: frame logits
    [B, F, V], padding frames blank with certainty)."""
    return np.asarray(fns.encode(encoder_feeds(sig, arrays))[sig.output])


def step_through(
    fns: StepFunctions, sig: StepSignature, arrays: Mapping[str, np.ndarray]
) -> Iterator[tuple[dict[str, np.ndarray], np.ndarray]]:
    """A batch fed one position at a time through the step function, the known tokens as
    inputs (teacher forcing): each step's feeds and its logits [B, 1, V] (a scoring program:
    the score [B, 1] of the batch's next token, its label, fed as `sig.score_input`)."""
    if sig.token_input is None:
        raise ValueError("an encoder-only program has no step to go through; use one_pass")
    field = "tgt_in" if sig.encoder_inputs else "inputs"
    tokens = np.asarray(arrays[field], np.int32)
    memory = fns.encode(encoder_feeds(sig, arrays))
    rows, length = tokens.shape
    caches = sig.zero_caches(rows, length)
    scored = None if sig.score_field is None else np.asarray(arrays[sig.score_field], np.int32)
    for pos in range(length):
        feeds = {sig.token_input: tokens[:, pos : pos + 1], POS: np.asarray(pos, np.int32)}
        if scored is not None and sig.score_input is not None:
            feeds[sig.score_input] = scored[:, pos : pos + 1]
        feeds |= {**memory, **caches}
        feeds = {k: feeds[k] for k in sig.step_inputs}
        logits, caches = fns.step(feeds)
        yield feeds, np.asarray(logits)


def teacher_forced(
    fns: StepFunctions, sig: StepSignature, arrays: Mapping[str, np.ndarray]
) -> np.ndarray:
    """Logits [B, T, V] of a batch through the step function: what the full forward pass
    computes, position by position."""
    return np.concatenate([logits for _, logits in step_through(fns, sig, arrays)], axis=1)


FIRST_HISTORY = 32
"""History slots a decode starts with (more for a longer prompt); `StepDecoder.grown` doubles
them as decoding goes on."""


def first_history(prompt: int, length: int) -> int:
    """The history caches' first length for a prompt of `prompt` tokens (BOS included), at most
    the decode's whole buffer `length`."""
    return min(length, max(FIRST_HISTORY, buffer_length(prompt + 1)))


class StepDecoder:
    """Greedy, sampling and beam search over `StepFunctions`, as `Decoder` does over logits."""

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

    def _step(
        self, tokens: np.ndarray, pos: int, memory: dict, caches: dict
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Log-probabilities [rows, V] (float64, as the reference) after `tokens` at `pos`."""
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
            logp, caches = self._step(np.full(rows, tok), pos, memory, caches)
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

    def _reorder(self, caches: dict, parents: np.ndarray) -> dict[str, np.ndarray]:
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

    # ---------------------------------------------------------------- strategies
    def generate(
        self,
        strategy: CallValue,
        prompt: list[int],
        src: Source | None = None,
        seed: int = 0,
        stop_at_eos: bool = True,
    ) -> list[int]:
        max_len = int(strategy.args["max_length"])
        if strategy.kind == "beam":
            return self._beam(strategy, prompt, src, max_len)
        rng = np.random.default_rng(seed or int(strategy.args.get("seed", 0)))
        start = [self.bos, *prompt]
        length = buffer_length(len(start) + max_len)
        memory = self._memory(src, 1)
        logp, caches = self._prefill(start, 1, length, memory)
        out: list[int] = []
        for i in range(max_len):
            row = logp[0]
            tok = (
                int(np.argmax(row))
                if strategy.kind == "greedy"
                else _sample(row, strategy.args, rng)
            )
            if tok == self.eos and stop_at_eos:
                break
            out.append(tok)
            if i + 1 < max_len:
                pos = len(start) + i
                caches = self.grown(caches, pos, length)
                logp, caches = self._step(np.asarray([tok]), pos, memory, caches)
        return out

    def generate_many(
        self, strategy: CallValue, sources: list[list[int]], batch: int = 0
    ) -> list[list[int]]:
        """Each source's tokens, as `generate` gives them, several sources a step
        (`seqc.run.stepbatch`); `batch` 0 takes the runtime's own choice (its step functions'
        `batch_sources`, else one at a time), 1 decodes one at a time."""
        from seqc.run.stepbatch import decode_all

        return decode_all(self, strategy, sources, batch or getattr(self.fns, "batch_sources", 1))

    def _beam(
        self, strategy: CallValue, prompt: list[int], src: Source | None, max_len: int
    ) -> list[int]:
        width, alpha = int(strategy.args["width"]), float(strategy.args["length_penalty"])
        start = [self.bos, *prompt]
        length = buffer_length(len(start) + max_len)
        memory = self._memory(src, width)
        logp, caches = self._prefill(start, width, length, memory)
        beams = [Hypothesis([], 0.0)]
        finished: list[Hypothesis] = []
        for step in range(max_len):
            chosen = beam_step(beams, logp, finished, width, alpha, self.eos)
            beams = chosen.beams
            if chosen.done or step + 1 == max_len:
                break
            pad = width - len(chosen.parents)
            caches = self._reorder(caches, np.asarray(chosen.parents + [0] * pad))
            feed = np.asarray(chosen.tokens + [self.pad] * pad)
            caches = self.grown(caches, len(start) + step, length)
            logp, caches = self._step(feed, len(start) + step, memory, caches)
        return best(finished, beams, alpha)
