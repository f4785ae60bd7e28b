"""CTC decoding on the host: greedy (best path) and prefix beam search, over per-frame scores.

Why on the host and in numpy: decoding is a search over label sequences with a dict of prefixes,
not a fixed-shape tensor program, so it belongs beside the other host-side run code rather than
in a backend; it takes the [frames, vocab] scores any backend (or an exported artifact) returns,
and so it imports no backend and no framework.

The rules of CTC (Graves et al., 2006): a path gives one token per frame; its labelling is the
path with runs of the same token collapsed to one and then blanks removed, so "a a _ a" reads
"a a" and "a a a" reads "a". The probability of a labelling is the sum over every path that
reads it. Greedy takes the single most probable path; prefix beam search keeps the `width` most
probable labelling prefixes, each with the probability of its paths that end in blank and of
those that end in its last token, because only the first kind may be followed by the same token
again to make a repeat.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

NEG_INF = -math.inf

STRATEGIES = ("greedy", "beam")
"""The values `ctc_decode_batch` takes for `strategy`."""


def _check_frames(scores: np.ndarray, frames: int, blank: int) -> None:
    """Refuse inputs that would decode silently wrong (a transposed array, a bad length)."""
    if scores.ndim != 2:
        raise ValueError(
            f"CTC decoding expects scores of shape [frames, vocab]; found shape {scores.shape}. "
            "Decode a batch with ctc_decode_batch."
        )
    if not 0 <= frames <= scores.shape[0]:
        raise ValueError(
            f"frames = {frames} is outside 0..{scores.shape[0]} (the scores' frame count)"
        )
    if not 0 <= blank < scores.shape[1]:
        raise ValueError(f"blank = {blank} is not a token id of a vocabulary of {scores.shape[1]}")


def ctc_greedy(logits_or_logp: np.ndarray, frames: int, blank: int = 0) -> list[int]:
    """The labelling of the most probable path: argmax per real frame, repeats collapsed, blanks
    dropped.

    Takes logits or log-probabilities alike, since a softmax does not move a frame's argmax.
    Only the first `frames` frames are read; the rest are padding.
    """
    scores = np.asarray(logits_or_logp)
    _check_frames(scores, frames, blank)
    best = np.argmax(scores[:frames], axis=-1)
    out: list[int] = []
    previous = -1
    for token in best.tolist():
        if token != previous and token != blank:
            out.append(int(token))
        previous = token
    return out


def _candidates(
    frame: np.ndarray, blank: int, top_k: int | None, prune: float | None
) -> np.ndarray:
    """The non-blank tokens one frame may extend a prefix with.

    Pruning is what makes beam search fast on real model outputs, where most of a frame's mass
    sits on a few tokens: `top_k` keeps the k most probable non-blank tokens, `prune` drops
    tokens whose log-probability is below it. The frame's most probable non-blank token is
    always kept, so a threshold never leaves a frame with nothing to extend by.
    """
    tokens = np.arange(frame.shape[0])
    tokens = tokens[tokens != blank]
    if tokens.size == 0:
        return tokens
    scores = frame[tokens]
    if top_k is not None and top_k < tokens.size:
        keep = np.argpartition(-scores, top_k - 1)[:top_k]
        tokens, scores = tokens[keep], scores[keep]
    if prune is not None:
        keep = scores >= prune
        keep[np.argmax(scores)] = True
        tokens = tokens[keep]
    return np.sort(tokens)


class PrefixBonus(Protocol):
    """What shallow fusion adds to a prefix's score (`seqc.run.decoding.fusion`): a function of
    the labelling alone, so prefixes that merge have the same bonus."""

    def extension(self, prefix: tuple[int, ...], tokens: np.ndarray) -> np.ndarray:
        """The bonus `prefix` + token gains over `prefix`, for each of `tokens`."""
        ...

    def final(self, prefix: tuple[int, ...]) -> float:
        """The bonus a labelling gains by ending (its last word, the sentence's end)."""
        ...


def ctc_prefix_beam_nbest(
    logp: np.ndarray,
    frames: int,
    width: int,
    blank: int = 0,
    prune: float | None = None,
    top_k: int | None = None,
    bonus: PrefixBonus | None = None,
) -> list[tuple[list[int], float]]:
    """CTC prefix beam search: up to `width` labellings with their log-probabilities, best first.

    With `bonus` (shallow fusion), prefixes are ranked, kept and returned by their
    log-probability plus their bonus (a weighted LM score), and each labelling's returned score
    is that sum, its final bonus included; `ctc_fused_nbest` also returns the acoustic part.

    `logp` is [frames, vocab] log-probabilities (log-softmax of the logits); only the first
    `frames` frames are read. A labelling's score is the log of the summed probability of its
    paths that survived the beam; with a beam wide enough to hold every prefix it is exact.

    `top_k` and `prune` (a log-probability floor, e.g. `math.log(1e-4)`) limit the tokens a
    frame may extend a prefix with; see `_candidates`. The blank is always considered.

    Each frame is scored as arrays (every beam by every candidate token at once) and only the
    `width` survivors become Python tuples, so the cost per frame is a few numpy calls rather than
    beams x vocab interpreted steps.
    """
    logp = np.asarray(logp, dtype=np.float64)
    _check_frames(logp, frames, blank)
    if width < 1:
        raise ValueError(f"beam width must be at least 1; found {width}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be at least 1 or None; found {top_k}")

    # The beam: prefixes, and per prefix log P(paths ending in blank), log P(ending in its last
    # token). The empty prefix starts with probability one, as if after a blank.
    prefixes: list[tuple[int, ...]] = [()]
    p_blank = np.array([0.0])
    p_token = np.array([NEG_INF])
    extra = np.array([0.0])  # each prefix's fusion bonus (zero without fusion)

    for t in range(frames):
        frame = logp[t]
        tokens = _candidates(frame, blank, top_k, prune)
        total = np.logaddexp(p_blank, p_token)
        last = np.array([p[-1] if p else -1 for p in prefixes])

        # The beam's own prefixes, kept: by a blank, or by repeating the last token (which the
        # collapse swallows).
        stay_blank = total + frame[blank]
        stay_token = np.full_like(p_token, NEG_INF)
        nonempty = last >= 0
        stay_token[nonempty] = p_token[nonempty] + frame[last[nonempty]]

        # Extensions [beams, tokens]: a new token follows any path; the prefix's own last token
        # only follows a path that ended in blank, else it would collapse into the repeat above.
        ext = frame[tokens][None, :] + total[:, None]
        same = last[:, None] == tokens[None, :]
        ext = np.where(same, frame[tokens][None, :] + p_blank[:, None], ext)

        # An extension that spells a prefix already in the beam ("a" + "b" when "ab" is there)
        # adds to that prefix rather than competing with it.
        index = {p: i for i, p in enumerate(prefixes)}
        column = {int(c): j for j, c in enumerate(tokens.tolist())}
        for i, p in enumerate(prefixes):
            if not p:
                continue
            parent = index.get(p[:-1])
            j = column.get(p[-1])
            if parent is not None and j is not None:
                stay_token[i] = np.logaddexp(stay_token[i], ext[parent, j])
                ext[parent, j] = NEG_INF

        # Every candidate is now a distinct prefix: the beam's own, then each extension.
        beams = len(prefixes)
        ext_extra = np.broadcast_to(extra[:, None], ext.shape)
        if bonus is not None:
            ext_extra = ext_extra + np.stack([bonus.extension(p, tokens) for p in prefixes])
        scores = np.concatenate([np.logaddexp(stay_blank, stay_token), ext.ravel()])
        ranked = scores + np.concatenate([extra, ext_extra.ravel()])
        order = np.argsort(-ranked, kind="stable")[:width]
        order = order[np.isfinite(ranked[order])]

        new_prefixes: list[tuple[int, ...]] = []
        new_blank = np.empty(order.size)
        new_token = np.empty(order.size)
        new_extra = np.empty(order.size)
        for k, flat in enumerate(order.tolist()):
            if flat < beams:
                new_prefixes.append(prefixes[flat])
                new_blank[k], new_token[k] = stay_blank[flat], stay_token[flat]
                new_extra[k] = extra[flat]
            else:
                i, j = divmod(flat - beams, tokens.size)
                new_prefixes.append((*prefixes[i], int(tokens[j])))
                new_blank[k], new_token[k] = NEG_INF, ext[i, j]
                new_extra[k] = ext_extra[i, j]
        prefixes, p_blank, p_token, extra = new_prefixes, new_blank, new_token, new_extra

    final = np.logaddexp(p_blank, p_token) + extra
    if bonus is not None:
        final = final + np.asarray([bonus.final(p) for p in prefixes])
    order = np.argsort(-final, kind="stable")
    return [(list(prefixes[i]), float(final[i])) for i in order.tolist()]


def ctc_prefix_beam(
    logp: np.ndarray,
    frames: int,
    width: int,
    blank: int = 0,
    prune: float | None = None,
    top_k: int | None = None,
) -> list[int]:
    """The most probable labelling found by CTC prefix beam search (see `ctc_prefix_beam_nbest`)."""
    best = ctc_prefix_beam_nbest(logp, frames, width, blank, prune, top_k)
    return best[0][0] if best else []


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Log-softmax over the last axis in float64, so beam scores summed over hundreds of frames
    keep their precision whatever dtype the model produced."""
    x = np.asarray(logits, dtype=np.float64)
    x = x - np.max(x, axis=-1, keepdims=True)
    return x - np.log(np.sum(np.exp(x), axis=-1, keepdims=True))


def real_frames(logits: np.ndarray) -> np.ndarray:
    """The frames of CTC frame logits [..., F, V] that hold audio: a compiled model forces a
    padding frame to "blank with certainty" (every id but the blank at `FORCED`)."""
    from seqc.compiler.lower.ctc import BLANK, FORCED

    others = np.delete(np.asarray(logits), BLANK, axis=-1)
    return ~np.all(others <= FORCED / 2, axis=-1)


def ctc_decode_batch(
    logits: np.ndarray,
    frame_mask: np.ndarray,
    strategy: str = "greedy",
    width: int = 8,
    blank: int = 0,
    prune: float | None = None,
    top_k: int | None = None,
) -> list[list[int]]:
    """Decode a batch of model outputs: logits [batch, frames, vocab] and which frames are real
    (`frame_mask`, bool [batch, frames]; the frames it marks False are skipped).

    `strategy` is "greedy" (best path; `width` is ignored) or "beam" (prefix beam search of
    `width`, with optional `prune` / `top_k`, see `ctc_prefix_beam_nbest`).
    """
    if strategy not in STRATEGIES:
        raise ValueError(
            f"unknown CTC decode strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}"
        )
    logits = np.asarray(logits)
    mask = np.asarray(frame_mask, dtype=bool)
    if logits.ndim != 3 or mask.shape != logits.shape[:2]:
        raise ValueError(
            "ctc_decode_batch expects logits [batch, frames, vocab] and frame_mask "
            f"[batch, frames]; found {logits.shape} and {mask.shape}"
        )
    logp = log_softmax(logits)
    decoded = []
    for row, real in zip(logp, mask, strict=True):
        scores = row[real]
        if strategy == "greedy":
            decoded.append(ctc_greedy(scores, scores.shape[0], blank))
        else:
            decoded.append(ctc_prefix_beam(scores, scores.shape[0], width, blank, prune, top_k))
    return decoded
