"""The update rules of a resolved `train` block, with optax.

The transformation built here stops short of the learning rate: it turns gradients into a
descent direction (Adam's normalised moments, SGD's momentum trace, ...), and the training step
applies `params - lr * direction` with the learning rate the host computed for this step
(`seqc.run.schedule`). Schedules are thus written once for every backend; optax's own
`scale_by_learning_rate` is exactly that product, so the steps are optax's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import optax

from seqc.resolve.values import CallValue
from seqc.spec.errors import CheckError


def direction(train: Mapping[str, Any]) -> optax.GradientTransformation:
    """The update rule of a resolved `train` block without its learning rate (and without
    clipping, which the step does from the norm it logs)."""
    opt: CallValue = train["optimizer"]
    a = opt.args
    parts: list[optax.GradientTransformation] = []
    if opt.kind in ("adam", "sgd") and a["weight_decay"]:
        parts.append(optax.add_decayed_weights(float(a["weight_decay"])))  # before: L2 in grads
    if opt.kind in ("adam", "adamw"):
        parts.append(optax.scale_by_adam(b1=a["beta1"], b2=a["beta2"], eps=a["eps"]))
        if opt.kind == "adamw" and a["weight_decay"]:
            parts.append(optax.add_decayed_weights(float(a["weight_decay"])))  # decoupled
    elif opt.kind == "sgd":
        if float(a["momentum"]):
            parts.append(optax.trace(decay=float(a["momentum"]), nesterov=bool(a["nesterov"])))
    elif opt.kind == "adagrad":
        parts.append(
            optax.scale_by_rss(initial_accumulator_value=a["initial_accumulator"], eps=a["eps"])
        )
    elif opt.kind == "adafactor":
        # optax.adafactor without a learning rate ends by flipping the sign: flip it back.
        rule = optax.adafactor(
            None,
            decay_rate=a["decay_rate"],
            clipping_threshold=a["clip_threshold"],
            factored=bool(a["factored"]),
        )
        parts += [rule, optax.scale(-1.0)]
    else:
        raise CheckError(
            f"optimizer `{opt.kind}` has no JAX implementation",
            code="not-implemented",
            expected="adam, adamw, sgd, adagrad or adafactor",
            found=opt.kind,
        )
    accumulate = int(train.get("accumulate", 1))
    chain = optax.chain(*parts) if parts else optax.identity()  # plain SGD: the gradient
    return optax.MultiSteps(chain, accumulate) if accumulate > 1 else chain
