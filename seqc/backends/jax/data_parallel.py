"""Gradients of a pure data-parallel mesh, summed across devices in one all-reduce.

Why not leave it to the SPMD partitioner: when every param is replicated, XLA inserts one
all-reduce per gradient and combines them into a single tuple all-reduce, but XLA's CPU
collectives (gloo across processes) still run a tuple's operands one at a time: ~55 small
exchanges per step of the benchmark LM at ~4.5 ms each, a third of the step on two pinned
cores (`bench/scaling.py`). One flat buffer costs one exchange (31 ms for all 4.2M gradients).

So when the mesh only splits the batch (no param is split), the gradient is computed under
`jax.shard_map`: each device differentiates the *total* of its rows' criterion (its loss times
its count of tokens or sequences), the gradients and the sums the metrics need are packed into
one float32 vector, `psum`med once, and divided by the global count. That is the gradient of the
global batch's mean, the one device's gradient to float32 roundoff. The forward and criterion
are the model's own (`JaxModel.forward`), not a second copy of them.

Dropout: each device draws the masks of the whole global batch and keeps its rows
(`Ctx.rows`), so its masks are those of a one-device run, and a run on any number of devices
follows the same loss curve.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec

from seqc.backends.jax.mesh import Sharded
from seqc.compiler.expert_terms import is_figure

Objective = Callable[[dict, dict, Any, tuple], tuple[jax.Array, dict]]
"""(params, arrays, rng, rows) -> (loss, criterion outputs), `rows` = (index, count) of this
device's share of the batch."""


def applies(sharded: Sharded) -> bool:
    """True when the mesh splits the batch and nothing else: every param is whole everywhere."""
    return sharded.batch_axes is not None and all(
        all(a is None for a in p.spec) for p in sharded.plan.params.values()
    )


def count(mask: jax.Array, per_sequence: bool) -> jax.Array:
    """What the criterion divides its total by (`seqc.compiler.lower.criterion`): the real
    tokens, or the non-empty sequences under `reduction = "sequence"`."""
    real = mask.astype(bool)
    return (real.any(axis=-1) if per_sequence else real).sum().astype(jnp.float32)


def gradients(
    sharded: Sharded,
    objective: Objective,
    mask_name: str,
    per_sequence: bool,
) -> Callable[[dict, dict, jax.Array], tuple[dict, dict]]:
    """A function (params, arrays, rng) -> (metrics, grads) to call inside the jitted step:
    `metrics` are the global batch's loss, nll_sum and tokens, `grads` the global mean's."""
    axes = sharded.batch_axes
    assert axes is not None
    devices = int(np.prod([sharded.mesh.shape[a] for a in axes]))

    def local(params: dict, arrays: dict, rng: Any) -> tuple[dict, dict]:  # a key, or Noise
        index = jax.lax.axis_index(axes)
        params = jax.lax.pcast(params, axes, to="varying")  # no implicit psum per gradient
        weight = count(arrays[mask_name], per_sequence)

        def total(p: dict) -> tuple[jax.Array, dict]:
            loss, out = objective(p, arrays, rng, (index, devices))
            return loss * weight, out

        (loss_total, out), grads = jax.value_and_grad(total, has_aux=True)(params)
        leaves, tree = jax.tree.flatten(grads)
        # a mixture of experts' figures (`seqc.compiler.expert_terms`): averaged over the
        # replicas as the loss is, weighted by their tokens
        figures = sorted(k for k in out if is_figure(k))
        shares = [(out[k] * weight).astype(jnp.float32).ravel() for k in figures]
        sums = jnp.stack([loss_total, out["nll_sum"], out["tokens"], weight]).astype(jnp.float32)
        flat = jnp.concatenate([g.astype(jnp.float32).ravel() for g in leaves] + shares + [sums])
        flat = jax.lax.psum(flat, axes)  # the one exchange of the step
        loss_total, nll_sum, tokens, weight = (flat[i] for i in range(-4, 0))
        weight = jnp.maximum(weight, 1.0)
        parts, at = [], 0
        for g in leaves:
            parts.append((flat[at : at + g.size] / weight).reshape(g.shape).astype(g.dtype))
            at += g.size
        metrics = {"loss": loss_total / weight, "nll_sum": nll_sum, "tokens": tokens}
        for k, share in zip(figures, shares, strict=True):
            metrics[k] = (flat[at : at + share.size] / weight).reshape(jnp.shape(out[k]))
            at += share.size
        return metrics, jax.tree.unflatten(tree, parts)

    batch = PartitionSpec(axes)
    whole = PartitionSpec()
    return jax.shard_map(
        local,
        mesh=sharded.mesh,
        in_specs=(whole, batch, whole),
        out_specs=(whole, whole),
    )
