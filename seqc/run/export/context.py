"""What every artifact of one `seqc export` shares, and the trained model's figures each is
measured against.

The context holds the task's step program (a CTC model's whole graph), the trained weights, a
few dev batches with the trained model's logits of each (the parity reference), its dev figures
(perplexity, or a CTC model's loss, by the task's own criterion as `seqc.run.scoring.evaluate`
heads them; BLEU and WER where asked), and the calibration feeds of int8 formats, drawn once.
A scoring export (`normalize = false`) gets a view of it (`scoring_context`): the scoring graph,
and the reference's raw scores of each next token in place of the logits.

Calibration (static int8 ONNX, full int8 TFLite) of a speech model's encoder runs dev utterances
one at a time, unpadded: the padding of a batch puts -1e9 into attention scores and frame
logits, which would set their int8 ranges.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from seqc.backends import registry
from seqc.backends.api import Backend, Generator, StepFunctions, Weights
from seqc.compiler.incremental import StepProgram, incremental, stepping_inputs, whole_graph
from seqc.compiler.lower.criterion import named
from seqc.compiler.lower.sampled import variant
from seqc.compiler.scoring import SCORE_INPUT, SCORE_OUTPUT, scoring_graph, sequence_graph
from seqc.compiler.step_signature import StepSignature
from seqc.run.decoding.decoders import decoder_for
from seqc.run.decoding.defaults import default_strategy
from seqc.run.decoding.forced import encoder_feeds, sequence_feeds, step_through
from seqc.run.scoring.evaluate import headline, summarize
from seqc.run.scoring.transcribe import (
    GREEDY,
    audio_arrays,
    score_transcripts,
    transcribe_attention,
    transcribe_ctc,
)
from seqc.run.scoring.translate import score_translations
from seqc.run.session import Session
from seqc.spec.errors import CheckError

AUDIO_FIELDS = ("audio", "audio_mask")
CALIBRATION_UTTERANCES = 32
"""Dev utterances a speech model's encoder is calibrated on (one at a time, unpadded)."""
BLEU_DECODE = default_strategy()
"""How artifacts (and the trained model beside them) translate for the BLEU column: greedy,
with the catalogue's defaults."""


@dataclass
class Context:
    """What every artifact of one export shares: the program, weights, dev data, reference."""

    session: Session
    params: dict[str, np.ndarray]
    weights: Weights
    reference: Backend
    """The backend that trained the weights: its model is what every artifact must match."""
    program: StepProgram
    sig: StepSignature
    batches: list[dict[str, np.ndarray]]
    logits: list[np.ndarray]
    """The reference model's logits of each batch."""
    reference_quality: dict[str, float]
    bleu_examples: int
    task_kind: str
    _calibration: dict[str, list[dict[str, np.ndarray]]] = field(default_factory=dict)
    _steps: StepFunctions | None = None
    scoring: bool = False
    """True for the context of scoring exports (`normalize = false`): `program` is the
    scoring graph's and `logits` hold the reference's raw scores of the next tokens [B, T]."""
    scoring_view: Context | None = None
    """The context of this export's scoring artifacts, once one is built (`scoring_context`):
    its `reference_quality` is the trained model's raw-score perplexity."""
    wer_examples: int = 0
    """Dev utterances each speech artifact (and the trained model) transcribes for WER."""

    @property
    def speech(self) -> bool:
        return self.task_kind == "asr"

    def calibration(self, which: str, limit: int = 64) -> list[dict[str, np.ndarray]]:
        """Up to `limit` real feeds of the `encoder`, the `step` or the `sequence` graph,
        spread over the dev batches run teacher-forced through the reference backend's step
        functions (a speech encoder: dev utterances one at a time, unpadded; see the module
        doc; a language model's sentence scorer: the dev batches whole)."""
        if which not in self._calibration:
            if which == "encoder" and self.speech:
                feeds = [
                    encoder_feeds(self.sig, u)
                    for u in utterances(self.session, min(limit, CALIBRATION_UTTERANCES))
                ]
            elif which == "encoder":
                feeds = [encoder_feeds(self.sig, b) for b in self.batches]
            elif which == "sequence":
                feeds = [sequence_feeds(self.sig, b) for b in self.batches]
            else:
                fns = self._step_functions()
                feeds = [f for b in self.batches for f, _ in step_through(fns, self.sig, b)]
            stride = max(len(feeds) // limit, 1)
            self._calibration[which] = feeds[::stride][:limit]
        return self._calibration[which]

    def probe(self, which: str) -> dict[str, np.ndarray]:
        """One small real feed of the `encoder` or the `step` graph: the smallest calibration
        feed, or, for a step graph whose calibration set is not drawn (a float export), the
        first step of the first dev batch. Drawing the set runs every dev batch through the
        reference's step functions, which a float export's one check does not need."""
        if which == "step" and which not in self._calibration:
            feeds, _ = next(step_through(self._step_functions(), self.sig, self.batches[0]))
            return feeds
        return min(self.calibration(which), key=lambda f: sum(np.size(v) for v in f.values()))

    def _step_functions(self) -> StepFunctions:
        """The reference backend's step functions of the program, built once per context (a
        float and an int8 export of one run both read them)."""
        if self._steps is None:
            self._steps = self.reference.step_functions(self.program, self.params)
        return self._steps


def dev_split(session: Session) -> str:
    """The split an export measures on: dev, or train when the spec has no dev split."""
    return "dev" if "dev" in session.pipeline.splits else "train"


def dev_batches(session: Session, n: int, rows: int = 8, length: int = 48) -> list[dict]:
    """Up to `n` batches of the spec's dev split (train if none), cut to `rows` x `length`
    (the decoded length: a source, audio included, is kept whole)."""
    out = []
    for i, batch in enumerate(session.pipeline.batches(dev_split(session))):
        if i >= n:
            break
        arrays = {}
        for k, v in batch.arrays.items():
            v = np.asarray(v)[:rows]
            is_time = k not in ("src", "src_mask", *AUDIO_FIELDS) and v.ndim >= 2
            arrays[k] = v[:, :length] if is_time else v
        out.append(arrays)
    return out


def utterances(session: Session, n: int) -> list[dict[str, np.ndarray]]:
    """Up to `n` dev utterances, each alone and unpadded (`audio`, `audio_mask` [1, N])."""
    out = []
    for batch in session.pipeline.batches(dev_split(session)):
        for r in range(batch.num_examples):
            length = int(np.asarray(batch.arrays["audio_mask"])[r].sum())
            out.append(audio_arrays(np.asarray(batch.arrays["audio"])[r, :length]))
            if len(out) >= n:
                return out
    return out


def dev_quality(ctx: Context, logits: list[np.ndarray]) -> dict[str, float]:
    """The dev figure of these logits of the dev batches that `seqc.run.scoring.evaluate` heads a
    task's evaluation with (perplexity; a CTC model's: its criterion's loss), by the task's own
    evaluation criterion run on the reference backend (of a scoring context's raw scores:
    exp(s) as p)."""
    if ctx.scoring:
        return {"raw_perplexity": _raw_perplexity(ctx, logits)}
    compiled = ctx.session.compiled
    sums = {"loss_sum": 0.0, "nll_sum": 0.0, "tokens": 0.0}
    for z, batch in zip(logits, ctx.batches, strict=True):
        inputs = compiled.criterion_inputs(np.asarray(z, np.float32), batch)
        out = named(ctx.reference.run(compiled.eval_criterion, {}, inputs))
        sums["loss_sum"] += float(out["loss"]) * float(out["tokens"])
        sums["nll_sum"] += float(out["nll_sum"])
        sums["tokens"] += float(out["tokens"])
    name, value = headline(summarize(sums, ctc=compiled.ctc))
    return {name: value}


def prepare(
    session: Session,
    params: dict[str, np.ndarray],
    weights: Weights,
    parity_batches: int = 2,
    bleu_examples: int = 0,
    wer_examples: int = 0,
) -> Context:
    """The context of one export: the task's step program (its whole graph for a CTC model),
    `parity_batches` dev batches with the trained model's logits of each, and the trained
    model's dev figures (BLEU of `bleu_examples` translations, WER of `wer_examples`
    utterances, where asked and the task has them), which every artifact is measured against."""
    graph = session.graph
    reference = registry.backend(weights.backend)
    if session.compiled.ctc:  # frame logits in one pass: nothing is decoded step by step
        program = whole_graph(graph)
    else:
        program = incremental(graph, stepping_inputs(graph))
    sig = StepSignature.of(program, session.compiled.fields)
    batches = dev_batches(session, parity_batches)
    model = reference.model(session.compiled, session.train_config)
    state = model.with_params(params)
    logits = [np.asarray(model.logits(state["params"], b)) for b in batches]
    kind = session.compiled.kind
    ctx = Context(
        session, params, weights, reference, program, sig, batches, logits, {}, bleu_examples, kind
    )
    ctx.wer_examples = wer_examples
    ctx.reference_quality = dev_quality(ctx, logits)
    tok = session.pipeline.target_tokenizer
    if bleu_examples and kind == "seq2seq":
        ctx.reference_quality["bleu"] = dev_bleu(
            ctx, decoder_for(model, state["params"], tok.bos_id, tok.eos_id, tok.pad_id)
        )
    if wer_examples and ctx.speech:
        if program.encoder_only:  # the trained model runs batched: what it was evaluated as
            ctx.reference_quality |= dev_wer(ctx, logits=lambda a: model.logits(state["params"], a))
        else:
            decoder = decoder_for(model, state["params"], tok.bos_id, tok.eos_id, tok.pad_id)
            ctx.reference_quality |= dev_wer(ctx, decoder=decoder)
    return ctx


def dev_wer(ctx: Context, logits: Any = None, decoder: Generator | None = None) -> dict[str, float]:
    """WER and CER (percent) of greedy transcripts of the first `wer_examples` dev utterances,
    by CTC frame logits or an attention decoder."""
    pipeline = ctx.session.pipeline
    split = dev_split(ctx.session)
    if logits is not None:
        hyps, refs, _ = transcribe_ctc(logits, pipeline, split, None, ctx.wer_examples)
    else:
        hyps, refs, _ = transcribe_attention(decoder, pipeline, split, GREEDY, ctx.wer_examples)
    scores = score_transcripts(hyps, refs)
    return {"wer": float(scores["wer"]), "cer": float(scores["cer"])}


def dev_bleu(ctx: Context, decoder: Generator) -> float:
    """BLEU of `BLEU_DECODE` translations of the first `bleu_examples` dev sentences."""
    pipeline = ctx.session.pipeline
    scores = score_translations(
        decoder, pipeline, BLEU_DECODE, dev_split(ctx.session), ctx.bleu_examples
    )
    return scores["bleu"]


SELF_NORMALISED = 'nce, or snis with variant = "B"'


def scoring_context(ctx: Context) -> Context:
    """The context of scoring exports: the scoring graph stepped like the forward, and the
    reference's raw scores of each next token (its logits at the label) to match. Only a
    model trained to be self-normalised may be deployed by its raw scores."""
    if ctx.scoring_view is not None:
        return ctx.scoring_view
    session = ctx.session
    compiled = session.compiled
    loss = compiled.config["loss"]
    if variant(loss) not in ("nce", "normalizing"):
        raise CheckError(
            f"normalize = false deploys the raw scores exp(s) as probabilities, which only a "
            f"self-normalised model gives; this one was trained with `{loss.kind}`",
            span=session.resolved.span(f"{session.task}.loss"),
            code="not-self-normalised",
            expected=SELF_NORMALISED,
            found=loss.kind,
            hint="export with normalize = true (the logits), or train with nce(...) or snis(...)",
        )
    graph = scoring_graph(session.graph)
    program = incremental(graph, [*stepping_inputs(session.graph), SCORE_INPUT], SCORE_OUTPUT)
    labels, _ = compiled.labels
    sig = StepSignature.of(program, compiled.fields, score_field=labels)
    scores = [
        np.take_along_axis(np.asarray(z), np.asarray(b[labels])[..., None], -1)[..., 0]
        for z, b in zip(ctx.logits, ctx.batches, strict=True)
    ]
    view = dataclasses.replace(
        ctx, program=program, sig=sig, logits=scores, reference_quality={}, bleu_examples=0,
        _calibration={}, _steps=None, scoring=True, scoring_view=None,
    )  # fmt: skip
    view.reference_quality = dev_quality(view, scores)
    ctx.scoring_view = view
    return view


def with_sentences(ctx: Context) -> Context:
    """`ctx` with the language model's sentence scorer in its program (`StepProgram.sequence`:
    the log-softmax at the labels; of a scoring context, the scoring graph as it is), for an
    artifact asked to carry it (`seqc export --sentences`)."""
    session = ctx.session
    labels, _ = session.compiled.labels
    sequence = sequence_graph(session.graph, normalize=not ctx.scoring)
    program = dataclasses.replace(ctx.program, sequence=sequence)
    sig = StepSignature.of(
        program, session.compiled.fields, score_field=ctx.sig.score_field, label_field=labels
    )
    return dataclasses.replace(ctx, program=program, sig=sig)


def _raw_perplexity(ctx: Context, scores: list[np.ndarray]) -> float:
    """exp of the mean negative raw score of the real next tokens: the perplexity a
    self-normalised model is deployed with (`raw_perplexity` in `seqc eval`)."""
    _, mask = ctx.session.compiled.labels
    total = tokens = 0.0
    for s, batch in zip(scores, ctx.batches, strict=True):
        m = np.asarray(batch[mask], bool)
        total -= float(np.asarray(s, np.float64)[m].sum())
        tokens += float(m.sum())
    return float(np.exp(total / max(tokens, 1.0)))
