"""The output layer and the cross-entropy fused into one op: `linear_cross_entropy`.

Why: a language model's step spends much of its time in the [tokens, vocab] logits, not in
their products but in moving them. The model graph writes the logits; the criterion reads them
for a log-softmax, writes that, reads it again for the gradient, which it writes for the two
backward products to read. At 4,096 tokens and a vocabulary of 4,000 each pass is 64 MB, far
beyond the CPU's caches. A hand-written program does the same, because the loss is written
apart from the model. The compiler sees both: when the model ends in a `Softmax` layer and the
training criterion is the cross-entropy, the training graph stops at the output layer's input
(`Graph.upto(head.hidden)`, as for the sampled criteria) and the criterion computes, a chunk of
positions at a time, the logits, the loss and the gradients of the loss with respect to the
layer's input, matrix and bias, so that no [tokens, vocab] value is ever whole (the fused
linear cross-entropy of Liger-Kernel and Apple's "Cut Your Losses", here in chunks of
positions). The softmax's gradient is formed where the logits are, in the same pass, and the
memory of the step no longer holds [tokens, vocab] values (three of them unfused). The
gradients ride from the forward pass to the backward pass as residuals, so the products are
the same three as unfused; the op's own VJP scales them.

The op: inputs the hidden [..., d], the output matrix ([d, vocab], or a tied [vocab, d]
table: `vocab_axis`), the bias [vocab] if the layer has one, the labels [...] and float weights
[...] (the mask); output float32 [2]: the sum over positions of weight x the criterion (label
smoothing included) and of weight x the plain negative log-likelihood. The rest of the
criterion (token count, the mean, the per-sequence reduction) stays in primitives.

Chunks: the op's `rows` attribute is the CPU's; a backend on a GPU asks for larger ones
(`rows_per_chunk(vocab, accelerator=True)`). The positions' last axis is cut (the leading
ones, a batch, are kept whole, so a batch sharded over devices stays sharded) into pieces
of about `rows` positions in all, padded with weight-0 positions (`chunking`).
`compile { passes }` turns it off by leaving out `fuse_loss`; a placed run trains the
unfused criterion, whose ops its plan names.
"""

from __future__ import annotations

import math
from typing import Any

from seqc.compiler.graph import Graph, GraphBuilder, Param, TensorType
from seqc.compiler.lower.criterion import LABELS, MASK
from seqc.compiler.lower.sampled import HIDDEN
from seqc.resolve.values import CallValue
from seqc.spec.ir import Span

OP = "linear_cross_entropy"
CHUNK_BYTES = 16 << 20
"""The float32 logits of one chunk. Timed on this 2-core CPU at 4,096 positions and V = 4,000
(`bench/passes_throughput.py` and the op alone): 1k-position chunks (16 MB) were 5-10% faster
than 256 (4 MB) on JAX and TF-XLA, and 20-40% faster than the unfused logits; the gain is
mostly the softmax's gradient formed where the logits are, not the cache."""
MIN_ROWS = 256
"""Positions per chunk at least: each chunk reads the whole output matrix again, so fewer,
larger chunks win for a large vocabulary (at V = 100k, a 100 MB matrix)."""


def fusable(loss: CallValue, graph: Graph) -> bool:
    """True when the training criterion may be fused with the output layer: the plain
    cross-entropy over the logits of the model's last `Softmax` layer."""
    head = graph.head
    return (
        loss.kind == "cross_entropy"
        and head is not None
        and bool(graph.outputs)
        and graph.outputs[0] == head.logits
    )


ACCELERATOR_CHUNK_BYTES = 2 << 30
"""The float32 logits of one chunk on a GPU or TPU, where there is no cache to fit and a chunk
must fill the matrix units: measured on an H200 (JAX, d 1024, V 32,000, 16k positions),
256-position chunks made the step 8% slower than unfused logits; a chunk splits only logits
past 2 GiB, for the memory alone."""


def rows_per_chunk(vocab: int, accelerator: bool = False) -> int:
    """How many positions a chunk holds for this vocabulary (`CHUNK_BYTES`, `MIN_ROWS`; on an
    accelerator `ACCELERATOR_CHUNK_BYTES`)."""
    budget = ACCELERATOR_CHUNK_BYTES if accelerator else CHUNK_BYTES
    return max(MIN_ROWS, budget // (4 * vocab))


def chunking(positions: tuple[int, ...], rows: int, max_chunks: int = 0) -> tuple[int, int, int]:
    """(leading, per_chunk, chunks) for these positions: the product of the leading axes, and
    how the last axis is cut, so that leading x per_chunk is about `rows`. `max_chunks` (>0)
    caps the count (a backend that unrolls the chunks)."""
    *lead, last = positions
    leading = math.prod(lead)
    per_chunk = max(1, min(last, rows // max(leading, 1)))
    if max_chunks and -(-last // per_chunk) > max_chunks:
        per_chunk = -(-last // max_chunks)
    return leading, per_chunk, -(-last // per_chunk)


def call(fn: Any, xs: list[Any], attrs: dict[str, Any], rows: int | None = None) -> Any:
    """`fn(h, w, bias, labels, weights, vocab_axis=, smoothing=, rows=)` on an op's inputs
    (the bias is there when `attrs["bias"]`): how each backend's primitive table calls its
    implementation; `rows` overrides the attribute (a GPU's chunks)."""
    h, w, *rest = xs
    bias = rest.pop(0) if attrs["bias"] else None
    labels, weights = rest
    return fn(
        h,
        w,
        bias,
        labels,
        weights,
        vocab_axis=attrs["vocab_axis"],
        smoothing=attrs["smoothing"],
        rows=attrs["rows"] if rows is None else rows,
    )


def lower_fused_cross_entropy(loss: CallValue, graph: Graph, span: Span | None = None) -> Graph:
    """The training criterion of `loss` (cross-entropy) over `graph`'s output layer's input:
    outputs `loss`, `nll_sum`, `tokens` as `seqc.compiler.lower.criterion` computes them."""
    head = graph.head
    assert head is not None and fusable(loss, graph)
    hidden_t = graph.ops[head.hidden].type
    positions = hidden_t.shape[:-1]
    every = tuple(range(len(positions)))
    vocab = graph.ops[head.logits].type.shape[-1]
    b = GraphBuilder()
    b.layer, b.span = "loss", span
    for name in (head.weight, head.bias):
        if name is not None:
            p = graph.params[name]
            b.graph.params[name] = Param(name, p.type, p.init, p.layer, p.span)
    h = b.input(HIDDEN, hidden_t)
    labels = b.input(LABELS, TensorType("int32", positions))
    mask = b.input(MASK, TensorType("bool", positions))
    m = b.cast(mask, "float32")
    inputs = [h, b.shared_param(head.weight)]
    if head.bias is not None:
        inputs.append(b.shared_param(head.bias))
    attrs = {
        "vocab_axis": head.vocab_axis,
        "bias": head.bias is not None,
        "smoothing": float(loss.args["label_smoothing"]),
        "rows": rows_per_chunk(int(vocab)) if isinstance(vocab, int) else MIN_ROWS,
    }
    sums = b.typed_op(OP, (*inputs, labels, m), attrs, TensorType("float32", (2,)))
    total = b.reshape(b.slice(sums, 0, 0, 1), ())
    nll_sum = b.reshape(b.slice(sums, 0, 1, 2), ())
    tokens = b.reduce("reduce_sum", m, every, keepdims=False)
    if loss.args.get("reduction") == "sequence":
        nonempty = b.binary(
            "greater", b.reduce("reduce_max", m, (-1,), keepdims=False), b.constant(0.0)
        )
        count = b.reduce("reduce_sum", b.cast(nonempty, "float32"), every[:-1], keepdims=False)
    else:
        count = tokens
    value = b.binary("div", total, b.binary("maximum", count, b.constant(1.0)))
    b.graph.outputs = [value, nll_sum, tokens]
    return b.graph
