"""Optimizers and learning-rate schedules from a resolved `train` block, on `tf.Variable`s.

The mirror of `seqc.backends.jax.optim`: the update equations are optax's, written out in TF,
not Keras' optimizers (Keras puts Adam's epsilon inside the bias correction and counts steps
from 1, so the same hyperparameters give other steps). Each schedule is a function of the
update count (int32, from 0), as an optax schedule is, computed in float32.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from seqc.compiler.values import CallValue

Schedule = Callable[[tf.Tensor], tf.Tensor]
SLOTS: dict[str, tuple[str, ...]] = {
    "adam": ("mu", "nu"),
    "adamw": ("mu", "nu"),
    "sgd": ("trace",),
    "adagrad": ("sum",),
    "adafactor": ("v", "v_row", "v_col"),  # v_row and v_col for factored params, else v
}
"""The state each optimizer keeps per param, besides the shared update count."""


def _f(count: Any) -> tf.Tensor:
    return tf.cast(count, tf.float32)


def _linear(init: float, end: float, steps: int) -> Schedule | float:
    """optax.linear_schedule (a polynomial schedule of power 1)."""
    if steps <= 0:
        return init

    def linear(count: tf.Tensor) -> tf.Tensor:
        c = tf.clip_by_value(tf.cast(count, tf.int32), 0, steps)
        frac = 1.0 - _f(c) / float(steps)
        return (init - end) * frac + end

    return linear


def _cosine(init: float, steps: int, alpha: float) -> Schedule:
    """optax.cosine_decay_schedule with exponent 1."""
    if steps <= 0:
        raise ValueError(f"the cosine schedule needs positive decay steps, got {steps}")

    def cosine(count: tf.Tensor) -> tf.Tensor:
        c = tf.minimum(_f(count), float(steps))
        decay = 0.5 * (1.0 + tf.cos(math.pi * c / float(steps)))
        return init * ((1.0 - alpha) * decay + alpha)

    return cosine


def _call(s: Schedule | float, count: tf.Tensor) -> tf.Tensor:
    return s(count) if callable(s) else tf.constant(s, tf.float32)


def _join(first: Schedule | float, second: Schedule | float, boundary: int) -> Schedule:
    """optax.join_schedules for two pieces: the second sees the count less the boundary."""

    def joined(count: tf.Tensor) -> tf.Tensor:
        count = tf.cast(count, tf.int32)
        return tf.where(count < boundary, _call(first, count), _call(second, count - boundary))

    return joined


def schedule(lr: Any, total_steps: int) -> Schedule | float:
    """A float, or a schedule call: constant, warmup_rsqrt, linear_warmup, cosine, ..."""
    if not isinstance(lr, CallValue):
        return float(lr)
    a = lr.args
    if lr.kind == "constant":
        return float(a["value"])
    if lr.kind == "warmup_rsqrt":
        peak, warmup = float(a["peak"]), max(int(a["warmup"]), 1)

        def rsqrt(step: tf.Tensor) -> tf.Tensor:
            s = _f(tf.maximum(tf.cast(step, tf.int32) + 1, 1))
            return peak * tf.minimum(s / float(warmup), tf.sqrt(float(warmup) / s))

        return rsqrt
    if lr.kind == "linear_warmup":
        return _linear(0.0, float(a["peak"]), max(int(a["warmup"]), 1))
    if lr.kind in ("cosine", "linear_decay"):
        warmup = int(a["warmup"])
        decay = int(a["decay_steps"]) if a.get("decay_steps") else max(total_steps - warmup, 1)
        peak, final = float(a["peak"]), float(a["final"])
        if lr.kind == "cosine":  # optax.warmup_cosine_decay_schedule
            alpha = 0.0 if peak == 0.0 else final / peak
            return _join(
                _linear(0.0 if warmup else peak, peak, warmup), _cosine(peak, decay, alpha), warmup
            )
        tail = _linear(peak, final, decay)
        if not warmup:
            return tail
        return _join(_linear(0.0, peak, warmup), tail, warmup)
    if lr.kind == "exponential":
        init, every, rate = float(a["initial"]), int(a["every"]), float(a["rate"])
        staircase = bool(a["staircase"])
        if every <= 0 or rate == 0.0:
            return init

        def exponential(count: tf.Tensor) -> tf.Tensor:
            c = tf.cast(count, tf.int32)
            p = _f(c) / float(every)
            if staircase:
                p = tf.floor(p)
            return tf.where(c <= 0, init, init * tf.pow(rate, p))

        return exponential
    if lr.kind == "piecewise":
        values = [float(v) for v in a["values"]]
        bounds = [int(b) for b in a["boundaries"]]
        scales = {b: values[i + 1] / values[i] if values[i] else 0.0 for i, b in enumerate(bounds)}
        if any(s < 0.0 for s in scales.values()):
            raise ValueError("the piecewise schedule expects non-negative scale factors")

        def piecewise(count: tf.Tensor) -> tf.Tensor:  # optax.piecewise_constant_schedule
            c = tf.cast(count, tf.int32)
            v = tf.constant(values[0], tf.float32)
            for boundary, scale in sorted(scales.items()):
                indicator = tf.maximum(0.0, _f(tf.sign(boundary - c)))
                v = v * indicator + (1.0 - indicator) * scale * v
            return v

        return piecewise
    raise ValueError(f"schedule {lr.kind} has no TensorFlow implementation")


ADAFACTOR_EPS = 1e-30
ADAFACTOR_MIN_SCALE = 1e-3
ADAFACTOR_MIN_DIM = 128


def _factored_dims(shape: list[int], factored: bool) -> tuple[int, int] | None:
    """optax's choice of the two axes of a factored second moment (second largest, largest),
    or None where Adafactor keeps a full one."""
    if not factored or len(shape) < 2:
        return None
    order = np.argsort(shape)
    if shape[order[-2]] < ADAFACTOR_MIN_DIM:
        return None
    return int(order[-2]), int(order[-1])


class Optimizer:
    """One update rule over a dict of variables by layer path, with its state as variables.

    `count` is the number of updates so far (optax's `count`); slots hold the moments, named
    `<param>/<slot>`. `apply` runs inside `tf.function`: it reads the grads (already clipped)
    and assigns the new params and state.
    """

    def __init__(self, train: dict[str, Any]) -> None:
        opt: CallValue = train["optimizer"]
        if opt.kind not in SLOTS:
            raise ValueError(f"optimizer {opt.kind} has no TensorFlow implementation yet")
        if int(train.get("accumulate", 1)) > 1:
            raise ValueError("gradient accumulation has no TensorFlow implementation yet")
        self.kind, self.args = opt.kind, dict(opt.args)
        self.lr = schedule(self.args["lr"], int(train["steps"]))
        self.count: tf.Variable | None = None
        self.slots: dict[str, dict[str, tf.Variable]] = {}

    def build(self, params: dict[str, tf.Variable]) -> None:
        """Create the state for these params: zero moments, and Adagrad's initial sums."""
        self.count = tf.Variable(0, dtype=tf.int32, trainable=False, name="opt/count")
        if self.kind == "adafactor":
            self._build_adafactor(params)
            return
        slots = [s for s in SLOTS[self.kind] if s != "trace" or self.args["momentum"]]
        init = float(self.args.get("initial_accumulator", 0.0))
        for slot in slots:
            fill = init if slot == "sum" else 0.0
            self.slots[slot] = {
                name: tf.Variable(
                    tf.fill(p.shape, tf.constant(fill, p.dtype)),
                    trainable=False,
                    name=f"opt/{name}/{slot}",
                )
                for name, p in params.items()
            }

    def _build_adafactor(self, params: dict[str, tf.Variable]) -> None:
        self.slots = {"v": {}, "v_row": {}, "v_col": {}}
        for name, p in params.items():
            shape = [int(d) for d in p.shape]
            dims = _factored_dims(shape, bool(self.args["factored"]))
            if dims is None:
                shapes = {"v": shape}
            else:
                d1, d0 = dims
                shapes = {
                    "v_row": shape[:d0] + shape[d0 + 1 :],
                    "v_col": shape[:d1] + shape[d1 + 1 :],
                }
            for slot, sh in shapes.items():
                self.slots[slot][name] = tf.Variable(
                    tf.zeros(sh, p.dtype), trainable=False, name=f"opt/{name}/{slot}"
                )

    def reset(self) -> None:
        """Back to the state `build` made (a fresh optax `init`)."""
        assert self.count is not None
        self.count.assign(0)
        init = float(self.args.get("initial_accumulator", 0.0))
        for slot, vs in self.slots.items():
            for v in vs.values():
                v.assign(tf.fill(v.shape, tf.constant(init if slot == "sum" else 0.0, v.dtype)))

    def lr_now(self) -> tf.Tensor:
        assert self.count is not None
        return _call(self.lr, self.count)

    def apply(self, grads: dict[str, tf.Tensor], params: dict[str, tf.Variable]) -> None:
        assert self.count is not None
        a = self.args
        count_inc = self.count + 1  # optax's safe_increment, short of int32 overflow
        step_size = -self.lr_now()
        for name, p in params.items():
            g = grads[name]
            if self.kind in ("adam", "sgd") and a["weight_decay"]:
                g = g + float(a["weight_decay"]) * p  # optax.add_decayed_weights, before
            if self.kind in ("adam", "adamw"):
                u = self._adam(name, g, count_inc)
                if self.kind == "adamw" and a["weight_decay"]:
                    u = u + float(a["weight_decay"]) * p
            elif self.kind == "sgd":
                u = self._trace(name, g) if a["momentum"] else g
            elif self.kind == "adafactor":
                u = self._adafactor(name, g, p)
            else:
                u = self._rss(name, g)
            p.assign_add(tf.cast(step_size, u.dtype) * u)
        self.count.assign(count_inc)

    def _adam(self, name: str, g: tf.Tensor, count: tf.Tensor) -> tf.Tensor:
        """optax.scale_by_adam (eps_root 0, no Nesterov)."""
        b1, b2, eps = float(self.args["beta1"]), float(self.args["beta2"]), float(self.args["eps"])
        mu_v, nu_v = self.slots["mu"][name], self.slots["nu"][name]
        mu = (1.0 - b1) * g + b1 * mu_v
        nu = (1.0 - b2) * tf.square(g) + b2 * nu_v
        c = _f(count)
        mu_hat = mu / (1.0 - tf.pow(b1, c))
        nu_hat = nu / (1.0 - tf.pow(b2, c))
        mu_v.assign(mu)
        nu_v.assign(nu)
        return mu_hat / (tf.sqrt(nu_hat) + eps)

    def _adafactor(self, name: str, g: tf.Tensor, p: tf.Tensor) -> tf.Tensor:
        """optax.adafactor as `seqc.backends.jax.optim` calls it: factored rms scaling (matrices
        whose two largest dims are at least 128), update clipping by block rms, then scaling by
        the param's rms (at least 1e-3); no momentum, no weight decay."""
        assert self.count is not None
        t = _f(self.count + 1)
        decay = 1.0 - tf.pow(t, -float(self.args["decay_rate"]))
        grad_sqr = tf.square(g) + ADAFACTOR_EPS
        dims = _factored_dims([int(d) for d in g.shape], bool(self.args["factored"]))
        if dims is None:
            v_var = self.slots["v"][name]
            v = decay * v_var + (1.0 - decay) * grad_sqr
            v_var.assign(v)
            u = g * tf.pow(v, -0.5)
        else:
            d1, d0 = dims
            row_var, col_var = self.slots["v_row"][name], self.slots["v_col"][name]
            v_row = decay * row_var + (1.0 - decay) * tf.reduce_mean(grad_sqr, axis=d0)
            v_col = decay * col_var + (1.0 - decay) * tf.reduce_mean(grad_sqr, axis=d1)
            row_var.assign(v_row)
            col_var.assign(v_col)
            reduced_d1 = d1 - 1 if d1 > d0 else d1
            row_col_mean = tf.reduce_mean(v_row, axis=reduced_d1, keepdims=True)
            row_factor = tf.pow(v_row / row_col_mean, -0.5)
            col_factor = tf.pow(v_col, -0.5)
            u = g * tf.expand_dims(row_factor, d0) * tf.expand_dims(col_factor, d1)
        threshold = self.args["clip_threshold"]
        if threshold is not None:  # optax.clip_by_block_rms
            rms = tf.sqrt(tf.reduce_mean(tf.square(u)))
            u = u / tf.maximum(1.0, rms / float(threshold))
        p_rms = tf.sqrt(tf.reduce_mean(tf.square(p)))  # optax.scale_by_param_block_rms
        return u * tf.where(p_rms <= ADAFACTOR_MIN_SCALE, ADAFACTOR_MIN_SCALE, p_rms)

    def _trace(self, name: str, g: tf.Tensor) -> tf.Tensor:
        """optax.trace: the velocity, or with Nesterov the gradient plus the decayed velocity."""
        decay = float(self.args["momentum"])
        t = self.slots["trace"][name]
        new = g + decay * t
        t.assign(new)
        return g + decay * new if self.args["nesterov"] else new

    def _rss(self, name: str, g: tf.Tensor) -> tf.Tensor:
        """optax.scale_by_rss: the gradient over the root of the summed squares."""
        s = self.slots["sum"][name]
        total = tf.square(g) + s
        s.assign(total)
        eps = float(self.args["eps"])
        return tf.where(total > 0, tf.math.rsqrt(total + eps), tf.zeros_like(total)) * g


def optimizer(train: dict[str, Any]) -> Optimizer:
    """The update rule of a resolved `train` block; clipping is the caller's, as on JAX."""
    return Optimizer(train)


def lr_at(train: dict[str, Any], step: int) -> float:
    lr = schedule(train["optimizer"].args["lr"], int(train["steps"]))
    value = float(lr(tf.constant(step, tf.int32))) if callable(lr) else lr
    return value if not math.isnan(value) else 0.0
