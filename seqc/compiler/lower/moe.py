"""Mixture of experts (GShard, Lepikhin et al. 2020; Switch, Fedus et al. 2021), lowered to
einsums over one-hot dispatch and combine tensors: no primitive of its own.

A router (a [d, experts] matrix) scores each token; its softmax's `top_k` largest entries pick
the experts, whose gates are those probabilities (renormalised to sum to one when top_k > 1,
as GShard's top-2; Switch's top-1 keeps the raw probability, so the router learns through it).
Each expert is a two-layer MLP, its weights stacked on a leading experts axis ([E, d, ff],
[E, ff, d]), which is the axis an `expert` mesh axis splits (`seqc.compiler.sharding`).

Two forms, one set of params (`GraphBuilder.training_form`):

- **Training** (GShard's dispatch): each sequence is a group of S = T tokens; expert e has
  C = ceil(capacity_factor * top_k * S / E) slots. A token's slot at an expert is the number of
  earlier tokens of its sequence routed there (an exclusive prefix sum along T, written as an
  einsum with the [T, T] causal mask); a token past the last slot is dropped from that expert
  (its output there is zero; the residual around the block carries it). The dispatch one-hot
  [B, T, E, C] gathers tokens into an [B, E, C, d] buffer, the experts run on their C slots,
  and the combine tensor (dispatch times gates) sums them back: every expert computes C slots,
  so FLOPs per token are top_k * capacity_factor times one MLP's, whatever E is. Slots go to
  earlier tokens first (GShard gives every token's first choice priority over any second
  choice), so whether a token is dropped depends on the tokens before it only: a causal LM
  must not learn from the future through capacity. Padding tokens, at the end of a row, come
  last. The layer also computes the load-balancing loss E * sum_e(f_e * p_e) (f_e: the share
  of tokens whose first choice is e; p_e: the mean router probability of e) and the router z
  loss (the mean squared log-sum-exp of the router's logits, ST-MoE), weighted, which the
  task's loss adds (`seqc.compiler.compile`), and two figures a run logs: the fraction of
  assignments dropped and each expert's share of them.
- **Inference** (evaluation, decoding, exports): no token is dropped; every expert is computed
  for every token and the gates (zero outside the top_k) mix them. That is position-wise, so
  the step graph of incremental decoding and the exported artifacts need nothing new, and it
  is what the training form computes when no expert overflows (tested: equal to 1e-6 with a
  capacity factor of E / top_k). It costs E / top_k times the training form's expert FLOPs,
  which at the expert counts a CPU-sized model uses is cheaper than a dispatch.
"""

from __future__ import annotations

import math
from fractions import Fraction

from seqc.compiler.graph import Dim, ExpertTerms, GraphBuilder, Init, TensorType
from seqc.compiler.lower.call import LayerCall, activation, lowering


def capacity(tokens: Dim, factor: float, top_k: int, experts: int) -> Dim:
    """Slots per expert for a group of `tokens` tokens: ceil(factor * top_k * tokens / experts),
    an int, or a dim expression in the group's symbolic length that backends size when the
    step runs (`seqc.backends.dims`)."""
    share = Fraction(factor).limit_denominator(1000) * top_k / experts
    p, q = share.numerator, share.denominator
    if isinstance(tokens, int):
        return max(1, -(-p * tokens // q))
    scaled = tokens if p == 1 else f"{p}*{tokens}"
    return scaled if q == 1 else f"(({scaled}+{q - 1})//{q})"


@lowering("MoE")
def _moe(b: GraphBuilder, c: LayerCall) -> int:
    c.allow_kwargs("mask")
    x = c.one_input()
    t = b.type(x)
    d, ff, n = c.args["d"], c.args["ff"], c.args["experts"]
    k = c.args["top_k"]
    if t.rank != 3 or t.shape[-1] != d:
        raise b.error(
            "a mixture of experts takes sequences of vectors",
            expected=f"float32[B, T, {d}]",
            found=str(t),
        )
    router = b.param("router.w", (d, n), Init("normal", 1.0 / math.sqrt(d)))
    logits = b.matmul(x, router)  # [B, T, E]
    probs = b.softmax(logits)
    choices = _top_k(b, probs, k)
    chosen = choices[0]
    for one in choices[1:]:
        chosen = b.binary("add", chosen, one)  # [B, T, E], 0 or 1: the token's experts
    gates = b.binary("mul", probs, chosen)
    if k > 1:
        total = b.reduce("reduce_sum", gates, (-1,), keepdims=True)
        gates = b.binary("div", gates, b.binary("maximum", total, b.constant(1e-9)))
    w1 = b.param("w1", (n, d, ff), Init("normal", 1.0 / math.sqrt(d)))
    b1 = b.param("b1", (n, ff), Init("zeros"))
    w2 = b.param("w2", (n, ff, d), Init("normal", 1.0 / math.sqrt(ff)))
    b2 = b.param("b2", (n, d), Init("zeros"))
    act, rate = c.args["activation"], c.args["dropout"]
    if not b.training_form:
        h = b.binary("add", b.einsum("btd,edf->btef", x, w1), b1)
        h = b.dropout(activation(b, act, h), rate)
        out = b.binary("add", b.einsum("btef,efd->bted", h, w2), b2)
        b.graph.experts.append(ExpertTerms(c.path, n))
        return b.einsum("bte,bted->btd", gates, out)
    mask = c.kwargs.get("mask")
    real = None if mask is None else b.reshape(b.cast(mask, "float32"), (*t.shape[:2], 1))
    if real is not None:
        chosen = b.binary("mul", chosen, real)
    slots = capacity(t.shape[1], float(c.args["capacity_factor"]), k, n)
    dispatch = _dispatch(b, x, chosen, slots)  # [B, T, E, C]
    combine = b.binary("mul", dispatch, b.reshape(gates, (*t.shape[:2], n, 1)))
    # each expert's slots of every row as one [rows * C, d] matrix: a plain batched matmul
    # over the experts (about a third faster on XLA's CPU than with rows as a batch axis)
    xin = b.einsum("btec,btd->ebcd", dispatch, x)
    flat = _by_expert(b, b.reshape(xin, (n, f"{t.shape[0]}*{slots}", d)))
    h = b.einsum("esd,edf->esf", flat, w1)
    h = b.binary("add", h, b.reshape(b1, (n, 1, ff)))
    h = b.dropout(activation(b, act, h), rate)
    out = b.binary("add", b.einsum("esf,efd->esd", h, w2), b.reshape(b2, (n, 1, d)))
    out = b.reshape(_by_expert(b, out), (n, t.shape[0], slots, d))
    y = b.einsum("btec,ebcd->btd", combine, out)
    aux = _aux_loss(b, c, logits, probs, choices[0], real, n)
    kept = b.reduce("reduce_sum", dispatch, (-1,), keepdims=False)  # [B, T, E]
    every = b.binary(
        "maximum", b.reduce("reduce_sum", chosen, (0, 1, 2), keepdims=False), b.constant(1.0)
    )
    dropped = b.binary(
        "sub",
        b.constant(1.0),
        b.binary("div", b.reduce("reduce_sum", kept, (0, 1, 2), keepdims=False), every),
    )
    load = b.binary("div", b.reduce("reduce_sum", chosen, (0, 1), keepdims=False), every)
    b.graph.experts.append(ExpertTerms(c.path, n, aux, dropped, load))
    return y


LAYOUT = ("experts", "rows", None)
"""How the experts' slots [E, B * C, d] lie on a mesh: the experts on the `expert` axis, the
rows on the other batch axes (`seqc.backends.jax.context.Ctx.laid_out`)."""


def _by_expert(b: GraphBuilder, x: int) -> int:
    """`x` [E, B * C, d] marked to lie by expert on a mesh. The mark is an attr of an
    identity op, which every backend but a sharded JAX step ignores: there it is a sharding
    constraint, and since the batch arrives split by rows, XLA moves the dispatched tokens
    to their experts' devices (an all-to-all) and the outputs back (GShard)."""
    return b.typed_op("identity", (x,), {"layout": LAYOUT}, b.type(x))


def _top_k(b: GraphBuilder, probs: int, k: int) -> list[int]:
    """One-hots [B, T, E] of each token's k most probable experts, best first (argmax, then
    argmax again with the chosen pushed below every probability)."""
    t = b.type(probs)
    n = int(t.shape[-1])  # the experts' ids, a constant (an iota has no step form)
    ids = b.typed_op("constant", (), {"value": list(range(n))}, TensorType("int32", (n,)))
    left, found = probs, []
    for _ in range(k):
        best = b.reshape(b.argmax(left), (*t.shape[:-1], 1))
        one = b.cast(b.binary("equal", best, ids), "float32")
        found.append(one)
        left = b.binary("sub", left, b.binary("mul", one, b.constant(2.0)))
    return found


def _dispatch(b: GraphBuilder, x: int, chosen: int, slots: Dim) -> int:
    """The dispatch one-hot [B, T, E, C]: 1 where a token takes slot c of expert e, the slot
    being the count of earlier tokens of its row routed to e (tokens past the last slot take
    none)."""
    t = b.type(chosen)
    # counted in int32: a bfloat16 step would count exactly only up to 256 tokens
    mine = b.cast(chosen, "int32")
    lower = b.cast(b.causal_mask(x, 1), "int32")  # [T, T]: 1 where s <= t
    before = b.binary("sub", b.einsum("bse,ts->bte", mine, lower), mine)
    slot_ids = b.positions(b.fill(0.0, (slots,)), 0)  # int32[C]
    at = b.binary("equal", b.reshape(before, (*t.shape, 1)), slot_ids)  # [B, T, E, C]
    return b.binary("mul", b.cast(at, "float32"), b.reshape(chosen, (*t.shape, 1)))


def _aux_loss(
    b: GraphBuilder, c: LayerCall, logits: int, probs: int, first: int, real: int | None, n: int
) -> int:
    """aux_loss * E * sum_e(f_e * p_e) + router_z_loss * mean(logsumexp(logits)^2), over real
    tokens (all of them without a mask)."""

    def mean(v: int) -> int:  # over the tokens: [B, T, X] -> [X]
        if real is None:
            return b.reduce("reduce_mean", v, (0, 1), keepdims=False)
        total = b.reduce("reduce_sum", b.binary("mul", v, real), (0, 1), keepdims=False)
        count = b.reduce("reduce_sum", real, (0, 1), keepdims=False)
        return b.binary("div", total, b.binary("maximum", count, b.constant(1.0)))

    share = b.binary("mul", mean(first), mean(probs))
    balance = b.binary(
        "mul", b.constant(float(n)), b.reduce("reduce_sum", share, (0,), keepdims=False)
    )
    # log-sum-exp of the logits: any logit minus its log-probability
    lse = b.binary("sub", b.slice(logits, 2, 0, 1), b.slice(b.log_softmax(logits), 2, 0, 1))
    z = b.reduce("reduce_sum", mean(b.unary("square", lse)), (0,), keepdims=False)
    weighted = b.binary("mul", b.constant(float(c.args["aux_loss"])), balance)
    return b.binary("add", weighted, b.binary("mul", b.constant(float(c.args["router_z_loss"])), z))
