"""The `fuse_loss` pass (`seqc.compiler.lower.fused_loss`): the output layer and the
cross-entropy as one chunked op give the unfused criterion's loss, metrics and gradients, on
JAX and TF, for a tied table and a [d, vocab] matrix with a bias, with label smoothing, padding
and chunks that do not divide the positions."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from lowering_helpers import compile_spec

from seqc.backends.jax.linear_ce import linear_cross_entropy as jax_fused
from seqc.compiler.config import TrainConfig
from seqc.compiler.lower.fused_loss import OP, chunking, rows_per_chunk
from seqc.compiler.lower.sampled import HIDDEN
from seqc.resolve.experiment import resolve
from seqc.resolve.program import load_program

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LM = EXAMPLES / "lm" / "shakespeare.seq"
QUICK = "lm.shakespeare.quick"
COTANGENT = np.array([0.7, 0.3], np.float32)
"""The two outputs' cotangents: the criterion's and the plain NLL's, both differentiated."""


def _case(vocab_axis: int, bias: bool, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    rows, cols, d, vocab = 3, 7, 5, 11
    mask = np.ones((rows, cols), np.float32)
    mask[1, 4:] = 0.0  # padding
    return {
        "h": rng.normal(size=(rows, cols, d)).astype(np.float32),
        "w": (rng.normal(size=(vocab, d) if vocab_axis == 0 else (d, vocab)) * 0.5).astype(
            np.float32
        ),
        "bias": rng.normal(size=(vocab,)).astype(np.float32) if bias else None,
        "labels": rng.integers(0, vocab, (rows, cols)).astype(np.int32),
        "weights": mask,
    }


def _reference(c: dict, vocab_axis: int, smoothing: float) -> tuple[np.ndarray, dict]:
    """The unfused criterion in plain JAX: sums and the gradients of cotangent . sums."""

    def sums(h: jax.Array, w: jax.Array, bias: jax.Array | None, weights: jax.Array) -> jax.Array:
        z = h @ (w.T if vocab_axis == 0 else w)
        if bias is not None:
            z = z + bias
        logp = jax.nn.log_softmax(z, -1)
        nll = -jnp.take_along_axis(logp, c["labels"][..., None], -1)[..., 0]
        loss = (1 - smoothing) * nll - smoothing * logp.mean(-1)
        return jnp.stack([jnp.sum(weights * loss), jnp.sum(weights * nll)])

    return _value_and_grads(sums, c)


def _value_and_grads(fn: object, c: dict) -> tuple[np.ndarray, dict]:
    args = (c["h"], c["w"], c["bias"], c["weights"])
    value, vjp = jax.vjp(fn, *args)
    grads = vjp(jnp.asarray(COTANGENT))
    names = ("h", "w", "bias", "weights")
    pairs = zip(names, grads, strict=True)
    return np.asarray(value), {n: np.asarray(g) for n, g in pairs if g is not None}


def _close(got: tuple[np.ndarray, dict], want: tuple[np.ndarray, dict]) -> None:
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
    assert set(got[1]) == set(want[1])
    for name, g in want[1].items():
        np.testing.assert_allclose(got[1][name], g, rtol=1e-4, atol=1e-5, err_msg=name)


CASES = [(0, False, 0.0), (1, True, 0.0), (0, False, 0.1), (1, True, 0.1)]
"""(vocab_axis, bias, label smoothing): a tied table, and a layer's own matrix with a bias."""


@pytest.mark.parametrize(("vocab_axis", "bias", "smoothing"), CASES)
@pytest.mark.parametrize("rows", [6, 1000])  # 4 chunks of [3, 2], the last padded; one chunk
def test_jax_op_gives_the_unfused_sums_and_gradients(
    vocab_axis: int, bias: bool, smoothing: float, rows: int
) -> None:
    c = _case(vocab_axis, bias)

    def fused(h: jax.Array, w: jax.Array, b: jax.Array | None, weights: jax.Array) -> jax.Array:
        kw = {"vocab_axis": vocab_axis, "smoothing": smoothing, "rows": rows}
        return jax_fused(h, w, b, jnp.asarray(c["labels"]), weights, **kw)

    want = _reference(c, vocab_axis, smoothing)
    _close(_value_and_grads(fused, c), want)
    # undifferentiated, the scan computes the sums alone: the same numbers
    np.testing.assert_allclose(
        np.asarray(jax.jit(fused)(c["h"], c["w"], c["bias"], c["weights"])), want[0], rtol=1e-5
    )


@pytest.mark.parametrize(("vocab_axis", "bias", "smoothing"), CASES)
@pytest.mark.parametrize("static", [True, False])
def test_tf_op_gives_the_unfused_sums_and_gradients(
    vocab_axis: int, bias: bool, smoothing: float, static: bool
) -> None:
    """Chunks unrolled when the shape is static; one chunk when a `tf.function` is traced for
    any shape."""
    import tensorflow as tf

    from seqc.backends.tf.linear_ce import linear_cross_entropy as tf_fused

    c = _case(vocab_axis, bias, seed=1)
    names = [n for n in ("h", "w", "bias", "weights") if c[n] is not None]

    def run(*xs: tf.Tensor) -> tuple[tf.Tensor, list[tf.Tensor]]:
        given = dict(zip(names, xs, strict=True))
        with tf.GradientTape() as tape:
            tape.watch(xs)
            sums = tf_fused(
                given["h"],
                given["w"],
                given.get("bias"),
                tf.constant(c["labels"]),
                given["weights"],
                vocab_axis=vocab_axis,
                smoothing=smoothing,
                rows=6,
            )
            objective = tf.reduce_sum(sums * COTANGENT)
        return sums, tape.gradient(objective, list(xs))

    args = [tf.constant(c[n]) for n in names]
    if static:
        step = tf.function(run, autograph=False)
    else:
        dynamic = {"h": [None, None, args[0].shape[-1]], "weights": [None, None]}
        spec = [tf.TensorSpec(dynamic.get(n, a.shape)) for n, a in zip(names, args, strict=True)]
        step = tf.function(run, autograph=False, input_signature=spec)
    sums, grads = step(*args)
    got = (sums.numpy(), {n: g.numpy() for n, g in zip(names, grads, strict=True)})
    _close(got, _reference(c, vocab_axis, smoothing))


def test_chunks_keep_the_leading_axes_whole_and_cover_the_last() -> None:
    assert chunking((32, 128), 256) == (32, 8, 16)
    assert chunking((3, 7), 6) == (3, 2, 4)  # 4 x 2 = 8 >= 7: one padded position
    assert chunking((1000,), 256) == (1, 256, 4)
    assert chunking((1, 1000), 1, max_chunks=32) == (1, 32, 32)  # capped: chunks grow
    assert rows_per_chunk(4000) == 1048 and rows_per_chunk(100_000) == 256


def test_the_task_trains_the_model_up_to_the_output_layer_and_the_fused_criterion() -> None:
    task = compile_spec(LM, QUICK)
    head = task.graph.head
    assert head is not None
    trained = task.training_graph  # after the graph passes too, which renumber its values
    (out,) = trained.outputs
    assert trained.ops[out].type == task.graph.ops[head.hidden].type
    assert not [op for op in trained.ops if op.layer == head.layer]
    assert [op.kind for op in task.train_criterion.ops].count(OP) == 1
    assert HIDDEN in task.train_criterion.inputs
    assert task.pass_reports[0].name == "fuse_loss"
    assert task.pass_reports[0].kinds_after[OP] == 1
    # evaluation, decoding and exports keep the logits and the unfused criterion
    assert OP not in {op.kind for op in task.eval_criterion.ops}
    # a placed run trains what its plan names: the lowered graph and criterion
    placed = task.without_passes()
    assert placed.training_graph is task.graph
    assert OP not in {op.kind for op in placed.train_criterion.ops}
    off = compile_spec(LM, QUICK, ['compile.passes=["fuse_matmul"]'])
    assert OP not in {op.kind for op in off.train_criterion.ops}
    logits = off.training_graph.ops[off.training_graph.outputs[0]]
    assert logits.layer == head.layer and logits.type == task.graph.ops[head.logits].type


SMALL = ["lm.model.layers=1", "lm.model.d=32", "lm.input.tokenizer.vocab_size=64"]
"""The quick LM made small: a step's programs compile in a fraction of the time, and the tied
table, the blocks and the output layer are all still there."""

LOSSES = [
    "cross_entropy(label_smoothing = 0.0)",
    'cross_entropy(label_smoothing = 0.1, reduction = "sequence")',
]


@pytest.mark.parametrize(("backend_name", "loss"), [("jax", LOSSES[1]), ("tf", LOSSES[0])])
def test_a_training_step_is_the_unfused_one(backend_name: str, loss: str) -> None:
    """One step from the same params: the same loss, NLL and tokens, and the same params after
    (the gradients of the tied table reach it through the embedding and the output layer).
    One loss each (the other backend's op tests cover smoothing too; CI time is counted).
    Plain SGD, so that the params moved are the gradients (Adam's first step is their sign,
    which a key bias's gradient, zero but for rounding, would make noise of)."""
    from seqc.backends.registry import backend

    overrides = [f"lm.loss={loss}", "train.optimizer=sgd(lr = 0.1)", *SMALL]
    fused = compile_spec(LM, QUICK, overrides)
    plain = compile_spec(LM, QUICK, [*overrides, 'compile.passes=["fuse_matmul", "cse", "dce"]'])
    assert OP in {op.kind for op in fused.train_criterion.ops}
    assert OP not in {op.kind for op in plain.train_criterion.ops}
    train = TrainConfig.of(resolve(load_program(LM), QUICK, overrides).config["train"])
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 50, (3, 11)).astype(np.int32)
    mask = np.ones((3, 10), bool)
    mask[2, 6:] = False
    batch = SimpleNamespace(arrays={"inputs": ids[:, :-1], "targets": ids[:, 1:], "mask": mask})
    engine = backend(backend_name)
    results = []
    for task in (plain, fused):
        model = engine.model(task, train)
        state, metrics = model.train_step(model.init(0), batch, 0.1)
        params = {k: np.asarray(v) for k, v in state["params"].items()}
        results.append(({k: float(v) for k, v in metrics.items()}, params))
    (want, want_params), (got, got_params) = results
    for name in ("loss", "nll_sum", "tokens"):
        assert got[name] == pytest.approx(want[name], rel=1e-5), name
    for name, value in want_params.items():
        np.testing.assert_allclose(got_params[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
