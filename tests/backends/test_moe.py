"""Mixture of experts in numbers: the training form's einsum dispatch against GShard written
token by token in float64 numpy (routing, capacity, drops, gates, the load-balancing and z
losses, the figures), the inference form against the training form where no expert overflows,
JAX = TF on the training form (one trace over two lengths: the capacity is a dim sized when
the step runs), and the auxiliary losses in the task's loss on both backends, step by step.

The inference form on every backend (TF, ONNX) is a case of `test_tf_parity.LAYERS`; the expert
axis on several devices is `tests/processes/test_moe_mesh.py`."""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf
from lowering_helpers import ACT, assert_close, compile_spec, layer_args, params_of, randn
from parity_lm import batches, models
from tiny_specs import MOE_LM_SPEC

from seqc.backends.jax.ops import Ctx, run_graph
from seqc.backends.jax.train import JaxModel
from seqc.backends.tf.context import Ctx as TfCtx
from seqc.backends.tf.ops import run_graph as tf_run_graph
from seqc.compiler.graph import Graph, GraphBuilder, TensorType
from seqc.compiler.lower import LOWERINGS
from seqc.compiler.lower.call import LayerCall

D, FF = 8, 12


def moe_graph(training: bool, mask: bool = False, **args: object) -> Graph:
    """One `MoE` layer at path `l` over x [B, T, 8] (and a mask); in the training form its
    outputs are y, the weighted auxiliary loss, the dropped fraction and the loads."""
    b = GraphBuilder(training_form=training)
    b.layer = "l"
    x = b.input("x", TensorType("float32", ("B", "T", D)))
    kwargs = {"mask": b.input("mask", TensorType("bool", ("B", "T")))} if mask else {}
    call = LayerCall("MoE", "l", layer_args("MoE", d=D, ff=FF, **args), [x], kwargs)
    y = LOWERINGS["MoE"](b, call)
    terms = b.graph.experts[0]
    b.graph.outputs = [y] + ([terms.aux_loss, terms.dropped, terms.load] if training else [])
    return b.graph


def reference(
    x: np.ndarray,
    p: dict[str, np.ndarray],
    mask: np.ndarray | None,
    *,
    experts: int,
    top_k: int,
    capacity_factor: float,
    aux_loss: float,
    router_z_loss: float,
) -> tuple[np.ndarray, float, float, np.ndarray]:
    """GShard's layer, one token at a time: each row a group, each expert ceil(cf * k * T / E)
    slots taken in token order, a token past them dropped from that expert."""
    p = {k.removeprefix("l."): v.astype(np.float64) for k, v in p.items()}
    x = x.astype(np.float64)
    rows, length, _ = x.shape
    real = np.ones((rows, length)) if mask is None else mask.astype(np.float64)
    logits = x @ p["router.w"]
    z = logits - logits.max(-1, keepdims=True)
    probs = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    slots = math.ceil(capacity_factor * top_k * length / experts - 1e-12)
    y = np.zeros_like(x)
    assigned = kept = 0
    load = np.zeros(experts)
    first = np.zeros_like(probs)
    for r in range(rows):
        taken = np.zeros(experts, int)
        for t in range(length):
            picks = list(np.argsort(-probs[r, t], kind="stable")[:top_k])
            first[r, t, picks[0]] = 1.0
            gates = probs[r, t, picks] / (probs[r, t, picks].sum() if top_k > 1 else 1.0)
            if not real[r, t]:
                continue
            for e, g in zip(picks, gates, strict=True):
                assigned += 1
                load[e] += 1
                if taken[e] < slots:
                    h = x[r, t] @ p["w1"][e] + p["b1"][e]
                    h = ACT["gelu"](h)  # the exact (erf) form, as seqc's
                    y[r, t] += g * (h @ p["w2"][e] + p["b2"][e])
                    kept += 1
                taken[e] += 1
    count = real.sum()
    f = (first * real[..., None]).sum((0, 1)) / count
    mean_p = (probs * real[..., None]).sum((0, 1)) / count
    lse = np.log(np.exp(z).sum(-1)) + logits.max(-1)
    aux = aux_loss * experts * float((f * mean_p).sum()) + router_z_loss * float(
        (lse**2 * real).sum() / count
    )
    return y, aux, 1.0 - kept / assigned, load / assigned


@pytest.mark.parametrize(
    ("top_k", "capacity_factor", "masked"),
    [(2, 1.0, False), (2, 0.75, True), (1, 1.25, False), (3, 0.75, True)],
)
def test_dispatch_is_gshard_token_by_token(
    top_k: int, capacity_factor: float, masked: bool
) -> None:
    args = {"experts": 4, "top_k": top_k, "capacity_factor": capacity_factor}
    args |= {"aux_loss": 0.05, "router_z_loss": 0.01}
    graph = moe_graph(True, mask=masked, **args)
    params = params_of(graph, seed=top_k)
    rng = np.random.default_rng(7)
    x = randn(rng, 3, 10, D)
    mask = np.arange(10)[None, :] < np.array([10, 6, 8])[:, None] if masked else None
    feeds = {"x": x} | ({"mask": mask} if masked else {})
    y, aux, dropped, load = (
        np.asarray(v, np.float64)
        for v in jax.jit(lambda p, f: run_graph(graph, p, f, Ctx(rng=None, training=True)))(
            params, feeds
        )
    )
    want_y, want_aux, want_dropped, want_load = reference(x, params, mask, **args)
    assert want_dropped > 0.05  # the case drops tokens: capacity is exercised
    assert_close(y, want_y)
    assert aux == pytest.approx(want_aux, rel=1e-5)
    assert dropped == pytest.approx(want_dropped, abs=1e-6)
    assert_close(load, want_load)


def jitted(graph: Graph, training: bool) -> Callable[[dict, dict], list]:
    """The graph's forward pass as one jitted program (op by op, each op compiles on its own)."""
    return jax.jit(lambda p, f: run_graph(graph, p, f, Ctx(rng=None, training=training)))


def test_inference_form_is_the_training_form_without_drops() -> None:
    """With a capacity factor of E / top_k every token finds a slot: the forms agree."""
    rng = np.random.default_rng(3)
    x = randn(rng, 2, 9, D)
    for top_k in (1, 2):
        args = {"experts": 4, "top_k": top_k, "capacity_factor": 4 / top_k}
        inference, training = moe_graph(False, **args), moe_graph(True, **args)
        params = params_of(training)
        assert set(params) == set(inference.params)
        a = np.asarray(jitted(inference, False)(params, {"x": x})[0], np.float64)
        b, _, dropped, _ = jitted(training, True)(params, {"x": x})
        assert float(dropped) == 0.0
        assert_close(np.asarray(b, np.float64), a, rtol=1e-6)


def test_tf_runs_the_training_form_as_jax_at_any_length() -> None:
    """One TF trace with B and T unknown: the capacity is a tensor there, an int in JAX."""
    graph = moe_graph(True, mask=True, experts=4, top_k=2, capacity_factor=1.0)
    params = params_of(graph)
    tf_params = {k: tf.constant(v) for k, v in params.items()}
    signature = {
        "x": tf.TensorSpec([None, None, D], tf.float32),
        "mask": tf.TensorSpec([None, None], tf.bool),
    }

    @tf.function(input_signature=[signature], autograph=False)
    def forward(xs: dict) -> list[tf.Tensor]:
        return tf_run_graph(graph, tf_params, xs, TfCtx(training=True))

    rng = np.random.default_rng(5)
    for rows, length in ((3, 7), (2, 12)):
        feeds = {"x": randn(rng, rows, length, D), "mask": rng.random((rows, length)) < 0.8}
        want = jitted(graph, True)(params, feeds)
        got = forward(feeds)
        for g, w in zip(got, want, strict=True):
            assert_close(np.asarray(g, np.float64), np.asarray(w, np.float64))


@pytest.fixture(scope="module")
def moe_lm(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    spec = tmp_path_factory.mktemp("moe") / "lm.seq"
    spec.write_text(MOE_LM_SPEC)
    return spec, compile_spec(spec, "tiny")


def test_jax_and_tf_train_alike_with_the_auxiliary_losses(moe_lm: tuple) -> None:
    """Three steps on both backends from the same params: the loss (with the experts' losses in
    it), each layer's figures and the params after each step agree."""
    _, task = moe_lm
    jm, state, tm = models(task, task.train)
    for step, batch in enumerate(batches(3, seed=1)):
        state, jmet = jm.train_step(state, batch, 1e-2)
        _, tmet = tm.train_step(tm.state, batch, 1e-2)
        assert set(jmet) >= {f"moe.blocks.{i}.mlp.{f}" for i in (0, 1) for f in ("dropped",)}
        for k, v in jmet.items():
            np.testing.assert_allclose(np.asarray(tmet[k]), np.asarray(v), rtol=2e-5, atol=1e-6)
        got, want = tm.numpy_params(), state["params"]
        worst = max(
            float(np.max(np.abs(np.asarray(want[n]) - got[n])) / max(np.max(np.abs(want[n])), 1e-6))
            for n in want
        )
        assert worst <= 1e-5, (step, worst)
    assert float(jmet["moe.blocks.0.mlp.dropped"]) > 0  # capacity factor 1: some dropped


def test_the_auxiliary_losses_join_the_loss(moe_lm: tuple) -> None:
    """The training loss is the cross entropy plus each layer's weighted auxiliary loss."""
    _, task = moe_lm
    jm = JaxModel(task, task.train)  # JAX alone: TF's model is not read here
    state = jm.with_params(params_of(task.graph))
    arrays = batches(1, seed=2)[0].arrays
    rng = jax.random.PRNGKey(0)
    _, metrics = jax.jit(lambda p: jm.objective(p, arrays, rng))(state["params"])
    aux = sum(float(metrics[f"moe.blocks.{i}.mlp.aux_loss"]) for i in (0, 1))
    assert aux > 0.01  # the balance term alone is about aux_loss = 0.01 a layer
    plain = float(metrics["nll_sum"]) / float(metrics["tokens"])  # no label smoothing
    assert float(metrics["loss"]) == pytest.approx(plain + aux, rel=1e-6)


def test_slots_are_counted_exactly_in_bfloat16() -> None:
    """Past 256 tokens a bfloat16 count is no longer exact: slots are counted in int32. Here
    four tokens in five ask for expert 1, which has 300 slots: a count in bfloat16 would skip
    and repeat slots past 256 (measured: 0.17 dropped instead of 0.31)."""
    graph = moe_graph(True, experts=2, top_k=1, capacity_factor=1.0)  # 300 slots each
    params = params_of(graph)
    params["l.router.w"][:, 0] = 0.0
    params["l.router.w"][:, 1] = 0.5
    x = randn(np.random.default_rng(1), 1, 600, D) + 0.3
    figures = []
    for dtype in (jnp.float32, jnp.bfloat16):
        ctx = Ctx(rng=None, training=True, compute_dtype=dtype)
        _, _, dropped, load = run_graph(graph, params, {"x": x}, ctx)
        figures.append((float(dropped), np.asarray(load, np.float64)))
    (d32, l32), (d16, l16) = figures
    assert 0.25 < d32 < 0.4, d32
    assert abs(d16 - d32) <= 0.005  # the figure itself is computed in bfloat16
    assert np.abs(l16 - l32).max() <= 0.005
