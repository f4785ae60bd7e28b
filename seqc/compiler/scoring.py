"""The scoring graph: a model's raw score of one given next token, without the softmax.

Why: a model trained to be self-normalised (`nce`, `snis` variant B: exp(s) = p at the
optimum, README "Large vocabularies") is deployed by reading log p(y | h) ≈ s_y straight off
the output layer. Scoring a hypothesis (rescoring an ASR lattice, ranking candidate sentences)
then costs one row of the output matrix per token instead of all V. `export { onnx(normalize =
false) }` exports this graph, stepped like the forward (`seqc.compiler.incremental`).

The graph is the forward up to the output `Softmax` layer's input h, plus an input `next`
(the token to score, one per position) and s = h · w_next + b_next: the same row-wise score the
sampled criteria train (`seqc.compiler.lower.sampled`), from the same params.
"""

from __future__ import annotations

from seqc.compiler.graph import Graph, GraphBuilder, TensorType
from seqc.spec.errors import CheckError

SCORE_INPUT = "next"
"""The scoring graph's input: the id of the token scored at each position ([B, T] int32)."""

SCORE_OUTPUT = "score"
"""Its output: the raw score s of that token ([B, T] float32), log p for a self-normalised
model."""


def scoring_graph(graph: Graph) -> Graph:
    """`graph` up to its output layer's input, scoring the token `next` at each position."""
    head = graph.head
    if head is None:
        raise CheckError(
            "scoring without the softmax reads the output layer's weights, so the model must "
            "end in a Softmax layer",
            code="needs-softmax",
            hint="end the forward with `return out(h)` where `out = Softmax(vocab, d)`, or "
            "export with normalize = true",
        )
    b = _extending(graph, graph.upto(head.hidden))
    b.layer, b.span = head.layer, head.span
    hidden_t = graph.ops[head.hidden].type
    positions = hidden_t.shape[:-1]
    h = b.cast(head.hidden, "float32")
    ids = b.input(SCORE_INPUT, TensorType("int32", positions))
    w = b.shared_param(head.weight)
    if head.vocab_axis == 0:  # a tied [vocab, d] table: rows
        w_y = b.gather(w, ids)
    else:  # the layer's own [d, vocab]: columns, moved last
        rank = len(positions)
        w_y = b.transpose(b.gather(w, ids, axis=1), (*range(1, rank + 1), 0))
    score = b.reduce("reduce_sum", b.binary("mul", h, w_y), (-1,), keepdims=False)
    if head.bias is not None:
        score = b.binary("add", score, b.gather(b.shared_param(head.bias), ids))
    b.graph.outputs = [score]
    return b.graph


def label_scores_graph(graph: Graph) -> Graph:
    """`graph` with the log-probability of a given token at each position: the log-softmax of
    its logits over the vocabulary, read at `next` ([B, T] in, `score` [B, T] out). What a
    normalised LM is read by when whole sentences are scored (n-best rescoring): the
    normalisation in the runtime, in one pass over the sentence, rather than the logits
    [B, T, V] out of it and summed on the host."""
    logits = graph.outputs[0]
    b = _extending(graph, graph)
    op = graph.ops[logits]
    b.layer, b.span = op.layer, op.span
    ids = b.input(SCORE_INPUT, TensorType("int32", op.type.shape[:-1]))
    log_p = b.log_softmax(b.cast(logits, "float32"))
    b.graph.outputs = [b.take_along(log_p, ids)]
    return b.graph


def sequence_graph(graph: Graph, normalize: bool) -> Graph:
    """A language model's whole-sentence scorer: the score of each given next token at every
    position, in one pass (`normalize`: log p by the softmax; otherwise the raw score s of a
    self-normalised model, `scoring_graph`). Stepping a sentence through the decoder step costs
    a runtime call per position, which on a CPU weighs more than a small LM's arithmetic."""
    return label_scores_graph(graph) if normalize else scoring_graph(graph)


def _extending(graph: Graph, base: Graph) -> GraphBuilder:
    """A builder that adds ops after `base`'s (a prefix of `graph`), with `graph`'s params and
    subgraphs; `graph` itself is left as it is."""
    b = GraphBuilder()
    b.graph = Graph(
        inputs=dict(base.inputs),
        params=dict(graph.params),
        ops=list(base.ops),
        subgraphs=dict(graph.subgraphs),
    )
    return b
