"""Transcribing held-out speech and scoring it: word and character error rates.

The one place an utterance is transcribed for a figure, so `seqc eval`, the training loop's dev
evaluation and `seqc export`'s check of an artifact compute WER the same way:

- a CTC model runs once over a batch of utterances (the pipeline's own buckets, padded) and each
  row's frame logits are decoded on the host (`seqc.run.decoding.ctc`: greedy, or the prefix beam
  search for `beam(width)`). Padding frames are "blank with certainty" in a compiled CTC model,
  so they never add a token;
- an attention decoder (Listen-Attend-Spell) decodes one utterance at a time with the shared
  step-by-step decoder (`seqc.run.decoding.search.Decoder`), its audio arrays given as the source.

`Transcriber` is the same for one wav file at a time (`seqc decode --input utt.wav`, the sample
printed after training), over a trained model or an exported artifact alike; `one_by_one` runs
a batch's utterances through a CTC forward one at a time, unpadded, as a deployed model sees
them (how `seqc export` scores its artifacts).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from seqc.compiler.config import Beam, DecodeConfig, VoiceWarp
from seqc.compiler.lower.ctc import BLANK, FORCED
from seqc.data.audio import SAMPLE_RATE, load_wav, too_short
from seqc.run.decoding.ctc import PrefixBonus, ctc_decode_batch, ctc_prefix_beam_nbest, log_softmax
from seqc.run.decoding.decoders import with_fusion
from seqc.run.decoding.defaults import default_strategy
from seqc.run.decoding.voice_warp import Choice
from seqc.run.scoring.wer import error_rates

if TYPE_CHECKING:
    from seqc.backends.api import Generator, Model
    from seqc.data.pipeline import InputPipeline
    from seqc.data.tokenizers import Tokenizer

Logits = Callable[[Mapping[str, np.ndarray]], Any]
"""A CTC model's forward: the batch's arrays -> frame logits [B, F, V]."""


FUSION_WIDTH = 8
"""The beam of shallow fusion and of n-best lists for a task that decodes greedily."""


def ctc_strategy(strategy: DecodeConfig | None) -> tuple[str, int]:
    """("greedy" | "beam", width) for a task's `decode = ...`."""
    if isinstance(strategy, Beam):
        return "beam", strategy.width
    return "greedy", 1


TRANSCRIPT_MAX_LENGTH = 32
"""Tokens an attention decoder transcribes at most when its task names no `decode` (and when
`seqc export` scores artifacts): shorter than the catalogue's 64, the length these transcripts
have always been decoded to, kept so that their WER does not change."""

GREEDY = default_strategy(max_length=TRANSCRIPT_MAX_LENGTH)
"""How an attention decoder transcribes when its task names no `decode` (and how `seqc export`
scores artifacts): greedy, the decoding a deployed model is most often run with, with the
catalogue's defaults but `TRANSCRIPT_MAX_LENGTH`."""


def audio_arrays(samples: np.ndarray) -> dict[str, np.ndarray]:
    """One utterance's samples (float32 [N]) as the model's audio inputs, a batch of one."""
    x = np.asarray(samples, np.float32).reshape(1, -1)
    return {"audio": x, "audio_mask": np.ones(x.shape, bool)}


def blank_frames(rows: int, frames: int, vocab: int) -> np.ndarray:
    """Frame logits that say "blank, with certainty": what a compiled CTC model puts in padding
    frames (`seqc.compiler.lower.ctc`), so appending them changes no transcript."""
    z = np.full((rows, frames, vocab), FORCED, np.float32)
    z[..., BLANK] = 0.0
    return z


def one_by_one(logits: Logits) -> Logits:
    """`logits` run on each utterance of a batch alone, cut to its own length, and the frame
    logits padded back to one array with blank frames (rows without audio are all blank).

    Why: it is how a deployed model sees audio (one utterance, no padding), and the only form a
    fully int8 model serves well: in a padded batch, padding puts -1e9 into attention scores
    and output logits, and an int8 range that must hold -1e9 rounds every real value away.
    """

    def run(arrays: Mapping[str, np.ndarray]) -> np.ndarray:
        audio, mask = np.asarray(arrays["audio"]), np.asarray(arrays["audio_mask"], bool)
        rows: list[np.ndarray | None] = []
        for r in range(audio.shape[0]):
            n = int(mask[r].sum())
            one = audio_arrays(audio[r, :n]) if n else None
            rows.append(None if one is None else np.asarray(logits(one), np.float32)[0])
        real = [z for z in rows if z is not None]
        frames = max((z.shape[0] for z in real), default=1)
        out = blank_frames(len(rows), frames, real[0].shape[1] if real else 1)
        for r, z in enumerate(rows):
            if z is not None:
                out[r, : z.shape[0]] = z
        return out

    return run


@dataclass
class Transcriber:
    """Speech to text, one utterance at a time, by a CTC model's frame logits (`logits`) or an
    attention decoder (`decoder`), from a trained model or an exported artifact alike: the
    one place `seqc decode --input utt.wav` and the sample after training turn audio into
    words, so a checkpoint and its artifacts transcribe a file the same way."""

    tokenizer: Tokenizer
    strategy: DecodeConfig | None
    logits: Logits | None = None
    decoder: Generator | None = None
    """A `Decoder` or `StepDecoder` for a model with an attention decoder."""
    sample_rate: int = SAMPLE_RATE
    min_samples: int = 1
    """The model's shortest input (`seqc.compiler.min_length`; an artifact's manifest records
    it): a shorter clip is `too_short`'s data error, the same on a checkpoint and on every
    artifact, where each runtime would otherwise fail in its own way or answer nothing."""
    fusion: PrefixBonus | None = None
    """Shallow fusion with a word LM (`seqc.run.decoding.fusion.WordFusion`): a CTC model's
    prefix beam search, or an attention decoder's beam search, ranks by the model's score plus
    its bonus."""

    def __post_init__(self) -> None:
        if self.fusion is None:  # the task's own `decode = beam(lm = ...)`, if it names one
            from seqc.run.lm.language_model import strategy_fusion

            self.fusion = strategy_fusion(self.strategy, self.tokenizer)

    def __call__(self, samples: np.ndarray) -> str:
        if self.fusion is not None and self.logits is not None:
            return self.nbest(samples, 1)[0][0]
        if self.logits is not None:
            kind, width = ctc_strategy(self.strategy)
            z = self._frames(samples)[None]
            (ids,) = ctc_decode_batch(z, np.ones(z.shape[:2], bool), kind, width)
            return str(self.tokenizer.decode(ids))
        arrays = self._arrays(samples)
        assert self.decoder is not None, "a Transcriber has CTC logits or a decoder"
        if self.fusion is not None:  # the decoder's beam search adds the bonus
            self.decoder = with_fusion(self.decoder, self.fusion)
        return str(
            self.tokenizer.decode(self.decoder.generate(self.strategy or GREEDY, [], arrays))
        )

    def _arrays(self, samples: np.ndarray) -> dict[str, np.ndarray]:
        n = int(np.asarray(samples).size)
        if n < self.min_samples:
            raise too_short("the audio", n, self.min_samples, self.sample_rate)
        return audio_arrays(samples)

    def _frames(self, samples: np.ndarray) -> np.ndarray:
        """A CTC model's frame log-posteriors [F, V] of one utterance; with a voice warp in the
        strategy, at the factor its own audio chooses (one utterance is one speaker here), as
        the choice already ran it."""
        from seqc.run.decoding.voice_warp import alone, choose
        from seqc.run.scoring.normalised import warp_of

        assert self.logits is not None, "frame scores are a CTC model's"
        arrays, warp = self._arrays(samples), warp_of(self.strategy)
        if warp is None:
            return log_softmax(np.asarray(self.logits(arrays), np.float32)[0])
        return choose(alone(self.logits), [samples], warp, self.min_samples).posteriors[0]

    def nbest(self, samples: np.ndarray, n: int) -> list[tuple[str, float]]:
        """The `n` best transcripts with their scores (a CTC model's prefix beam search, of the
        task's width or `FUSION_WIDTH`, at least `n`): the log-probability of the paths that
        read each, plus the fusion's bonus when there is one. Labellings that read the same
        text (two segmentations of a word, two unknown tokens) are one transcript, their
        probabilities summed, so fewer than `n` may come back."""
        if self.logits is None:
            return self._decoder_nbest(samples, n)
        z = self._frames(samples)
        kind, width = ctc_strategy(self.strategy)
        width = max(n, width if kind == "beam" else FUSION_WIDTH)
        reset = getattr(self.fusion, "reset", None)
        if reset is not None:
            reset()
        found = ctc_prefix_beam_nbest(z, z.shape[0], width, bonus=self.fusion)
        return by_text(found, self.tokenizer, n)

    def _decoder_nbest(self, samples: np.ndarray, n: int) -> list[tuple[str, float]]:
        """An attention decoder's `n` best (its beam search, at least `n` wide; the scores are
        log-probabilities, before the length penalty, plus the fusion's bonus)."""
        import dataclasses

        nbest = getattr(self.decoder, "nbest", None)
        if nbest is None:
            from seqc.spec.errors import UsageError

            raise UsageError(
                "this decoder gives its best transcript only; n-best lists come from beam "
                "search over step functions (an exported artifact, or a model with a step form)",
                code="no-nbest",
                hint="export the model and decode with --artifact, or use a CTC model",
            )
        strategy = self.strategy
        if not isinstance(strategy, Beam):
            from seqc.spec.errors import UsageError

            raise UsageError(
                "n-best lists come from beam search; this attention decoder decodes greedily",
                code="nbest-needs-beam",
                hint="--set TASK.decode=beam(width = 8)",
            )
        strategy = dataclasses.replace(strategy, width=max(n, strategy.width))
        if self.fusion is not None:
            self.decoder = with_fusion(self.decoder, self.fusion)
        hyps = nbest(strategy, [], self._arrays(samples), n)
        return by_text([(h.tokens, h.logprob) for h in hyps], self.tokenizer, n)

    def wav_nbest(self, path: Path, n: int) -> list[tuple[str, float]]:
        """`nbest` of a wav file (read as `wav` reads it)."""
        return self.nbest(load_wav(path, self.sample_rate, self.min_samples), n)

    def wav(self, path: Path) -> str:
        """The transcript of a wav file; a wav at another rate, stereo, missing or shorter than
        the model's shortest input is the audio reader's `DataError` (it names the file and
        says how to fix it)."""
        return self(load_wav(path, self.sample_rate, self.min_samples))


def transcribe_ctc(
    logits: Logits,
    pipeline: InputPipeline,
    split: str,
    strategy: DecodeConfig | None,
    limit: int = 0,
    choices: dict[str, Choice] | None = None,
) -> tuple[list[str], list[str], list[int]]:
    """Hypotheses, references and the utterances' indices in the split, for the first `limit`
    utterances of `split` (all if 0), in split order. With a voice warp in `strategy`, each
    speaker's factor goes into `choices` when it is given."""
    from seqc.run.lm.language_model import strategy_fusion
    from seqc.run.scoring.normalised import transcribe_normalised, warp_of

    kind, width = ctc_strategy(strategy)
    tok = pipeline.target_tokenizer
    fusion = strategy_fusion(strategy, tok)
    warp = warp_of(strategy)
    if warp is not None and fusion is None:
        *found, chosen = transcribe_normalised(logits, pipeline, split, kind, width, warp, limit)
        if choices is not None:
            choices.update(chosen)
        return found[0], found[1], found[2]
    if fusion is not None:  # the prefix beam search with the LM's bonus, one row at a time
        found = nbest_ctc(logits, pipeline, split, width, 1, limit, fusion, warp, choices)
        return (
            [h[0][0] if h else "" for _, h, _ in found],
            [r for *_, r in found],
            [i for i, *_ in found],
        )
    examples = pipeline.splits[split].examples
    hyps: dict[int, str] = {}
    for batch in pipeline.batches(split):
        z = np.asarray(logits(batch.arrays), np.float32)
        rows = batch.num_examples
        frames = np.ones(z.shape[:2], bool)
        for i, ids in zip(
            batch.indices[:rows],
            ctc_decode_batch(z[:rows], frames[:rows], kind, width),
            strict=True,
        ):
            hyps[i] = tok.decode(ids)
        if limit and len(hyps) >= limit:
            break
    order = sorted(hyps)[: limit or None]
    return [hyps[i] for i in order], [examples[i].target or "" for i in order], order


def by_text(
    found: list[tuple[list[int], float]], tokenizer: Tokenizer, n: int
) -> list[tuple[str, float]]:
    """The `n` best transcripts of a beam's labellings: labellings that read the same text (two
    segmentations of a word, two unknown tokens) are one transcript, their probabilities
    summed."""
    merged: dict[str, float] = {}
    for ids, score in found:
        text = str(tokenizer.decode(ids))
        merged[text] = float(np.logaddexp(merged.get(text, -np.inf), score))
    return sorted(merged.items(), key=lambda item: -item[1])[:n]


def nbest_ctc(
    logits: Logits,
    pipeline: InputPipeline,
    split: str,
    width: int,
    n: int,
    limit: int = 0,
    bonus: PrefixBonus | None = None,
    warp: VoiceWarp | None = None,
    choices: dict[str, Choice] | None = None,
) -> list[tuple[int, list[tuple[str, float]], str]]:
    """Each utterance of `split` (the first `limit`, all if 0), in split order: its index, its
    `n` best transcripts with their CTC scores (prefix beam search of `width`; labellings that
    read the same text merged), and its reference. Batched as `transcribe_ctc` is, so a
    checkpoint compiles one program per bucket, not one per utterance length. With `bonus`
    (shallow fusion), the search ranks by score plus bonus and the scores include it; with
    `warp`, each speaker's audio is normalised first (its choice into `choices`)."""
    tok = pipeline.target_tokenizer
    examples = pipeline.splits[split].examples
    found: dict[int, list[tuple[str, float]]] = {}

    def search(z: np.ndarray) -> list[tuple[str, float]]:
        reset = getattr(bonus, "reset", None)
        if reset is not None:  # no two utterances share prefixes
            reset()
        return by_text(ctc_prefix_beam_nbest(z, z.shape[0], max(width, n), bonus=bonus), tok, n)

    if warp is not None:
        from seqc.run.scoring.normalised import normalised_split

        order, scores, chosen = normalised_split(logits, pipeline, split, warp, limit)
        if choices is not None:
            choices.update(chosen)
        pairs = zip(order, scores, strict=True)
        return [(i, search(z), examples[i].target or "") for i, z in pairs]
    for batch in pipeline.batches(split):
        z = log_softmax(np.asarray(logits(batch.arrays), np.float32))
        for row, i in enumerate(batch.indices[: batch.num_examples]):
            found[i] = search(z[row])
        if limit and len(found) >= limit:
            break
    order = sorted(found)[: limit or None]
    return [(i, found[i], examples[i].target or "") for i in order]


def transcribe_attention(
    decoder: Generator, pipeline: InputPipeline, split: str, strategy: DecodeConfig, limit: int = 0
) -> tuple[list[str], list[str], list[int]]:
    """The same for an attention decoder: each utterance's audio is the decoder's source."""
    from seqc.run.lm.language_model import strategy_fusion

    tok = pipeline.target_tokenizer
    fusion = strategy_fusion(strategy, tok)
    if fusion is not None:  # the decoder's beam search adds the LM's bonus
        decoder = with_fusion(decoder, fusion)
    examples = pipeline.splits[split].examples
    hyps: dict[int, str] = {}
    for batch in pipeline.batches(split):
        for row, i in enumerate(batch.indices[: batch.num_examples]):
            source = {k: batch.arrays[k][row : row + 1] for k in ("audio", "audio_mask")}
            hyps[i] = tok.decode(decoder.generate(strategy, [], source))
            if limit and len(hyps) >= limit:
                break
        if limit and len(hyps) >= limit:
            break
    order = sorted(hyps)
    return [hyps[i] for i in order], [examples[i].target or "" for i in order], order


def score_transcripts(
    hyps: list[str], refs: list[str], indices: list[int] | None = None
) -> dict[str, Any]:
    """WER and CER (percent) with their counts, and three samples to print; and every
    utterance's `hypotheses`, `references` and `indices` in the split, to write beside the
    scores or group them (`seqc.run.scoring.breakdown`)."""
    rates = error_rates(hyps, refs)
    return {
        **rates,
        "examples": len(hyps),
        "samples": list(zip(hyps[:3], refs[:3], strict=True)),
        "hypotheses": hyps,
        "references": refs,
        "indices": list(range(len(hyps))) if indices is None else indices,
    }


def warp_record(choices: Mapping[str, Choice]) -> dict[str, Any]:
    """`{"voice_warp": {speaker: its choice}}` for a scored split's figures; {} without one."""
    return {"voice_warp": {k: c.record() for k, c in choices.items()}} if choices else {}


def score_model(
    model: Model,
    params: Any,
    pipeline: InputPipeline,
    split: str,
    strategy: DecodeConfig | None,
    limit: int = 0,
) -> dict[str, Any]:
    """WER and CER of a backend's model on `split` (CTC or attention decoder); with a voice
    warp, each speaker's factor under `voice_warp`."""
    if model.task.ctc:
        choices: dict[str, Choice] = {}
        hyps, refs, order = transcribe_ctc(
            lambda arrays: model.logits(params, arrays), pipeline, split, strategy, limit, choices
        )
        return score_transcripts(hyps, refs, order) | warp_record(choices)
    from seqc.run.decoding.search import Decoder

    tok = pipeline.target_tokenizer
    decoder = Decoder(model, params, tok.bos_id, tok.eos_id, tok.pad_id)
    strategy = strategy or GREEDY
    hyps, refs, order = transcribe_attention(decoder, pipeline, split, strategy, limit)
    return score_transcripts(hyps, refs, order)
