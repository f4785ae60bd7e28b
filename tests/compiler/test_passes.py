"""Compiler passes (`seqc.compiler.passes`): each computes what the unpassed graph computes, on
every example's model, keeps the params and their names, and labels what it creates with the
layer path and span of what it replaced."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from functools import cache
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from lowering_helpers import compile_spec, params_of, run

from seqc.compiler.compile import CompiledTask
from seqc.compiler.config import TrainConfig
from seqc.compiler.graph import Graph
from seqc.compiler.passes import DEFAULT_PASSES, PASSES, run_passes
from seqc.resolve.program import load_program

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SMALL = ("smoke", "tiny", "quick", "cpu", "ce")
"""Experiments named so are the small variants: one per example file is compiled here."""

DIMS = {"B": 2, "T": 7, "S": 5}
OTHER_DIM = 4000
"""Any other symbolic dim (audio samples): long enough for a speech front end's windows."""


def _example_experiments() -> list[tuple[str, str]]:
    out = []
    for path in sorted(EXAMPLES.glob("*/*.seq")):
        if path.parent.name == "common":
            continue
        program = load_program(path)
        names = [n for n, e in program.experiments.items() if e.span and Path(e.span.file) == path]
        small = [n for n in names if any(tag in n.split(".")[-1] for tag in SMALL)]
        if names:
            out.append((str(path.relative_to(EXAMPLES)), (small or names)[0]))
    return out


@cache
def _task(rel: str, experiment: str) -> CompiledTask:
    return compile_spec(EXAMPLES / rel, experiment)


def _inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for name, vid in graph.inputs.items():
        t = graph.ops[vid].type
        shape = tuple(DIMS.get(d, OTHER_DIM) if isinstance(d, str) else d for d in t.shape)
        if t.dtype == "bool":
            out[name] = np.ones(shape, bool)
        elif t.dtype.startswith("int"):
            out[name] = rng.integers(0, 4, shape).astype(t.dtype)
        else:
            out[name] = rng.normal(0, 1, shape).astype(t.dtype)
    return out


def _same_function(graph: Graph, passed: Graph) -> None:
    params = params_of(graph)
    inputs = _inputs(graph)
    want = run(graph, params, inputs)
    got = run(passed, params, inputs)
    assert got.shape == want.shape
    scale = max(1.0, float(np.abs(want).max()))
    assert np.abs(got - want).max() <= 1e-6 * scale, np.abs(got - want).max()


@pytest.mark.parametrize(("rel", "experiment"), _example_experiments())
def test_every_example_computes_the_same_with_the_default_passes(rel: str, experiment: str) -> None:
    graph = _task(rel, experiment).graph
    passed, reports = run_passes(graph, DEFAULT_PASSES)
    assert [r.name for r in reports] == [n for n in DEFAULT_PASSES if n in PASSES]
    assert passed.params is graph.params  # the same params, by the same names
    assert set(passed.inputs) == set(graph.inputs)
    # the same products; the cost model bills the weights' concat a FLOP per value copied
    assert reports[-1].flops_after <= 1.01 * reports[0].flops_before
    _same_function(graph, passed)


@pytest.mark.parametrize("name", list(PASSES))
def test_each_pass_alone_computes_the_same(name: str) -> None:
    graph = _task("mt/bible_transformer.seq", "mt.bible.transformer.smoke").graph
    passed, [report] = run_passes(graph, [name])
    assert report.ops_before == len(graph.ops) and report.ops_after == len(passed.ops)
    _same_function(graph, passed)


def test_fusion_makes_one_product_of_q_k_and_v_labelled_with_their_layers() -> None:
    graph = _task("lm/shakespeare.seq", "lm.shakespeare.quick").graph
    passed, _ = run_passes(graph, ["fuse_matmul"])

    def weight(g: Graph, op: object) -> str:
        return g.ops[op.inputs[1]].attrs.get("name", "")  # type: ignore[attr-defined]

    before = Counter(op.kind for op in graph.ops)
    after = Counter(op.kind for op in passed.ops)
    queries = [op for op in graph.ops if op.kind == "matmul" and weight(graph, op).endswith(".q.w")]
    assert len(queries) >= 1
    # per block: q, k, v -> one; the MLP's two products read different inputs and stay
    assert after["matmul"] == before["matmul"] - 2 * len(queries)
    fused = [
        op for op in passed.ops if op.kind == "matmul" and passed.ops[op.inputs[1]].kind == "concat"
    ]
    assert [op.layer for op in fused] == [op.layer for op in queries]
    assert [op.span for op in fused] == [op.span for op in queries]
    for op in fused:
        concat = passed.ops[op.inputs[1]]
        names = [passed.ops[i].attrs["name"] for i in concat.inputs]
        assert [n.rsplit(".", 2)[-2] for n in names] == ["q", "k", "v"]
        parts = [s for s in passed.ops if s.kind == "slice" and s.inputs == (op.id,)]
        assert [(s.attrs["start"], s.attrs["end"]) for s in parts] == [
            (0, op.type.shape[-1] // 3),
            (op.type.shape[-1] // 3, 2 * op.type.shape[-1] // 3),
            (2 * op.type.shape[-1] // 3, op.type.shape[-1]),
        ]
        assert all(s.layer == op.layer and s.span is not None for s in parts)


def test_cse_shares_the_masks_and_constants_of_repeated_layers() -> None:
    graph = _task("lm/shakespeare.seq", "lm.shakespeare.quick").graph
    passed, [report] = run_passes(graph, ["cse"])
    before = Counter(op.kind for op in graph.ops)
    after = Counter(op.kind for op in passed.ops)
    assert before["causal_mask"] > 1 and after["causal_mask"] == 1
    assert after["dropout"] == before["dropout"]  # draws are never merged
    assert report.ops_after < report.ops_before


def test_dce_keeps_inputs_outputs_and_the_output_layer() -> None:
    task = _task("lm/shakespeare.seq", "lm.shakespeare.quick")
    graph = task.graph
    passed, _ = run_passes(graph, ["dce"])
    assert passed.head is not None and graph.head is not None
    assert passed.ops[passed.head.logits].layer == graph.ops[graph.head.logits].layer
    assert passed.ops[passed.outputs[0]].type == graph.ops[graph.outputs[0]].type


@pytest.mark.parametrize("backend_name", ["jax", "tf"])
def test_a_checkpoint_trained_without_passes_resumes_with_them(
    tmp_path: Path, backend_name: str
) -> None:
    """The passes keep every param and its name: a run's checkpoint from the graph as lowered
    restores into a model compiled with the passes, and trains on with the same loss."""
    from seqc.backends.registry import backend

    rel, exp = "lm/shakespeare.seq", "lm.shakespeare.quick"
    one_block = ["lm.model.layers=1"]  # the passes fuse each block alike: one shows it
    plain = compile_spec(EXAMPLES / rel, exp, [*one_block, "compile.passes=[]"])
    passed = compile_spec(EXAMPLES / rel, exp, one_block)
    fused = [op for op in passed.training_graph.ops if op.kind == "concat"]
    assert fused and not [op for op in plain.training_graph.ops if op.kind == "concat"]
    engine = backend(backend_name)
    from seqc.resolve.experiment import resolve

    train = TrainConfig.of(resolve(load_program(EXAMPLES / rel), exp).config["train"])
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 50, (2, 9)).astype(np.int32)

    batch = SimpleNamespace(
        arrays={"inputs": ids[:, :-1], "targets": ids[:, 1:], "mask": np.ones((2, 8), bool)}
    )

    old = engine.model(plain, train)
    state = old.init(0)
    state, _ = old.train_step(state, batch, 1e-3)
    store = engine.checkpoints(tmp_path / "ckpt", train.keep_checkpoints)
    store.save(1, state)
    store.close()
    new = engine.model(passed, train)
    restored = engine.checkpoints(tmp_path / "ckpt", train.keep_checkpoints).restore(new.init(1))
    want = float(old.eval_step(state["params"], batch)["loss"])
    got = float(new.eval_step(restored["params"], batch)["loss"])
    assert got == pytest.approx(want, rel=1e-6)
    _, metrics = new.train_step(restored, batch, 1e-3)
    _, metrics_old = old.train_step(state, batch, 1e-3)
    assert float(metrics["loss"]) == pytest.approx(float(metrics_old["loss"]), rel=1e-5)


def test_a_placed_run_trains_the_graph_its_plan_names() -> None:
    """A placement maps the ops of the graph as lowered to devices (`seqc place` plans it), so
    a placed run trains that graph; an unplaced one the passed graph."""
    task = _task("lm/shakespeare.seq", "lm.shakespeare.quick")
    assert task.pass_reports and task.training_graph is not task.graph
    placed = task.without_passes()
    assert placed.training_graph is task.graph and placed.pass_reports == ()
    sampled = compile_spec(
        EXAMPLES / "lm/shakespeare.seq",
        "lm.shakespeare.quick",
        ["lm.loss=sampled_softmax(samples=8)"],
    )
    assert sampled.graph.head is not None
    up_to_hidden = sampled.without_passes().training_graph
    assert up_to_hidden.outputs == [sampled.graph.head.hidden]  # ids of the lowered graph


def test_attention_becomes_one_op_that_computes_the_same_on_jax_and_tf() -> None:
    """Without dropout on the probabilities each causal self-attention's chain (scale, scores,
    causal mask, softmax, weighted sum) becomes one `attention` op, labelled with the layer,
    computing the same values and gradients on JAX and the same values on TF."""
    import jax
    import tensorflow as tf

    from seqc.backends.jax.ops import Ctx as JaxCtx
    from seqc.backends.jax.ops import run_graph as jax_run_graph
    from seqc.backends.tf.ops import Ctx as TfCtx
    from seqc.backends.tf.ops import run_graph as tf_run_graph

    rel, exp = "lm/shakespeare.seq", "lm.shakespeare.quick"
    graph = compile_spec(EXAMPLES / rel, exp, ["lm.model.dropout=0.0"]).graph
    passed, [report] = run_passes(graph, ["fuse_attention"])
    chains = [op for op in graph.ops if op.kind == "softmax"]
    fused = [op for op in passed.ops if op.kind == "attention"]
    assert len(fused) == len(chains) >= 2
    after = Counter(op.kind for op in passed.ops)
    assert after["softmax"] == after["einsum"] == after["causal_mask"] == 0
    head_dim = passed.ops[fused[0].inputs[0]].type.shape[-1]
    for op in fused:
        assert op.attrs == {"scale": pytest.approx(head_dim**-0.5), "causal": True, "fill": -1e9}
        assert len(op.inputs) == 3 and op.layer.endswith(".attn") and op.span is not None
    assert [op.layer for op in fused] == [op.layer for op in chains]
    assert report.flops_after == report.flops_before  # the cost model bills the same chain
    _same_function(graph, passed)

    params = {k: v.astype(np.float32) for k, v in params_of(graph).items()}
    inputs = _inputs(graph)
    cotangent = np.random.default_rng(1).normal(size=run(graph, params, inputs).shape)

    def loss(g: Graph) -> Callable[[dict], jax.Array]:
        return lambda p: (jax_run_graph(g, p, inputs, JaxCtx())[0] * cotangent).sum()

    want = jax.jit(jax.grad(loss(graph)))(params)
    got = jax.jit(jax.grad(loss(passed)))(params)
    for name in want:
        scale = max(1.0, float(np.abs(want[name]).max()))
        assert np.abs(np.asarray(got[name]) - want[name]).max() <= 1e-5 * scale, name

    tf_out = tf.function(lambda xs: tf_run_graph(passed, params, xs, TfCtx())[0], autograph=False)(
        {k: tf.constant(v) for k, v in inputs.items()}
    )
    want_out = run(graph, params, inputs)
    scale = max(1.0, float(np.abs(want_out).max()))
    assert np.abs(tf_out.numpy() - want_out).max() <= 1e-5 * scale


def test_attention_with_dropout_or_a_key_mask() -> None:
    """Dropout on the probabilities keeps the chain (a fused kernel takes no dropout mask); a
    key-padding mask becomes the fused op's fourth operand."""
    with_dropout = _task("lm/shakespeare.seq", "lm.shakespeare.quick").graph
    passed, _ = run_passes(with_dropout, ["fuse_attention"])
    assert not [op for op in passed.ops if op.kind == "attention"]
    masked = _task("mt/lstm_attention.seq", "mt.bible.lstm").graph
    passed, _ = run_passes(masked, ["fuse_attention"])
    [op] = [op for op in passed.ops if op.kind == "attention"]
    assert len(op.inputs) == 4 and not op.attrs["causal"]
    assert passed.ops[op.inputs[3]].type.dtype == "bool"


def test_tf_computes_the_parts_of_a_fused_product_with_one_split() -> None:
    """TF takes the q, k and v of a fused product with one `tf.split` (one concat backward,
    where a slice each would pad its gradient to the full width): the same values and
    gradients as the graph as lowered."""
    import tensorflow as tf

    from seqc.backends.tf.ops import Ctx as TfCtx
    from seqc.backends.tf.ops import run_graph as tf_run_graph

    graph = _task("lm/shakespeare.seq", "lm.shakespeare.quick").graph
    passed, _ = run_passes(graph, ["fuse_matmul"])
    groups = sum(1 for op in passed.ops if op.kind == "concat")
    params = {k: tf.constant(v.astype(np.float32)) for k, v in params_of(graph).items()}
    inputs = {k: tf.constant(v) for k, v in _inputs(graph).items()}
    cotangent = tf.constant(np.random.default_rng(1).normal(size=(2, 7, 64)), tf.float32)

    def gradients(g: Graph) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        @tf.function(autograph=False)
        def step(p: dict) -> tuple:
            with tf.GradientTape() as tape:
                tape.watch(p)
                out = tf_run_graph(g, p, inputs, TfCtx())[0]
                loss = tf.reduce_sum(out[..., : cotangent.shape[-1]] * cotangent)
            return out, tape.gradient(loss, p)

        ops = [o.type for o in step.get_concrete_function(params).graph.get_operations()]
        if g is passed:
            assert ops.count("SplitV") == groups >= 1
        return step(params)

    want_out, want = gradients(graph)
    got_out, got = gradients(passed)
    np.testing.assert_allclose(got_out.numpy(), want_out.numpy(), rtol=1e-5, atol=1e-5)
    for name in want:
        scale = max(1.0, float(np.abs(want[name].numpy()).max()))
        assert np.abs(got[name].numpy() - want[name].numpy()).max() <= 1e-5 * scale, name


def test_tf_splits_a_recurrence_bodys_gates_afresh_each_step() -> None:
    """An LSTM body's gate slices partition one value, so TF splits it once per evaluation; run
    eagerly, each time step evaluates the body on new values, and must not reuse a split of
    the step before."""
    import tensorflow as tf

    from seqc.backends.tf.ops import Ctx as TfCtx
    from seqc.backends.tf.ops import run_graph as tf_run_graph

    graph = _task("mt/lstm_attention.seq", "mt.bible.lstm").graph
    params = {k: v.astype(np.float32) for k, v in params_of(graph).items()}
    inputs = _inputs(graph)
    want = run(graph, params, inputs)
    tf_params = {k: tf.constant(v) for k, v in params.items()}
    got = tf_run_graph(graph, tf_params, {k: tf.constant(v) for k, v in inputs.items()}, TfCtx())
    assert np.abs(got[0].numpy() - want).max() <= 1e-5 * max(1.0, float(np.abs(want).max()))


def test_jax_attention_falls_back_to_the_chain_where_cudnn_refuses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a GPU in bfloat16 the fused op asks cuDNN first; a kernel that refuses (here: no
    GPU at all, so the call raises) leaves the chain's values, not an error."""
    import jax
    import jax.numpy as jnp

    from seqc.backends.jax.ops import OPS, Ctx

    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.normal(size=(2, 5, 2, 4)), jnp.bfloat16) for _ in range(3))
    attrs = {"scale": 0.5, "causal": True, "fill": -1e9}
    ctx = Ctx(compute_dtype=jnp.bfloat16)
    want = OPS["attention"]([q, k, v], attrs, ctx)
    asked = []
    real = jax.nn.dot_product_attention

    def cudnn(*args: object, **kwargs: object) -> jax.Array:
        asked.append(kwargs["implementation"])
        return real(*args, **kwargs)  # raises: there is no GPU here

    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    monkeypatch.setattr(jax.nn, "dot_product_attention", cudnn)
    got = OPS["attention"]([q, k, v], attrs, ctx)
    assert asked == ["cudnn"]
    np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))
