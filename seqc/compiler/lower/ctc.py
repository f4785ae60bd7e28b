"""The CTC criterion, and the one change a CTC model's graph gets when it is compiled.

A CTC model returns per-frame logits and the mask of its real frames (`return out(x), mask`).
The compiler folds the mask into the logits (`fold_frame_mask`): a padding frame's logits
become "blank, with certainty" (0 for the blank, -1e9 for every other id). Extra blank frames
at the end of an utterance leave the probability of every transcript unchanged (CTC allows any
number of trailing blanks, each with probability 1 there), so the loss over all F frames equals
the loss over the real ones, and greedy or beam decoding over all F frames gives the same text.
Why fold it rather than pass the mask along: the model then has one output, as every other
model has, so the training steps, data parallelism, evaluation, decoders and exported artifacts
(ONNX, TFLite) handle CTC models unchanged, and a deployed artifact's logits need no mask.

The criterion's outputs follow `seqc.compiler.lower.criterion`: sums over real tokens so that
batches combine exactly. `nll_sum` is the CTC negative log-likelihood summed over utterances,
`tokens` the transcript tokens, so `exp(nll_sum / tokens)` is a per-token perplexity of the
transcript (every alignment summed), comparable between CTC models with one tokenizer.
"""

from __future__ import annotations

from seqc.compiler.graph import Graph, GraphBuilder, TensorType
from seqc.compiler.lower.criterion import LABELS, LOGITS, MASK, cross_entropy
from seqc.resolve.values import CallValue
from seqc.spec.errors import CheckError
from seqc.spec.ir import Span

BLANK = 0
"""The blank's id: the padding id, which never occurs inside a transcript."""

FORCED = -1e9
"""A padding frame's logit for every id but the blank."""


def fold_frame_mask(graph: Graph, span: Span | None) -> None:
    """Rewrite a CTC model's outputs (logits [B, F, V], mask bool [B, F]) into one: the logits
    with padding frames forced to the blank. `span` is the task's `loss = ctc()` line."""
    if len(graph.outputs) != 2:
        raise CheckError(
            "a model trained with `ctc` returns its frame logits and their mask",
            span=span,
            code="ctc-outputs",
            expected="forward (...) -> (float32[B, F, vocab], bool[B, F]) ending "
            "`return logits, mask`",
            found=f"{len(graph.outputs)} output(s)",
            hint="get the frames' mask with the front end's `.mask(audio_mask)` (and the "
            "subsampling's, if any)",
        )
    graph.outputs = [_fold(graph, *graph.outputs, span)]


def fold_joint(graph: Graph, span: Span | None) -> tuple[int, int]:
    """(decoder logits, folded CTC logits) of a joint CTC + attention model, whose forward
    returns the decoder's logits [B, T, V], the CTC logits [B, F, V] and the frames' mask."""
    if len(graph.outputs) != 3:
        raise CheckError(
            "a model trained with `joint_ctc` returns the decoder's logits, the frame logits "
            "and the frames' mask",
            span=span,
            code="ctc-outputs",
            expected="forward (...) -> (float32[B, T, vocab], float32[B, F, vocab], bool[B, F]) "
            "ending `return logits, ctc_logits, mask`",
            found=f"{len(graph.outputs)} output(s)",
        )
    decoder, logits, mask = graph.outputs
    return decoder, _fold(graph, logits, mask, span)


def _fold(graph: Graph, logits: int, mask: int, span: Span | None) -> int:
    import numpy as np

    tl, tm = graph.ops[logits].type, graph.ops[mask].type
    if tl.rank != 3 or tm.rank != 2 or tm.dtype != "bool" or tuple(tm.shape) != tl.shape[:2]:
        raise CheckError(
            "the frame mask a CTC model returns must match its logits' [B, F]",
            span=graph.ops[mask].span or span,
            code="shape-mismatch",
            expected=f"bool[{tl.shape[0]}, {tl.shape[1]}] beside logits {tl}",
            found=f"{tm} beside logits {tl}",
        )
    b = GraphBuilder()
    b.graph = graph
    b.layer, b.span = "loss", span
    vocab = tl.shape[-1]
    assert isinstance(vocab, int)
    forced = [FORCED] * vocab
    forced[BLANK] = 0.0
    blank_only = b.constant(np.asarray([forced], np.float32))  # [1, V]: broadcasts
    bsz, frames = tm.shape
    real = b.reshape(mask, (bsz, frames, 1))
    return b.where(real, logits, blank_only)


CTC_LOGITS, CTC_LABELS, CTC_MASK = "ctc_logits", "ctc_labels", "ctc_mask"
"""The joint criterion's inputs for its CTC term (beside the attention decoder's)."""


def lower_ctc(loss: CallValue, logits: TensorType, span: Span | None = None) -> Graph:
    """The CTC criterion graph over logits [B, F, V] (padding frames already forced to the
    blank), labels int32 [B, L] and their mask."""
    b = GraphBuilder()
    b.layer, b.span = "loss", span
    value, nll_sum, tokens = _ctc_terms(b, loss, logits, (LOGITS, LABELS, MASK))
    b.graph.outputs = [value, nll_sum, tokens]
    return b.graph


def lower_joint_ctc(
    loss: CallValue, logits: TensorType, ctc_logits: TensorType, span: Span | None = None
) -> Graph:
    """Joint CTC + attention (Kim, Hori & Watanabe, 2017): (1 - w) * the attention decoder's
    cross-entropy + w * CTC over the encoder's frames. The CTC term aligns the encoder
    monotonically, which attention alone learns slowly; the decoder is what decodes. `nll_sum`
    and `tokens` are the decoder's, so perplexity stays the attention decoder's."""
    b = GraphBuilder()
    b.layer, b.span = "loss", span
    ce = CallValue(
        kind="cross_entropy",
        namespace="loss",
        args={"label_smoothing": loss.args["label_smoothing"], "reduction": "token"},
    )
    ce_loss, nll_sum, tokens = cross_entropy(b, ce, logits, accuracy=False)
    ctc_loss, _, _ = _ctc_terms(b, loss, ctc_logits, (CTC_LOGITS, CTC_LABELS, CTC_MASK))
    w = float(loss.args["ctc_weight"])
    value = b.binary(
        "add",
        b.binary("mul", b.constant(1.0 - w), ce_loss),
        b.binary("mul", b.constant(w), ctc_loss),
    )
    b.graph.outputs = [value, nll_sum, tokens]
    return b.graph


def _ctc_terms(
    b: GraphBuilder, loss: CallValue, logits: TensorType, names: tuple[str, str, str]
) -> tuple[int, int, int]:
    """(loss, nll_sum, tokens) of CTC in `b`, over new inputs named `names`."""
    bsz, frames, _ = logits.shape
    z = b.input(names[0], logits)
    labels = b.input(names[1], TensorType("int32", (bsz, "L")))
    mask = b.input(names[2], TensorType("bool", (bsz, "L")))
    z32 = b.typed_op("cast", (z,), {"dtype": "float32"}, TensorType("float32", logits.shape))
    # The real frames, read back from the folded logits (a padding frame's id 1 is FORCED), so
    # the op sees each utterance's own length: a transcript too long for it is its loss of 0.
    one = b.reshape(b.slice(z32, -1, 1, 2), (bsz, frames))
    real = b.binary("greater", one, b.constant(FORCED / 2))
    per_utterance = b.ctc_loss(z32, real, labels, mask, blank=BLANK)  # [B]
    m = b.cast(mask, "float32")
    tokens = b.reduce("reduce_sum", m, (0, 1), keepdims=False)
    # A padding row (no transcript, every frame blank) has probability 1: its loss is 0.
    nll_sum = b.reduce("reduce_sum", per_utterance, (0,), keepdims=False)
    if loss.args.get("reduction") == "sequence":
        real_rows = b.reduce("reduce_max", m, (1,), keepdims=False)
        count = b.reduce("reduce_sum", real_rows, (0,), keepdims=False)
    else:
        count = tokens
    value = b.binary("div", nll_sum, b.binary("maximum", count, b.constant(1.0)))
    return value, nll_sum, tokens
