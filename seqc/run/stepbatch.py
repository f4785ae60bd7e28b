"""Decoding several sources at once over a `StepDecoder`'s encoder and step functions.

Why: one source at a time, beam 4 runs the step on 4 rows, and in a framework (JAX, TF) much
of a step's time goes to dispatching it, not to arithmetic. Stacking `batch` sources gives the
step `batch * width` rows, so a test set decodes faster with the same search (`DEFAULT_BATCH`
has the figures): each source keeps its own beams, finished hypotheses and stop rule
(`beam_step`, as `StepDecoder._beam`), only the rows are shared. A source whose search is over
keeps its rows (fed padding, never read) until the whole batch is done, so that the step's
shapes, and the programs compiled for them, stay the same; sorting sources by length first
(`decode_all`) keeps the sources of one batch finishing close together.

Encoding sources of different lengths in one batch pads them to the longest; the source mask
makes that padding neutral, so the hypotheses are those of one-at-a-time decoding up to float
rounding (a near-tie between two beams could in principle break the other way).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from seqc.compiler.signature import buffer_length
from seqc.resolve.values import CallValue
from seqc.run.decode import Hypothesis, beam_step, best
from seqc.run.stepdecode import StepDecoder, first_history

DEFAULT_BATCH = 16
"""Sources decoded together by a runtime that gains from it (`batch_sources` of its step
functions): the JAX and TF backends, whose every step pays a fixed dispatch cost. Measured on
the recipe translator (beam 6, 32-64 dev or test verses, 2 idle cores): JAX 3.6 -> 5.7 verses/s,
TF 3.9 -> 5.3. onnxruntime and LiteRT run a step of 6 rows with little overhead and lose by it
(ONNX 13.0 -> 8.5, TFLite 18.5 -> 8.3: every row of a source whose search is over is still
computed), so artifacts decode one source at a time."""


def batchable(strategy: CallValue) -> bool:
    """Greedy and beam search decode in batches; sampling draws from one generator per source,
    in order, so it stays one source at a time (and reproducible by its seed)."""
    return strategy.kind in ("greedy", "beam")


def decode_all(
    dec: StepDecoder,
    strategy: CallValue,
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
    dec: StepDecoder, strategy: CallValue, sources: Sequence[list[int]]
) -> list[list[int]]:
    """The tokens of each of `sources` (token ids of an encoder-decoder), decoded together."""
    width = int(strategy.args["width"]) if strategy.kind == "beam" else 1
    max_len = int(strategy.args["max_length"])
    length = buffer_length(1 + max_len)
    memory = dec.encoded(sources, width)
    rows = len(sources) * width
    caches = dec.sig.zero_caches(rows, first_history(1, length))
    logp, caches = dec._step(np.full(rows, dec.bos), 0, memory, caches)
    if strategy.kind == "beam":
        alpha = float(strategy.args["length_penalty"])
        return _beam(dec, logp, caches, memory, len(sources), width, alpha, max_len, length)
    return _greedy(dec, logp, caches, memory, len(sources), max_len, length)


def _greedy(
    dec: StepDecoder,
    logp: np.ndarray,
    caches: dict[str, np.ndarray],
    memory: dict[str, np.ndarray],
    n: int,
    max_len: int,
    length: int,
) -> list[list[int]]:
    out: list[list[int]] = [[] for _ in range(n)]
    open_ = np.ones(n, bool)
    for i in range(max_len):
        tokens = np.argmax(logp, axis=-1)
        open_ &= tokens != dec.eos
        for row in np.flatnonzero(open_):
            out[row].append(int(tokens[row]))
        if not open_.any() or i + 1 == max_len:
            break
        feed = np.where(open_, tokens, dec.pad)
        caches = dec.grown(caches, 1 + i, length)
        logp, caches = dec._step(feed, 1 + i, memory, caches)
    return out


def _beam(
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
    for step in range(max_len):
        parents = np.arange(n * width)  # a finished source's rows stay where they are
        feed = np.full(n * width, dec.pad)
        for s in range(n):
            if done[s]:
                continue
            base = s * width
            chosen = beam_step(
                beams[s], logp[base : base + width], finished[s], width, alpha, dec.eos
            )
            beams[s] = chosen.beams
            done[s] = chosen.done
            k = len(chosen.parents)
            parents[base : base + k] = base + np.asarray(chosen.parents, int)
            parents[base + k : base + width] = base
            feed[base : base + k] = chosen.tokens
        if all(done) or step + 1 == max_len:
            break
        caches = dec.grown(dec._reorder(caches, parents), 1 + step, length)
        logp, caches = dec._step(feed, 1 + step, memory, caches)
    return [best(finished[s], beams[s], alpha) for s in range(n)]
