"""Learning-rate schedules: host-side functions of the update count, the same for every backend.

The training loop computes the rate of each step here and hands it to the backend's step, which
multiplies its descent direction by it. Written once, in plain Python floats, after optax's
schedules (`optax.linear_schedule`, `warmup_cosine_decay_schedule`, `exponential_decay`,
`piecewise_constant_schedule`, `join_schedules`), which the tests take as the reference; the
count starts at 0, as optax's does.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from seqc.compiler.config import (
    Constant,
    Cosine,
    Exponential,
    LearningRate,
    LinearDecay,
    LinearWarmup,
    Piecewise,
    TrainConfig,
    WarmupRsqrt,
)
from seqc.spec.errors import CheckError
from seqc.spec.ir import Span

Schedule = Callable[[int], float]


def _linear(init: float, end: float, steps: int) -> Schedule:
    """optax.linear_schedule: `init` to `end` over `steps`, then `end`."""
    if steps <= 0:
        return lambda count: init

    def linear(count: int) -> float:
        frac = 1.0 - min(max(count, 0), steps) / steps
        return (init - end) * frac + end

    return linear


def _join(first: Schedule, second: Schedule, boundary: int) -> Schedule:
    """optax.join_schedules for two pieces: the second sees the count less the boundary."""
    return lambda count: first(count) if count < boundary else second(count - boundary)


def _cosine(init: float, steps: int, alpha: float, span: Span | None) -> Schedule:
    """optax.cosine_decay_schedule with exponent 1."""
    if steps <= 0:
        raise CheckError(
            f"the cosine schedule needs positive decay steps, got {steps}",
            span=span,
            code="bad-schedule",
            hint="give decay_steps, or more train.steps than warmup steps",
        )

    def cosine(count: int) -> float:
        decay = 0.5 * (1.0 + math.cos(math.pi * min(count, steps) / steps))
        return init * ((1.0 - alpha) * decay + alpha)

    return cosine


def _constant(value: float) -> Schedule:
    return lambda count: value


def schedule(lr: LearningRate, total_steps: int, span: Span | None = None) -> Schedule:
    """The rate at each update count, from a float or a schedule of the catalogue."""
    if isinstance(lr, float | int):
        return _constant(float(lr))
    if isinstance(lr, Constant):
        return _constant(lr.value)
    if isinstance(lr, WarmupRsqrt):  # linear warm-up, then decay with 1/sqrt(step)
        peak, warmup = lr.peak, max(lr.warmup, 1)

        def rsqrt(count: int) -> float:
            s = float(max(count + 1, 1))
            return peak * min(s / warmup, math.sqrt(warmup / s))

        return rsqrt
    if isinstance(lr, LinearWarmup):
        return _linear(0.0, lr.peak, max(lr.warmup, 1))
    if isinstance(lr, Cosine | LinearDecay):
        warmup = lr.warmup
        decay = lr.decay_steps if lr.decay_steps else max(total_steps - warmup, 1)
        peak, final = lr.peak, lr.final
        if isinstance(lr, Cosine):  # optax.warmup_cosine_decay_schedule
            alpha = 0.0 if peak == 0.0 else final / peak
            return _join(
                _linear(0.0 if warmup else peak, peak, warmup),
                _cosine(peak, decay, alpha, span),
                warmup,
            )
        tail = _linear(peak, final, decay)
        return _join(_linear(0.0, peak, warmup), tail, warmup) if warmup else tail
    if isinstance(lr, Exponential):  # optax.exponential_decay
        init, every, rate, staircase = lr.initial, lr.every, lr.rate, lr.staircase
        if every <= 0 or rate == 0.0:
            return _constant(init)

        def exponential(count: int) -> float:
            p = count / every
            if staircase:
                p = math.floor(p)
            return init if count <= 0 else init * rate**p

        return exponential
    if isinstance(lr, Piecewise):  # optax.piecewise_constant_schedule
        values, bounds = list(lr.values), list(lr.boundaries)
        scales = {b: values[i + 1] / values[i] if values[i] else 0.0 for i, b in enumerate(bounds)}
        if any(s < 0.0 for s in scales.values()):
            raise CheckError(
                "the piecewise schedule's values change sign",
                span=span,
                code="bad-schedule",
                found=", ".join(str(v) for v in values),
                hint="give values of one sign (each is a scale of the one before)",
            )

        def piecewise(count: int) -> float:
            v = values[0]
            for boundary, scale in sorted(scales.items()):
                if count >= boundary:
                    v *= scale
            return v

        return piecewise
    raise CheckError(
        f"schedule `{lr.kind}` has no implementation", span=span, code="not-implemented"
    )


def learning_rate(train: TrainConfig, span: Span | None = None) -> Schedule:
    """The rate of each training step of a `train` block. With gradient accumulation over k
    steps the schedule counts updates (step // k), as optax.MultiSteps does."""
    rate = schedule(train.optimizer.lr, train.steps, span)
    k = train.accumulate

    def at(step: int) -> float:
        value = rate(step // k)
        return 0.0 if math.isnan(value) else value

    return at
