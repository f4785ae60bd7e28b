"""Decoding over an encoder and a decoder-step function with explicit caches.

This is how exported artifacts decode (onnxruntime, LiteRT) and how any backend can decode in
O(T) rather than O(T^2): the step function computes one position and returns its caches, and
the loop here feeds them back. The strategies are the reference decoder's
(`seqc.run.decode.Decoder`), step for step: the same prompt handling, stop rules, sampling and
beam bookkeeping (top `width + 1` per beam, finished hypotheses, GNMT length penalty), so on the
same weights the tokens are the same. Beam search keeps `width` rows and reorders every cache
along its batch axis by the surviving beams' parents.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from seqc.backends.inputs import buffer_length
from seqc.compiler.incremental import HISTORY, POS
from seqc.compiler.values import CallValue
from seqc.run.decode import Hypothesis, _sample, beam_step, best, log_softmax64


@dataclass
class StepSignature:
    """What a decoder needs to know about the step function's tensors (from a `StepProgram`
    or an artifact's manifest)."""

    token_input: str
    """The step graph's token input ([B, 1] int32): `ids` or `tgt`."""
    caches: dict[str, tuple[list[Any], str]]
    """Cache name -> (shape with the batch and history symbols, dtype)."""
    batch_symbol: str
    encoder_inputs: dict[str, str]
    """Encoder input name -> batch field (`src`, `src_mask`); empty for a language model."""
    encoder_outputs: dict[str, list[Any]]
    """Encoder output name (`enc0`, ...) -> its shape, to find its batch axis."""
    step_inputs: list[str]
    """Every input of the step function (a recurrent decoder has no `pos`)."""

    @classmethod
    def of(cls, program: Any, fields: dict[str, str]) -> StepSignature:
        """From a `StepProgram` and the model's forward input -> batch field table."""
        enc = program.encoder
        return cls(
            token_input=program.stepping[0],
            caches={c.name: (list(c.type.shape), c.type.dtype) for c in program.caches},
            batch_symbol=program.batch_symbol,
            encoder_inputs={n: fields[n] for n in (enc.inputs if enc is not None else {})},
            encoder_outputs={
                name: list(enc.ops[vid].type.shape)
                for name, vid in zip(
                    program.encoder_outputs, enc.outputs if enc is not None else [], strict=True
                )
            },
            step_inputs=list(program.step.inputs),
        )

    def batch_axis(self, shape: list[Any]) -> int:
        return shape.index(self.batch_symbol)


def zero_caches(sig: StepSignature, rows: int, length: int) -> dict[str, np.ndarray]:
    """The caches before the first token: zeros, `rows` sequences, `length` history slots."""
    out = {}
    for name, (shape, dtype) in sig.caches.items():
        dims = [rows if d == sig.batch_symbol else length if d == HISTORY else d for d in shape]
        out[name] = np.zeros(dims, np.dtype(dtype))
    return out


def teacher_forced(fns: Any, sig: StepSignature, arrays: dict[str, np.ndarray]) -> np.ndarray:
    """Logits [B, T, V] of a batch fed one position at a time through the step function, the
    known tokens as inputs: what the full forward pass computes, position by position."""
    field = "tgt_in" if sig.encoder_inputs else "inputs"
    tokens = np.asarray(arrays[field], np.int32)
    memory = fns.encode({n: arrays[f] for n, f in sig.encoder_inputs.items()})
    rows, length = tokens.shape
    caches = zero_caches(sig, rows, length)
    out = []
    for pos in range(length):
        feeds = {sig.token_input: tokens[:, pos : pos + 1], POS: np.asarray(pos, np.int32)}
        feeds |= {**memory, **caches}
        logits, caches = fns.step({k: feeds[k] for k in sig.step_inputs})
        out.append(np.asarray(logits)[:, 0])
    return np.stack(out, axis=1)


class StepFunctions(Protocol):
    """A runtime's encoder and step: numpy in, numpy out."""

    def encode(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...

    def step(self, feeds: dict[str, np.ndarray]) -> tuple[np.ndarray, dict[str, np.ndarray]]: ...


class StepDecoder:
    """Greedy, sampling and beam search over `StepFunctions`, as `Decoder` does over logits."""

    def __init__(
        self, fns: StepFunctions, sig: StepSignature, bos: int, eos: int, pad: int
    ) -> None:
        self.fns, self.sig = fns, sig
        self.bos, self.eos, self.pad = bos, eos, pad

    # ---------------------------------------------------------------- state
    def _zeros(self, rows: int, length: int) -> dict[str, np.ndarray]:
        out = {}
        for name, (shape, dtype) in self.sig.caches.items():
            dims = [
                rows if d == self.sig.batch_symbol else length if d == HISTORY else d for d in shape
            ]
            out[name] = np.zeros(dims, np.dtype(dtype))
        return out

    def _memory(self, src: list[int] | None, rows: int) -> dict[str, np.ndarray]:
        if not self.sig.encoder_inputs:
            return {}
        if src is None:
            raise ValueError("an encoder-decoder needs a source to decode")
        ids = np.asarray([src], np.int32)
        arrays = {"src": ids, "src_mask": ids != self.pad}
        feeds = {name: arrays[field] for name, field in self.sig.encoder_inputs.items()}
        memory = self.fns.encode(feeds)
        return {
            name: np.repeat(v, rows, axis=self.sig.batch_axis(self.sig.encoder_outputs[name]))
            for name, v in memory.items()
        }

    def _step(
        self, tokens: np.ndarray, pos: int, memory: dict, caches: dict
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Log-probabilities [rows, V] (float64, as the reference) after `tokens` at `pos`."""
        feeds = {self.sig.token_input: tokens.reshape(-1, 1).astype(np.int32)}
        feeds |= {POS: np.asarray(pos, np.int32), **memory, **caches}
        logits, caches = self.fns.step({k: feeds[k] for k in self.sig.step_inputs})
        return log_softmax64(np.asarray(logits)[:, 0, :]), caches

    def _prefill(
        self, start: list[int], rows: int, length: int, memory: dict
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        caches = self._zeros(rows, length)
        logp = np.empty(0)
        for pos, tok in enumerate(start):
            logp, caches = self._step(np.full(rows, tok), pos, memory, caches)
        return logp, caches

    def _reorder(self, caches: dict, parents: np.ndarray) -> dict[str, np.ndarray]:
        return {
            name: np.take(v, parents, axis=self.sig.batch_axis(self.sig.caches[name][0]))
            for name, v in caches.items()
        }

    # ---------------------------------------------------------------- strategies
    def generate(
        self,
        strategy: CallValue,
        prompt: list[int],
        src: list[int] | None = None,
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
                logp, caches = self._step(np.asarray([tok]), len(start) + i, memory, caches)
        return out

    def _beam(
        self, strategy: CallValue, prompt: list[int], src: list[int] | None, max_len: int
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
            logp, caches = self._step(feed, len(start) + step, memory, caches)
        return best(finished, beams, alpha)
