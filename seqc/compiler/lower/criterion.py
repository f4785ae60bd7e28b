"""Training criteria lowered to primitives, so every backend optimizes the same number.

A criterion is a graph of its own: the model's logits, the labels and their mask in; the loss and
the sums the metrics need out. Backends run it right after the forward graph inside the same
compiled step (one XLA program, one TF graph), so it costs what a hand-written loss costs, and
it is written once: a backend that implements the primitive table trains with it, and the
exporter scores an artifact's logits with it.

Outputs are sums over real tokens, not means, so batches of different sizes combine exactly:
- `loss`: the criterion, per token (or per sequence with `reduction = "sequence"`);
- `nll_sum`: the plain negative log-likelihood, summed (perplexity reads it; with label
  smoothing the loss is not the likelihood);
- `tokens`: the count of real target tokens;
- `correct` (the evaluation criterion only): tokens whose argmax is the label. Training leaves
  it out: an argmax over the vocabulary is a slow reduction on XLA's CPU backend (5-10% of a
  small LM's step at vocab 4000), and the training loop never reads it.
- `logz_sum`, `logz_sq_sum`, `raw_nll_sum` (evaluation only): log Z = logsumexp of the logits
  per token, and its square, and -s_label, summed: how far a model is from self-normalised
  (log Z = 0) and the perplexity its raw scores exp(s) give, which is what a model trained by
  NCE or SNIS B is deployed with (`seqc.compiler.lower.sampled`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from seqc.compiler.graph import Graph, GraphBuilder, TensorType
from seqc.resolve.values import CallValue
from seqc.spec.errors import CheckError
from seqc.spec.ir import Span

LOGITS, LABELS, MASK = "logits", "labels", "mask"
"""The criterion graph's inputs."""

TRAIN_OUTPUTS = ("loss", "nll_sum", "tokens")
EVAL_OUTPUTS = (*TRAIN_OUTPUTS, "correct", "logz_sum", "logz_sq_sum", "raw_nll_sum")
IMPLEMENTED = ("cross_entropy",)


def named(outputs: Sequence[Any], graph: Graph | None = None) -> dict[str, Any]:
    """A criterion graph's outputs by name: `graph`'s own names where it has them (experts'
    figures after the loss's, `seqc.compiler.expert_terms`), else `EVAL_OUTPUTS` (the
    training criterion's are a prefix)."""
    names = graph.output_names if graph is not None and graph.output_names else EVAL_OUTPUTS
    return dict(zip(names, outputs, strict=False))


def lower_criterion(
    loss: CallValue, logits: TensorType, *, accuracy: bool, span: Span | None = None
) -> Graph:
    """The criterion graph of `loss` over logits of this type ([..., vocab]); `span` is the
    task's `loss = ...` line, which every op of the graph carries."""
    if loss.kind not in IMPLEMENTED:
        raise CheckError(
            f"loss `{loss.kind}` is not implemented yet",
            span=span,
            code="not-implemented",
            expected=" or ".join(IMPLEMENTED),
            found=loss.kind,
            hint="train with cross_entropy(...) for now",
        )
    b = GraphBuilder()
    b.layer, b.span = "loss", span
    b.graph.outputs = cross_entropy(b, loss, logits, accuracy)
    return b.graph


def cross_entropy(
    b: GraphBuilder, loss: CallValue, logits: TensorType, accuracy: bool
) -> list[int]:
    """The cross-entropy criterion's outputs (`TRAIN_OUTPUTS`, or `EVAL_OUTPUTS` with
    `accuracy`) in `b`, over new inputs `LOGITS`, `LABELS`, `MASK` (joint CTC + attention adds
    its CTC term beside these, `seqc.compiler.lower.ctc`)."""
    positions = logits.shape[:-1]
    every = tuple(range(len(positions)))
    z = b.input(LOGITS, logits)
    labels = b.input(LABELS, TensorType("int32", positions))
    mask = b.input(MASK, TensorType("bool", positions))
    # Always a cast, even to the type the graph says it has: under a bfloat16 compute dtype the
    # model's "float32" values are bfloat16, and the criterion is computed in float32.
    z32 = b.typed_op("cast", (z,), {"dtype": "float32"}, TensorType("float32", logits.shape))
    logp = b.log_softmax(z32)
    nll = b.unary("neg", b.take_along(logp, labels))
    per_token = nll
    smoothing = float(loss.args["label_smoothing"])
    if smoothing:  # (1 - s) on the label, s spread evenly over the vocabulary
        uniform = b.reduce("reduce_mean", logp, (-1,), keepdims=False)
        per_token = b.binary(
            "sub",
            b.binary("mul", b.constant(1.0 - smoothing), nll),
            b.binary("mul", b.constant(smoothing), uniform),
        )
    m = b.cast(mask, "float32")
    tokens = b.reduce("reduce_sum", m, every, keepdims=False)
    total = b.reduce("reduce_sum", b.binary("mul", per_token, m), every, keepdims=False)
    if loss.args.get("reduction") == "sequence":
        nonempty = b.binary(
            "greater", b.reduce("reduce_max", m, (-1,), keepdims=False), b.constant(0.0)
        )
        rows = every[:-1]  # the sequences: every position axis but the last
        count = b.reduce("reduce_sum", b.cast(nonempty, "float32"), rows, keepdims=False)
    else:
        count = tokens
    value = b.binary("div", total, b.binary("maximum", count, b.constant(1.0)))
    nll_sum = b.reduce("reduce_sum", b.binary("mul", nll, m), every, keepdims=False)
    outputs = [value, nll_sum, tokens]
    if accuracy:
        hits = b.cast(b.binary("equal", b.argmax(z), labels), "float32")
        outputs.append(b.reduce("reduce_sum", b.binary("mul", hits, m), every, keepdims=False))
        score = b.take_along(z32, labels)  # s_label; log Z = s_label - log p_label
        log_z = b.binary("add", score, nll)
        for v in (log_z, b.binary("mul", log_z, log_z), b.unary("neg", score)):
            outputs.append(b.reduce("reduce_sum", b.binary("mul", v, m), every, keepdims=False))
    return outputs
