"""Sampling-based training criteria, lowered to primitives: sampled softmax, NCE and SNIS.

Why: with a vocabulary of 50k-200k words the output layer's [tokens, vocab] logits dominate a
training step. These criteria score only the targets and K candidate words drawn from a proposal
Q (`seqc.data.proposal`), one set shared by the whole batch. The graph takes the output layer's
*input* (the model's training graph stops there: `Graph.upto(head.hidden)`) and the layer's own
params, gathers the K + targets rows (or columns) of its matrix, and computes [tokens, K] scores:
no value in it has both a token axis and the vocabulary axis.

Inputs, besides the model's `hidden` [..., d], the labels and their mask:
- `candidates` int32 [rows, K]: the step's K ids, the same in every row. They ride with the
  batch's rows so that any data-parallel split hands each device the same set; a row reads row 0.
- `candidates_log_e`, float32 [rows, K], and `labels_log_e`, float32 [..]: log expected counts
  log K + log Q(y) of the candidates and of each target (drawn with replacement, so E = K Q
  exactly; see ../shared/research/snis.md, "Sampling mode").

With s_y = h . w_y + b_y and z_y = s_y - log E_y, per position (snis.md, section 1):
- sampled softmax (and SNIS variant A): logsumexp over {target} + candidates of z, minus z_target;
  its optimum is s = log p + c(h) at every K when accidental hits are kept;
- NCE: softplus(-z_target) + sum_k softplus(z_k); optimum exp(s) = p;
- SNIS variant B: -s_target + exp(logsumexp_k z_k) - 1 = -s_target + (1/K) sum_k exp(s_k)/Q_k - 1,
  an unbiased estimate of -s_target + Z - 1 >= cross-entropy; optimum exp(s) = p. The exponent is
  clamped at 30 so that early steps cannot overflow.

Outputs are the criterion's (`seqc.compiler.lower.criterion`): `loss` (the mean over tokens, or
sequences), `nll_sum` (here the criterion's total: a sampled loss is not the likelihood, which
evaluation always computes with the full softmax) and `tokens`.
"""

from __future__ import annotations

from seqc.compiler.graph import Graph, GraphBuilder, Head, Param, TensorType
from seqc.resolve.values import CallValue
from seqc.spec.errors import CheckError
from seqc.spec.ir import Span

HIDDEN = "hidden"
CANDIDATES, CANDIDATES_LOG_E, LABELS_LOG_E = "candidates", "candidates_log_e", "labels_log_e"
SAMPLED = ("sampled_softmax", "nce", "snis")
HIT = -1e9
"""A removed accidental hit's corrected logit: exp() of it is 0, and unlike -inf it keeps
gradients finite."""
CLAMP = 30.0


def variant(loss: CallValue) -> str:
    """'softmax', 'nce' or 'normalizing': which of the three losses this call computes."""
    if loss.kind == "nce":
        return "nce"
    if loss.kind == "snis" and loss.args.get("variant", "B") == "B":
        return "normalizing"
    return "softmax"


def check_head(graph: Graph, loss: CallValue, span: Span | None) -> Head:
    """The model's output layer, which a sampled loss scores with; an error at the loss's line
    when the model's output is not a `Softmax` layer's."""
    head = graph.head
    if head is None or not graph.outputs or graph.outputs[0] != head.logits:
        last = graph.ops[graph.outputs[0]] if graph.outputs else None
        found = f"an output made by `{last.layer or 'the model'}` ({last.kind})" if last else "none"
        raise CheckError(
            f"`{loss.kind}` scores sampled words with the output layer's weights, so the model "
            "must end in a Softmax layer",
            span=span,
            code="needs-softmax",
            expected="the model's forward returning a Softmax(vocab, d) layer's output",
            found=found,
            hint="end the forward with `return out(h)` where `out = Softmax(vocab, d)`, or use "
            "cross_entropy",
        )
    return head


def lower_sampled(loss: CallValue, graph: Graph, span: Span | None = None) -> Graph:
    """The training criterion graph of a sampled `loss` over `graph`'s output layer."""
    head = check_head(graph, loss, span)
    hidden_t = graph.ops[head.hidden].type
    positions = hidden_t.shape[:-1]
    k = int(loss.args["samples"])
    b = GraphBuilder()
    b.layer, b.span = "loss", span
    every = tuple(range(len(positions)))
    for name in (head.weight, head.bias):
        if name is not None:
            p = graph.params[name]
            b.graph.params[name] = Param(name, p.type, p.init, p.layer, p.span)
    h = b.input(HIDDEN, hidden_t)
    labels = b.input("labels", TensorType("int32", positions))
    mask = b.input("mask", TensorType("bool", positions))
    rows = positions[0]
    cand = b.input(CANDIDATES, TensorType("int32", (rows, k)))
    cand_log_e = b.input(CANDIDATES_LOG_E, TensorType("float32", (rows, k)))
    labels_log_e = b.input(LABELS_LOG_E, TensorType("float32", positions))
    # Every row holds the same K: take row 0 as [K].
    ids = b.reshape(b.slice(cand, 0, 0, 1), (k,))
    log_e = b.reshape(b.slice(cand_log_e, 0, 0, 1), (k,))
    # Scores in float32 whatever the compute dtype (as the full criterion's cast).
    h = b.typed_op("cast", (h,), {"dtype": "float32"}, TensorType("float32", hidden_t.shape))
    w = b.shared_param(head.weight)
    s_y, s_k = _scores(b, h, w, head.vocab_axis, labels, ids, len(positions))
    if head.bias is not None:
        bias = b.shared_param(head.bias)
        s_y = b.binary("add", s_y, b.gather(bias, labels))
        s_k = b.binary("add", s_k, b.gather(bias, ids))
    z_y = b.binary("sub", s_y, labels_log_e)
    z_k = b.binary("sub", s_k, log_e)  # [..., K] - [K]
    if loss.args.get("remove_accidental_hits", False):
        labels_k = b.reshape(labels, (*positions, 1))
        hit = b.binary("equal", labels_k, ids)  # [..., 1] == [K] -> [..., K]
        z_k = b.where(hit, b.constant(HIT), z_k)
    kind = variant(loss)
    if kind == "softmax":
        z_y1 = b.reshape(z_y, (*positions, 1))
        logp = b.log_softmax(b.concat([z_y1, z_k], -1))
        per_token = b.unary("neg", b.reshape(b.slice(logp, -1, 0, 1), positions))
    elif kind == "nce":
        per_token = b.binary(
            "add",
            _softplus(b, b.unary("neg", z_y)),
            b.reduce("reduce_sum", _softplus(b, z_k), (-1,), keepdims=False),
        )
    else:
        log_z = _logsumexp(b, z_k)
        z = b.unary("exp", b.binary("minimum", log_z, b.constant(CLAMP)))
        per_token = b.binary("sub", b.binary("sub", z, s_y), b.constant(1.0))
    m = b.cast(mask, "float32")
    tokens = b.reduce("reduce_sum", m, every, keepdims=False)
    total = b.reduce("reduce_sum", b.binary("mul", per_token, m), every, keepdims=False)
    value = b.binary("div", total, b.binary("maximum", tokens, b.constant(1.0)))
    b.graph.outputs = [value, total, tokens]
    return b.graph


def _scores(
    b: GraphBuilder, h: int, w: int, vocab_axis: int, labels: int, ids: int, rank: int
) -> tuple[int, int]:
    """The targets' scores [...] and the candidates' [..., K], from the output matrix's rows
    (a tied [vocab, d] table) or columns (the layer's [d, vocab]) for those ids only."""
    pos = "pqrstuvw"[:rank]  # no d or k
    if vocab_axis == 0:
        w_y = b.gather(w, labels)  # [..., d]
        w_k = b.gather(w, ids)  # [K, d]
        s_k = b.einsum(f"{pos}d,kd->{pos}k", h, w_k)
    else:
        w_y = b.transpose(b.gather(w, labels, axis=1), (*range(1, rank + 1), 0))  # [..., d]
        w_k = b.gather(w, ids, axis=1)  # [d, K]
        s_k = b.matmul(h, w_k)
    s_y = b.reduce("reduce_sum", b.binary("mul", h, w_y), (-1,), keepdims=False)
    return s_y, s_k


def _softplus(b: GraphBuilder, x: int) -> int:
    """log(1 + exp(x)) = max(x, 0) + log(1 + exp(-|x|)): no overflow for large x."""
    zero = b.constant(0.0)
    magnitude = b.binary("maximum", x, b.unary("neg", x))
    tail = b.unary(
        "log", b.binary("add", b.constant(1.0), b.unary("exp", b.unary("neg", magnitude)))
    )
    return b.binary("add", b.binary("maximum", x, zero), tail)


def _logsumexp(b: GraphBuilder, x: int) -> int:
    """log sum_k exp(x_k) over the last axis, shifted by the max for stability."""
    top = b.reduce("reduce_max", x, (-1,), keepdims=True)
    rest = b.reduce("reduce_sum", b.unary("exp", b.binary("sub", x, top)), (-1,), keepdims=False)
    return b.binary("add", b.unary("log", rest), b.reshape(top, b.type(rest).shape))
