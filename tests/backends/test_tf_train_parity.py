"""Training on TensorFlow against training on JAX: same params, same batches, same steps.

Why: `seqc.backends.tf.optim` writes optax's update equations out in TF (not Keras' optimizers,
whose epsilon and bias correction differ), and `seqc.backends.tf.train` clips and steps as
`JaxModel` does; the forward pass is already checked in `test_tf_parity.py`. Here every host
schedule (`seqc.run.train.schedule`) gives optax's values; the JAX update rule with the host's
rate is optax's own optimizer; each of the first three steps of each optimizer, with clipping
active and a schedule, lands on the same params on both backends; Adafactor's factored moments
agree on their own; and 50 steps of a tiny LM follow the same loss curve.

Errors are normwise: max|tf - jax| / max|jax| per param, the worst over params.

The model's attention has no biases: the key bias adds the same q . b to every score of a query,
which softmax ignores, so its true gradient is zero and each backend's is roundoff; Adam and
Adagrad normalise that noise into steps of full size and random sign, on any two backends.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import optax
import pytest
import tensorflow as tf
from lowering_helpers import compile_spec
from parity_lm import SPEC, VOCAB, batches, models

from seqc.backends.jax.optim import direction
from seqc.backends.tf.optim import optimizer as tf_optimizer
from seqc.compiler.compile import CompiledTask
from seqc.compiler.config import TrainConfig
from seqc.resolve.values import CallValue
from seqc.run.train.schedule import learning_rate, schedule
from seqc.spec.kinds import REGISTRY


def call(namespace: str, kind: str, **args: Any) -> CallValue:
    """A kind call with the catalogue's defaults filled in, as resolve gives it."""
    spec = REGISTRY.get(namespace, kind)
    assert spec is not None, kind
    full = {p.name: p.default for p in spec.params if not p.required} | args
    return CallValue(kind=kind, namespace=namespace, args=full)


def train_config(**given: Any) -> TrainConfig:
    """A train block with the catalogue's defaults but for `given`, typed as backends read it."""
    return TrainConfig.of(call("block", "train", **given).args)


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> tuple[CompiledTask, dict]:
    """The tiny LM, compiled, and its train config."""
    spec = tmp_path_factory.mktemp("spec") / "lm.seq"
    spec.write_text(SPEC.format())
    compiled = compile_spec(spec, "tiny", symbols={"tiny.vocab_size": VOCAB})
    from seqc.resolve.experiment import resolve
    from seqc.resolve.program import load_program

    train = resolve(load_program(spec), "tiny", symbols={"tiny.vocab_size": VOCAB}).config["train"]
    return compiled, dict(train)


def param_error(want: dict, got: dict) -> float:
    worst = 0.0
    for name, a in want.items():
        a64, b64 = np.asarray(a, np.float64), np.asarray(got[name], np.float64)
        worst = max(worst, float(np.max(np.abs(a64 - b64)) / max(np.max(np.abs(a64)), 1e-6)))
    return worst


# ---------------------------------------------------------------------------- schedules

SCHEDULES = {
    "float": 0.01,
    "constant": call("schedule", "constant", value=0.02),
    "warmup_rsqrt": call("schedule", "warmup_rsqrt", peak=1e-2, warmup=4),
    "linear_warmup": call("schedule", "linear_warmup", peak=1e-2, warmup=5),
    "cosine": call("schedule", "cosine", peak=1e-2, final=1e-3),
    "cosine-warmup": call("schedule", "cosine", peak=1e-2, warmup=3, decay_steps=8, final=1e-3),
    "linear_decay": call("schedule", "linear_decay", peak=1e-2),
    "linear_decay-warmup": call("schedule", "linear_decay", peak=1e-2, warmup=4, final=1e-4),
    "exponential": call("schedule", "exponential", initial=1e-2, rate=0.5, every=3),
    "exponential-staircase": call(
        "schedule", "exponential", initial=1e-2, rate=0.5, every=3, staircase=True
    ),
    "piecewise": call("schedule", "piecewise", boundaries=[3, 7], values=[1e-2, 5e-3, 1e-3]),
}


def optax_schedule(lr: Any, total: int) -> Any:
    """The reference: optax's own schedule functions for each kind, as the catalogue documents
    them (warmup_rsqrt, which optax lacks, from its formula)."""
    if not isinstance(lr, CallValue):
        return optax.constant_schedule(float(lr))
    a = lr.args
    if lr.kind == "constant":
        return optax.constant_schedule(a["value"])
    if lr.kind == "warmup_rsqrt":
        peak, warmup = a["peak"], max(a["warmup"], 1)
        return lambda c: peak * np.minimum((c + 1) / warmup, np.sqrt(warmup / (c + 1)))
    if lr.kind == "linear_warmup":
        return optax.linear_schedule(0.0, a["peak"], max(a["warmup"], 1))
    warmup = a.get("warmup", 0)
    decay = a.get("decay_steps") or max(total - warmup, 1)
    if lr.kind == "cosine":
        init = 0.0 if warmup else a["peak"]
        return optax.warmup_cosine_decay_schedule(
            init, a["peak"], warmup, warmup + decay, a["final"]
        )
    if lr.kind == "linear_decay":
        tail = optax.linear_schedule(a["peak"], a["final"], decay)
        if not warmup:
            return tail
        return optax.join_schedules([optax.linear_schedule(0.0, a["peak"], warmup), tail], [warmup])
    if lr.kind == "exponential":
        return optax.exponential_decay(
            a["initial"], a["every"], a["rate"], staircase=a["staircase"]
        )
    values, bounds = a["values"], a["boundaries"]
    scales = {b: values[i + 1] / values[i] for i, b in enumerate(bounds)}
    return optax.piecewise_constant_schedule(values[0], scales)


@pytest.mark.parametrize("case", sorted(SCHEDULES))
def test_schedule_values_match_optax(case: str) -> None:
    lr, total = SCHEDULES[case], 12
    train = train_config(optimizer=call("optimizer", "sgd", lr=lr), steps=total)
    want_fn, got_fn = optax_schedule(lr, total), schedule(train.optimizer.lr, total)
    at = learning_rate(train)
    for step in range(total + 3):
        want = float(want_fn(jax.numpy.asarray(step, jax.numpy.int32)))
        assert abs(got_fn(step) - want) <= 1e-6 * max(abs(want), 1e-8), (step, got_fn(step), want)
        assert at(step) == got_fn(step)


def test_accumulation_counts_updates_not_steps() -> None:
    lr = SCHEDULES["linear_warmup"]
    train = train_config(optimizer=call("optimizer", "sgd", lr=lr), steps=20, accumulate=4)
    at, per_update = learning_rate(train), schedule(train.optimizer.lr, 20)
    assert [at(s) for s in range(8)] == [per_update(0)] * 4 + [per_update(1)] * 4


# ---------------------------------------------------------------------------- one step each

OPTIMIZERS = {
    "adam-warmup_rsqrt": call("optimizer", "adam", lr=SCHEDULES["warmup_rsqrt"]),
    "adam-l2-cosine": call("optimizer", "adam", lr=SCHEDULES["cosine-warmup"], weight_decay=1e-2),
    "adamw-linear_decay": call(
        "optimizer", "adamw", lr=SCHEDULES["linear_decay-warmup"], weight_decay=0.1
    ),
    "sgd-momentum-exponential": call("optimizer", "sgd", lr=SCHEDULES["exponential"], momentum=0.9),
    "sgd-nesterov-l2-piecewise": call(
        "optimizer",
        "sgd",
        lr=SCHEDULES["piecewise"],
        momentum=0.9,
        nesterov=True,
        weight_decay=1e-3,
    ),
    "sgd-plain-constant": call("optimizer", "sgd", lr=SCHEDULES["constant"]),
    "adagrad-linear_warmup": call("optimizer", "adagrad", lr=SCHEDULES["linear_warmup"]),
    "adafactor-warmup_rsqrt": call("optimizer", "adafactor", lr=SCHEDULES["warmup_rsqrt"]),
}


@pytest.mark.parametrize("case", sorted(OPTIMIZERS))
def test_optimizer_steps_match_jax(lm: tuple, case: str) -> None:
    """Three steps (so moments and schedule counts are past their first values), each compared:
    the gradient norm is above `clip_norm`, so clipping is active."""
    compiled, train = lm
    train = TrainConfig.of(train | {"optimizer": OPTIMIZERS[case], "steps": 10, "clip_norm": 0.5})
    jm, state, tm = models(compiled, train)
    rate = learning_rate(train)
    for step, batch in enumerate(batches(3, seed=1)):
        state, jmet = jm.train_step(state, batch, rate(step))
        _, tmet = tm.train_step(tm.state, batch, rate(step))
        assert float(jmet["grad_norm"]) > 0.5
        np.testing.assert_allclose(float(tmet["grad_norm"]), float(jmet["grad_norm"]), rtol=1e-5)
        error = param_error(state["params"], tm.numpy_params())
        assert error <= 1e-5, f"{case}: {error:.2e}"
    assert int(tm.step.numpy()) == int(state["step"]) == 3


def optax_optimizer(opt: CallValue, total: int) -> optax.GradientTransformation:
    """The reference: optax's own optimizer of each kind, with optax's schedule."""
    a, lr = opt.args, optax_schedule(opt.args["lr"], total)
    if opt.kind == "adam":
        parts = [optax.add_decayed_weights(a["weight_decay"])] if a["weight_decay"] else []
        return optax.chain(*parts, optax.adam(lr, a["beta1"], a["beta2"], a["eps"]))
    if opt.kind == "adamw":
        return optax.adamw(lr, a["beta1"], a["beta2"], a["eps"], weight_decay=a["weight_decay"])
    if opt.kind == "sgd":
        parts = [optax.add_decayed_weights(a["weight_decay"])] if a["weight_decay"] else []
        momentum = a["momentum"] or None
        return optax.chain(*parts, optax.sgd(lr, momentum=momentum, nesterov=a["nesterov"]))
    if opt.kind == "adagrad":
        return optax.adagrad(lr, initial_accumulator_value=a["initial_accumulator"], eps=a["eps"])
    return optax.adafactor(
        lr,
        decay_rate=a["decay_rate"],
        clipping_threshold=a["clip_threshold"],
        factored=bool(a["factored"]),
    )


ADAFACTOR_SHAPES = {
    "w": (130, 128),
    "w2": (128, 200),
    "cube": (2, 128, 129),
    "b": (128,),
    "s": (3, 4),
}


@pytest.mark.parametrize(
    "case", [*sorted(OPTIMIZERS), "adafactor-factored-cosine", "adafactor-unfactored-cosine"]
)
def test_update_rule_with_host_rate_is_optax(case: str) -> None:
    """`direction` and the host's rate, applied as the JAX step does, against optax's own
    optimizer with optax's schedule: five updates of random gradients (Adafactor's cases on
    shapes that factor both ways round, and that do not)."""
    if case.startswith("adafactor-") and case.endswith("-cosine"):
        factored = "unfactored" not in case
        opt = call("optimizer", "adafactor", lr=SCHEDULES["cosine"], factored=factored)
    else:
        opt = OPTIMIZERS[case]
    train = train_config(optimizer=opt, steps=12)
    rng = np.random.default_rng(0)
    params = {k: rng.normal(0.0, 0.5, s).astype(np.float32) for k, s in ADAFACTOR_SHAPES.items()}
    ref, ref_state = optax_optimizer(opt, 12), None
    ours, rate = direction(train), learning_rate(train)
    want = {k: jax.numpy.asarray(v) for k, v in params.items()}
    got = dict(want)
    ref_state, state = ref.init(want), ours.init(got)
    for step in range(5):
        grads = {
            k: jax.numpy.asarray(rng.normal(0.0, 1e-2, s).astype(np.float32))
            for k, s in ADAFACTOR_SHAPES.items()
        }
        updates, ref_state = ref.update(grads, ref_state, want)
        want = {k: want[k] + updates[k] for k in want}
        d, state = ours.update(grads, state, got)
        got = {k: got[k] + jax.numpy.asarray(-rate(step), np.float32) * d[k] for k in got}
        error = param_error(want, got)
        assert error <= 1e-6, f"{case} step {step}: {error:.2e}"


@pytest.mark.parametrize("factored", [True, False])
def test_adafactor_matches_optax_on_factored_shapes(factored: bool) -> None:
    """The tiny LM has no dim of 128, so Adafactor's factored moments are checked on the
    optimizer alone: params of shapes that factor (both ways round) and that do not, fed the
    same random gradients for three updates, on TF and in optax."""
    opt = call("optimizer", "adafactor", lr=SCHEDULES["cosine"], factored=factored)
    train = train_config(optimizer=opt, steps=12)
    rng = np.random.default_rng(0)
    params = {k: rng.normal(0.0, 0.5, s).astype(np.float32) for k, s in ADAFACTOR_SHAPES.items()}
    tx, rate = optax_optimizer(opt, 12), learning_rate(train)
    jax_params = {k: jax.numpy.asarray(v) for k, v in params.items()}
    state = tx.init(jax_params)
    tf_params = {k: tf.Variable(v) for k, v in params.items()}
    tf_opt = tf_optimizer(train)
    tf_opt.build(tf_params)
    assert set(tf_opt.slots["v_row"]) == ({"w", "w2", "cube"} if factored else set())
    for step in range(3):
        grads = {
            k: rng.normal(0.0, 1e-2, s).astype(np.float32) for k, s in ADAFACTOR_SHAPES.items()
        }
        updates, state = tx.update(
            {k: jax.numpy.asarray(g) for k, g in grads.items()}, state, jax_params
        )
        jax_params = {k: jax_params[k] + updates[k] for k in ADAFACTOR_SHAPES}
        lr = tf.constant(rate(step), tf.float32)
        tf_opt.apply({k: tf.constant(g) for k, g in grads.items()}, tf_params, lr)
        error = param_error(jax_params, {k: v.numpy() for k, v in tf_params.items()})
        assert error <= 1e-5, f"{error:.2e}"


# ---------------------------------------------------------------------------- a training run


def curves(compiled: CompiledTask, train: dict, steps: int = 50) -> tuple:
    """Adam with a warm-up schedule on both backends from the same params over the same
    batches: (JAX losses, TF losses, JAX model, its state, TF model, the batches)."""
    opt = call("optimizer", "adam", lr=call("schedule", "warmup_rsqrt", peak=1e-2, warmup=10))
    train = TrainConfig.of(train | {"optimizer": opt, "steps": steps, "clip_norm": 0.5})
    jm, state, tm = models(compiled, train)
    rate = learning_rate(train)
    data = batches(5, seed=2)
    jax_curve, tf_curve = [], []
    for step in range(steps):
        batch = data[step % len(data)]
        state, jmet = jm.train_step(state, batch, rate(step))
        jax_curve.append(float(jmet["loss"]))
        tf_curve.append(float(tm.train_step(tm.state, batch, rate(step))[1]["loss"]))
    return jax_curve, tf_curve, jm, state, tm, data


def test_loss_curves_match_over_50_steps(lm: tuple) -> None:
    jax_curve, tf_curve, jm, state, tm, data = curves(*lm)
    np.testing.assert_allclose(tf_curve, jax_curve, rtol=1e-2)
    assert np.mean(jax_curve[-5:]) < 0.7 * np.mean(jax_curve[:5])  # it learns
    for batch in data[:2]:
        want, got = jm.eval_step(state["params"], batch), tm.eval_step(tm.params, batch)
        for key in ("loss", "nll_sum", "tokens", "correct"):
            np.testing.assert_allclose(float(got[key]), float(want[key]), rtol=1e-2)
