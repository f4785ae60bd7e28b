"""The update rules of a `train` block (`seqc.compiler.config`), with optax.

The transformation built here stops short of the learning rate: it turns gradients into a
descent direction (Adam's normalised moments, SGD's momentum trace, ...), and the training step
applies `params - lr * direction` with the learning rate the host computed for this step
(`seqc.run.train.schedule`). Schedules are thus written once for every backend; optax's own
`scale_by_learning_rate` is exactly that product, so the steps are optax's.
"""

from __future__ import annotations

import optax

from seqc.compiler.config import Adafactor, Adagrad, Adam, AdamW, Sgd, TrainConfig
from seqc.spec.errors import CheckError


def direction(train: TrainConfig) -> optax.GradientTransformation:
    """The update rule of a `train` block without its learning rate (and without clipping,
    which the step does from the norm it logs)."""
    opt = train.optimizer
    parts: list[optax.GradientTransformation] = []
    if isinstance(opt, Adam | Sgd) and opt.weight_decay:
        parts.append(optax.add_decayed_weights(opt.weight_decay))  # before: L2 in grads
    if isinstance(opt, Adam | AdamW):
        parts.append(optax.scale_by_adam(b1=opt.beta1, b2=opt.beta2, eps=opt.eps))
        if isinstance(opt, AdamW) and opt.weight_decay:
            parts.append(optax.add_decayed_weights(opt.weight_decay))  # decoupled
    elif isinstance(opt, Sgd):
        if opt.momentum:
            parts.append(optax.trace(decay=opt.momentum, nesterov=opt.nesterov))
    elif isinstance(opt, Adagrad):
        parts.append(
            optax.scale_by_rss(initial_accumulator_value=opt.initial_accumulator, eps=opt.eps)
        )
    elif isinstance(opt, Adafactor):
        # optax.adafactor without a learning rate ends by flipping the sign: flip it back.
        rule = optax.adafactor(
            None,
            decay_rate=opt.decay_rate,
            clipping_threshold=opt.clip_threshold,
            factored=opt.factored,
        )
        parts += [rule, optax.scale(-1.0)]
    else:
        raise CheckError(
            f"optimizer `{opt.kind}` has no JAX implementation",
            code="not-implemented",
            expected="adam, adamw, sgd, adagrad or adafactor",
            found=opt.kind,
        )
    chain = optax.chain(*parts) if parts else optax.identity()  # plain SGD: the gradient
    return optax.MultiSteps(chain, train.accumulate) if train.accumulate > 1 else chain
