"""The update rules of a `train` block (`seqc.compiler.config`) on `tf.Variable`s, as optax
computes them.

Why a port of optax rather than Keras' optimizers: from the same params the TF backend must take
the same steps as the JAX backend (the parity tests check it to float32 roundoff), and Keras'
update equations differ (Adam's epsilon inside the bias correction, steps counted from 1), so
the same hyperparameters would train another model. Each rule below names the optax
transformation it mirrors; keep them in step with `seqc.backends.jax.optim`.

As on JAX, the rule stops short of the learning rate: `apply` takes the rate the host computed
for this step (`seqc.run.train.schedule`), so schedules exist once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from seqc.backends.tf import lazy_rows
from seqc.compiler.config import Adafactor, Adagrad, Adam, AdamW, OptimizerConfig, Sgd, TrainConfig
from seqc.spec.errors import CheckError

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

    def __init__(self, train: TrainConfig) -> None:
        opt = train.optimizer
        if opt.kind not in SLOTS:
            raise CheckError(
                f"optimizer `{opt.kind}` has no TensorFlow implementation yet",
                code="not-implemented",
                expected=", ".join(SLOTS),
                found=opt.kind,
                hint="train on JAX (--backend jax), or choose another optimizer",
            )
        if train.accumulate > 1:
            raise CheckError(
                "gradient accumulation has no TensorFlow implementation yet",
                code="not-implemented",
                hint="train on JAX (--backend jax), or set train.accumulate = 1",
            )
        self.opt: OptimizerConfig = opt
        self.kind = opt.kind
        self.count: tf.Variable | None = None
        self.slots: dict[str, dict[str, tf.Variable]] = {}

    def build(self, params: dict[str, tf.Variable]) -> None:
        """Create the state for these params: zero moments, and Adagrad's initial sums."""
        self.count = tf.Variable(0, dtype=tf.int32, trainable=False, name="opt/count")
        if self.kind == "adafactor":
            self._build_adafactor(params)
            return
        velocity = isinstance(self.opt, Sgd) and bool(self.opt.momentum)
        slots = [s for s in SLOTS[self.kind] if s != "trace" or velocity]
        for slot in slots:
            self.slots[slot] = {
                name: tf.Variable(
                    tf.fill(p.shape, tf.constant(self._initial(slot), p.dtype)),
                    trainable=False,
                    name=f"opt/{name}/{slot}",
                )
                for name, p in params.items()
            }

    def _initial(self, slot: str) -> float:
        """A slot's value before the first update: Adagrad's sums start at its initial
        accumulator (optax's `initial_accumulator_value`), every moment at zero."""
        if slot == "sum" and isinstance(self.opt, Adagrad):
            return self.opt.initial_accumulator
        return 0.0

    def _build_adafactor(self, params: dict[str, tf.Variable]) -> None:
        assert isinstance(self.opt, Adafactor)
        self.slots = {"v": {}, "v_row": {}, "v_col": {}}
        for name, p in params.items():
            shape = [int(d) for d in p.shape]
            dims = _factored_dims(shape, self.opt.factored)
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
        for slot, vs in self.slots.items():
            for v in vs.values():
                v.assign(tf.fill(v.shape, tf.constant(self._initial(slot), v.dtype)))

    def apply(
        self,
        grads: dict[str, tf.Tensor],
        params: dict[str, tf.Variable],
        lr: tf.Tensor,
        rows: lazy_rows.Rows | None = None,
        axes: Mapping[str, int] | None = None,
    ) -> None:
        """One update at rate `lr` (optax.scale_by_learning_rate: params - lr * direction).

        Under `adam(lazy_rows = true)`, `rows` holds the row-sparse params' gathered rows
        (`seqc.backends.tf.lazy_rows`), updated along `axes[name]`; `grads` the others'."""
        assert self.count is not None
        opt = self.opt
        count_inc = self.count + 1  # optax's safe_increment, short of int32 overflow
        step_size = -lr
        for name, (ids, g) in (rows or {}).items():
            self._lazy_adam(name, params[name], ids, g, (axes or {})[name], count_inc, step_size)
        for name, p in params.items():
            if rows and name in rows:
                continue
            g = grads[name]
            if isinstance(opt, Adam | Sgd) and opt.weight_decay:
                g = g + opt.weight_decay * p  # optax.add_decayed_weights, before
            if isinstance(opt, Adam | AdamW):
                u = self._adam(name, g, count_inc)
                if isinstance(opt, AdamW) and opt.weight_decay:
                    u = u + opt.weight_decay * p
            elif isinstance(opt, Sgd):
                u = self._trace(name, g) if opt.momentum else g
            elif isinstance(opt, Adafactor):
                u = self._adafactor(name, g, p)
            else:
                u = self._rss(name, g)
            p.assign_add(tf.cast(step_size, u.dtype) * u)
        self.count.assign(count_inc)

    def _adam(self, name: str, g: tf.Tensor, count: tf.Tensor) -> tf.Tensor:
        """optax.scale_by_adam (eps_root 0, no Nesterov)."""
        mu_v, nu_v = self.slots["mu"][name], self.slots["nu"][name]
        u, mu, nu = self._adam_rule(g, mu_v, nu_v, count)
        mu_v.assign(mu)
        nu_v.assign(nu)
        return u

    def _adam_rule(self, g: tf.Tensor, mu: Any, nu: Any, count: tf.Tensor) -> tuple:
        """Adam's direction and new moments, for whole params or for rows of them."""
        assert isinstance(self.opt, Adam | AdamW)
        b1, b2, eps = self.opt.beta1, self.opt.beta2, self.opt.eps
        mu = (1.0 - b1) * g + b1 * mu
        nu = (1.0 - b2) * tf.square(g) + b2 * nu
        c = _f(count)
        mu_hat = mu / (1.0 - tf.pow(b1, c))
        nu_hat = nu / (1.0 - tf.pow(b2, c))
        return mu_hat / (tf.sqrt(nu_hat) + eps), mu, nu

    def _lazy_adam(
        self,
        name: str,
        p: tf.Variable,
        ids: tf.Tensor,
        g: tf.Tensor,
        axis: int,
        count: tf.Tensor,
        step_size: tf.Tensor,
    ) -> None:
        """Adam on the rows `ids` of one param and its moments; other rows are left as they
        are (TF's LazyAdam, `seqc.backends.jax.lazy_rows.LazyAdam` on JAX)."""
        mu_v, nu_v = self.slots["mu"][name], self.slots["nu"][name]
        rows = lazy_rows.take(p, ids, axis)
        assert isinstance(self.opt, Adam)  # lazy rows are Adam's (`adam(lazy_rows = true)`)
        if self.opt.weight_decay:
            g = g + self.opt.weight_decay * rows
        u, mu, nu = self._adam_rule(
            g, lazy_rows.take(mu_v, ids, axis), lazy_rows.take(nu_v, ids, axis), count
        )
        lazy_rows.put(p, ids, axis, rows + tf.cast(step_size, u.dtype) * u)
        lazy_rows.put(mu_v, ids, axis, mu)
        lazy_rows.put(nu_v, ids, axis, nu)

    def _adafactor(self, name: str, g: tf.Tensor, p: tf.Tensor) -> tf.Tensor:
        """optax.adafactor as `seqc.backends.jax.optim` calls it: factored rms scaling (matrices
        whose two largest dims are at least 128), update clipping by block rms, then scaling by
        the param's rms (at least 1e-3); no momentum, no weight decay."""
        assert self.count is not None and isinstance(self.opt, Adafactor)
        t = _f(self.count + 1)
        decay = 1.0 - tf.pow(t, -self.opt.decay_rate)
        grad_sqr = tf.square(g) + ADAFACTOR_EPS
        dims = _factored_dims([int(d) for d in g.shape], self.opt.factored)
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
        threshold = self.opt.clip_threshold
        if threshold is not None:  # optax.clip_by_block_rms
            rms = tf.sqrt(tf.reduce_mean(tf.square(u)))
            u = u / tf.maximum(1.0, rms / threshold)
        p_rms = tf.sqrt(tf.reduce_mean(tf.square(p)))  # optax.scale_by_param_block_rms
        return u * tf.where(p_rms <= ADAFACTOR_MIN_SCALE, ADAFACTOR_MIN_SCALE, p_rms)

    def _trace(self, name: str, g: tf.Tensor) -> tf.Tensor:
        """optax.trace: the velocity, or with Nesterov the gradient plus the decayed velocity."""
        assert isinstance(self.opt, Sgd)
        decay = self.opt.momentum
        t = self.slots["trace"][name]
        new = g + decay * t
        t.assign(new)
        return g + decay * new if self.opt.nesterov else new

    def _rss(self, name: str, g: tf.Tensor) -> tf.Tensor:
        """optax.scale_by_rss: the gradient over the root of the summed squares."""
        s = self.slots["sum"][name]
        total = tf.square(g) + s
        s.assign(total)
        assert isinstance(self.opt, Adagrad)
        eps = self.opt.eps
        return tf.where(total > 0, tf.math.rsqrt(total + eps), tf.zeros_like(total)) * g


def optimizer(train: TrainConfig) -> Optimizer:
    """The update rule of a `train` block; clipping is the caller's, as on JAX."""
    return Optimizer(train)
