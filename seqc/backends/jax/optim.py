"""Optimizers and learning-rate schedules from a resolved `train` block, with optax."""

from __future__ import annotations

import math
from typing import Any

import jax.numpy as jnp
import optax

from seqc.compiler.values import CallValue


def schedule(lr: Any, total_steps: int) -> optax.Schedule | float:
    """A float, or a schedule call: constant, warmup_rsqrt, linear_warmup, cosine, ..."""
    if not isinstance(lr, CallValue):
        return float(lr)
    a = lr.args
    if lr.kind == "constant":
        return float(a["value"])
    if lr.kind == "warmup_rsqrt":
        peak, warmup = float(a["peak"]), max(int(a["warmup"]), 1)

        def rsqrt(step: Any) -> Any:
            s = jnp.maximum(step + 1, 1).astype(jnp.float32)
            return peak * jnp.minimum(s / warmup, jnp.sqrt(warmup / s))

        return rsqrt
    if lr.kind == "linear_warmup":
        return optax.linear_schedule(0.0, float(a["peak"]), max(int(a["warmup"]), 1))
    if lr.kind in ("cosine", "linear_decay"):
        warmup = int(a["warmup"])
        decay = int(a["decay_steps"]) if a.get("decay_steps") else max(total_steps - warmup, 1)
        peak, final = float(a["peak"]), float(a["final"])
        if lr.kind == "cosine":
            return optax.warmup_cosine_decay_schedule(
                0.0 if warmup else peak, peak, warmup, warmup + decay, final
            )
        tail = optax.linear_schedule(peak, final, decay)
        if not warmup:
            return tail
        return optax.join_schedules([optax.linear_schedule(0.0, peak, warmup), tail], [warmup])
    if lr.kind == "exponential":
        return optax.exponential_decay(
            float(a["initial"]), int(a["every"]), float(a["rate"]), staircase=bool(a["staircase"])
        )
    if lr.kind == "piecewise":
        values = [float(v) for v in a["values"]]
        bounds = [int(b) for b in a["boundaries"]]
        scales = {b: values[i + 1] / values[i] if values[i] else 0.0 for i, b in enumerate(bounds)}
        return optax.piecewise_constant_schedule(values[0], scales)
    raise ValueError(f"schedule {lr.kind} has no JAX implementation")


def optimizer(train: dict[str, Any], clip: bool = True) -> optax.GradientTransformation:
    """The update rule of a resolved `train` block, with global-norm clipping first unless the
    caller clips itself (`clip=False`)."""
    opt: CallValue = train["optimizer"]
    a = opt.args
    lr = schedule(a["lr"], int(train["steps"]))
    parts: list[optax.GradientTransformation] = []
    if clip and train.get("clip_norm", 0.0) > 0.0:
        parts.append(optax.clip_by_global_norm(float(train["clip_norm"])))
    if opt.kind == "adam":
        if a["weight_decay"]:
            parts.append(optax.add_decayed_weights(float(a["weight_decay"])))
        parts.append(optax.adam(lr, b1=a["beta1"], b2=a["beta2"], eps=a["eps"]))
    elif opt.kind == "adamw":
        parts.append(
            optax.adamw(
                lr, b1=a["beta1"], b2=a["beta2"], eps=a["eps"], weight_decay=a["weight_decay"]
            )
        )
    elif opt.kind == "sgd":
        if a["weight_decay"]:
            parts.append(optax.add_decayed_weights(float(a["weight_decay"])))
        momentum = float(a["momentum"]) or None
        parts.append(optax.sgd(lr, momentum=momentum, nesterov=bool(a["nesterov"])))
    elif opt.kind == "adagrad":
        parts.append(
            optax.adagrad(lr, initial_accumulator_value=a["initial_accumulator"], eps=a["eps"])
        )
    elif opt.kind == "adafactor":
        parts.append(
            optax.adafactor(
                lr,
                decay_rate=a["decay_rate"],
                clipping_threshold=a["clip_threshold"],
                factored=bool(a["factored"]),
            )
        )
    else:
        raise ValueError(f"optimizer {opt.kind} has no JAX implementation")
    accumulate = int(train.get("accumulate", 1))
    chain = optax.chain(*parts)
    return optax.MultiSteps(chain, accumulate) if accumulate > 1 else chain


def lr_at(train: dict[str, Any], step: int) -> float:
    lr = schedule(train["optimizer"].args["lr"], int(train["steps"]))
    value = lr(jnp.asarray(step)) if callable(lr) else lr
    return float(value) if not math.isnan(float(value)) else 0.0
