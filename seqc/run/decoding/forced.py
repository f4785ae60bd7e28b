"""A batch of known tokens through a program's step functions, with no search: teacher-forced,
one position at a time, or in one pass for an encoder-only program (a CTC model).

Why apart from the decoders: this is how `seqc export` checks an artifact against the trained
model (the same logits, position by position), calibrates its int8 ranges and times it, and how
a CTC artifact gives the frame logits that `seqc.run.scoring.transcribe` decodes on the host;
nothing here chooses a token.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

from seqc.backends.api import StepFunctions
from seqc.compiler.incremental import POS
from seqc.compiler.step_signature import StepSignature


def encoder_feeds(sig: StepSignature, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The encoder's inputs from a batch's arrays (none for a language model)."""
    return {n: arrays[f] for n, f in sig.encoder_inputs.items()}


def sequence_feeds(sig: StepSignature, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A whole-sentence scorer's inputs from a batch's arrays (the tokens, and `next` from the
    labels; `StepSignature.sequence_inputs`)."""
    return {n: arrays[f] for n, f in sig.sequence_inputs.items()}


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
