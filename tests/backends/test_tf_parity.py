"""The TensorFlow backend against the JAX one: same graph, same params, same inputs.

Why: the op graph is interpreted by one primitive table per backend (`seqc.backends.*.ops`);
the JAX table is checked against float64 references in `test_lowering*.py`, so TF is right where
it agrees with JAX. Every built-in layer kind, and the model of every example spec, runs on both
(TF inside `tf.function`, JAX inside `jax.jit`) with params from the JAX `init_params`.

The error measure is normwise: max|tf - jax| / max(max|jax|, 1e-6), over every output of the
graph, in float32; it must be at most 1e-5.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
import tensorflow as tf
from lowering_helpers import build, f32, layer_args, params_of

from seqc.backends.jax.ops import Ctx as JaxCtx
from seqc.backends.jax.ops import run_graph as jax_run_graph
from seqc.backends.tf.ops import Ctx as TfCtx
from seqc.backends.tf.ops import run_graph as tf_run_graph
from seqc.compiler.compile import compile_task
from seqc.compiler.graph import Graph, GraphBuilder, TensorType
from seqc.compiler.lower import LOWERINGS
from seqc.compiler.lower.call import LayerCall
from seqc.resolve.experiment import resolve
from seqc.resolve.program import load_program

ROOT = Path(__file__).resolve().parents[2]
TOLERANCE = 1e-5
DIMS = {"B": 3, "T": 5, "S": 6}
LENGTHS = (5, 3, 1)  # right padding, one row per length (B = 3)
VOCAB = 11


def make_inputs(
    graph: Graph, seed: int = 0, high: int = VOCAB, dims: dict[str, int] = DIMS
) -> dict[str, np.ndarray]:
    """Random inputs of the graph's types at `dims`: ints in [0, high), bool masks with right
    padding of `LENGTHS`, floats standard normal."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, vid in graph.inputs.items():
        t = graph.ops[vid].type
        shape = tuple(d if isinstance(d, int) else dims[d] for d in t.shape)
        if t.dtype == "bool":
            out[name] = np.arange(shape[1])[None, :] < np.array(LENGTHS)[:, None]
        elif t.dtype.startswith("int"):
            out[name] = rng.integers(0, high, shape).astype(np.int32)
        else:
            out[name] = rng.standard_normal(shape).astype(np.float32)
    return out


def run_jax(graph: Graph, params: dict, inputs: dict) -> list[np.ndarray]:
    forward = jax.jit(lambda p, xs: jax_run_graph(graph, p, xs, JaxCtx()))
    return [np.asarray(y) for y in forward(params, inputs)]


def run_tf(graph: Graph, params: dict, inputs: dict) -> list[np.ndarray]:
    tf_params = {k: tf.constant(v) for k, v in params.items()}

    @tf.function(autograph=False)
    def forward(xs: dict) -> list[tf.Tensor]:
        return tf_run_graph(graph, tf_params, xs, TfCtx())

    return [y.numpy() for y in forward({k: tf.constant(v) for k, v in inputs.items()})]


def parity_error(graph: Graph, params: dict, inputs: dict) -> float:
    """The largest normwise relative error over the graph's outputs."""
    want, got = run_jax(graph, params, inputs), run_tf(graph, params, inputs)
    assert len(want) == len(got)
    worst = 0.0
    for a, b in zip(want, got, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
        assert np.all(np.isfinite(b))
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        scale = max(float(np.max(np.abs(a64))) if a.size else 0.0, 1e-6)
        worst = max(worst, float(np.max(np.abs(a64 - b64))) / scale if a.size else 0.0)
    return worst


# ---------------------------------------------------------------------------- one layer each

BTD = [f32("B", "T", 8)]
IDS = [TensorType("int32", ("B", "T"))]
MASK_T = {"mask": TensorType("bool", ("B", "T"))}


def _softmax_tied() -> Graph:
    b = GraphBuilder()
    ids = b.input("ids", IDS[0])
    x = b.input("x", f32("B", "T", 8))
    b.layer = "embed"
    args = layer_args("Embedding", vocab=VOCAB, d=8)
    emb = LOWERINGS["Embedding"](b, LayerCall("Embedding", "embed", args, [ids]))
    b.layer = "out"
    args = layer_args("Softmax", vocab=VOCAB, d=8, tie="embed")
    logits = LOWERINGS["Softmax"](
        b, LayerCall("Softmax", "out", args, [x], siblings={"embed": "embed"})
    )
    b.graph.outputs = [logits, emb]
    return b.graph


def _rnn(cell: str, **args: Any) -> Callable[[], Graph]:
    kw = MASK_T if args.pop("masked", False) else None
    return lambda: build(cell, [f32("B", "T", 3)], kw, d_in=3, d_hidden=4, **args)


FEED_FORWARD = [("relu", False), ("gelu", False), ("silu", False), ("gelu", True), ("silu", True)]
LAYERS: dict[str, Callable[[], Graph]] = {
    "Embedding": lambda: build("Embedding", IDS, vocab=VOCAB, d=6),
    "Embedding-scaled": lambda: build("Embedding", IDS, vocab=VOCAB, d=6, scale_output=True),
    "Embedding-padding": lambda: build(
        "Embedding", IDS, vocab=VOCAB, d=6, padding_id=0, scale_output=True
    ),
    "Embedding-padding3": lambda: build("Embedding", IDS, vocab=VOCAB, d=6, padding_id=3),
    "SinusoidalPosition": lambda: build("SinusoidalPosition", BTD, d=8),
    "SinusoidalPosition-range": lambda: build(
        "SinusoidalPosition", BTD, d=8, min_timescale=2.0, max_timescale=500.0
    ),
    "LearnedPosition": lambda: build("LearnedPosition", BTD, max_length=10, d=8),
    **{
        f"Linear-{a}": (lambda a=a: build("Linear", BTD, d_in=8, d_out=5, activation=a))
        for a in ("none", "relu", "gelu", "silu", "tanh", "sigmoid")
    },
    "Linear-nobias": lambda: build("Linear", BTD, d_in=8, d_out=5, bias=False),
    **{
        f"FeedForward-{a}{'-gated' if g else ''}": (
            lambda a=a, g=g: build("FeedForward", BTD, d=8, ff=12, activation=a, gated=g)
        )
        for a, g in FEED_FORWARD
    },
    **{
        f"Activation-{fn}": (lambda fn=fn: build("Activation", BTD, fn=fn))
        for fn in ("relu", "gelu", "silu", "tanh", "sigmoid")
    },
    "Dropout-eval": lambda: build("Dropout", BTD, rate=0.3),
    # inference form (every expert computed, gated); the training form: tests/backends/test_moe.py
    "MoE-top2": lambda: build("MoE", BTD, d=8, ff=12, experts=4, top_k=2),
    "MoE-top1-relu": lambda: build("MoE", BTD, d=8, ff=12, experts=3, top_k=1, activation="relu"),
    "LayerNorm": lambda: build("LayerNorm", BTD, d=8, eps=1e-3),
    "LayerNorm-plain": lambda: build("LayerNorm", BTD, d=8, scale=False, bias=False),
    "RMSNorm": lambda: build("RMSNorm", BTD, d=8),
    "SelfAttention": lambda: build("SelfAttention", BTD, d=8, heads=2),
    "SelfAttention-causal-masked": lambda: build(
        "SelfAttention", BTD, MASK_T, d=8, heads=2, causal=True
    ),
    "SelfAttention-masked-headdim-nobias": lambda: build(
        "SelfAttention", BTD, MASK_T, d=8, heads=2, head_dim=3, bias=False
    ),
    "CrossAttention-memory-mask": lambda: build(
        "CrossAttention",
        [f32("B", "T", 8), f32("B", "S", 6)],
        {"mask": TensorType("bool", ("B", "S"))},
        d=8,
        heads=2,
        d_memory=6,
    ),
    "LSTM": _rnn("LSTM"),
    "LSTM-bidirectional-padded": _rnn("LSTM", masked=True, bidirectional=True, layers=2),
    "GRU": _rnn("GRU"),
    "GRU-bidirectional-padded": _rnn("GRU", masked=True, bidirectional=True),
    **{
        f"Conv1D-w{w}-s{s}-{'causal' if c else 'same'}": (
            lambda w=w, s=s, c=c: build(
                "Conv1D", BTD, d_in=8, d_out=5, width=w, stride=s, causal=c, activation="relu"
            )
        )
        for w, s, c in ((3, 1, False), (4, 1, False), (3, 1, True), (3, 2, False), (2, 2, True))
    },
    "LogMelFilterbank": lambda: build("LogMelFilterbank", [f32("B", 1200)], bins=20),
    "LogMelFilterbank-magnitude-fft1024": lambda: build(
        "LogMelFilterbank",
        [f32("B", 1500)],
        sample_rate=8000,
        bins=12,
        frame_ms=20.0,
        hop_ms=12.5,
        fft=1024,
        magnitude=True,
        upper_hz=3000.0,
    ),
    "SpecAugment-eval": lambda: build("SpecAugment", BTD),
    "UtteranceNorm-masked": lambda: build("UtteranceNorm", BTD, MASK_T),
    "UtteranceNorm-variance": lambda: build("UtteranceNorm", BTD, variance=True),
    "Conv2DSubsampling": lambda: build(
        "Conv2DSubsampling", [f32("B", 11, 9)], bins=9, d=6, channels=4
    ),
    "Conformer-masked": lambda: build("Conformer", BTD, MASK_T, d=8, heads=2, kernel=3),
    "Conformer-nopositions-ff": lambda: build(
        "Conformer", BTD, MASK_T, d=8, heads=2, kernel=5, ff=12, positions="none", bias=False
    ),
    "Softmax": lambda: build("Softmax", BTD, vocab=VOCAB, d=8),
    "Softmax-tied": _softmax_tied,
}


@pytest.mark.parametrize("case", sorted(LAYERS))
def test_layer_parity(case: str) -> None:
    graph = LAYERS[case]()
    error = parity_error(graph, params_of(graph), make_inputs(graph))
    assert error <= TOLERANCE, f"{case}: {error:.2e}"


def test_every_builtin_layer_kind_is_covered() -> None:
    kinds = {case.split("-")[0] for case in LAYERS}
    assert kinds == set(LOWERINGS), set(LOWERINGS) ^ kinds


# ---------------------------------------------------------------------------- example models

EXAMPLES = [
    ("lm/shakespeare.seq", "lm.shakespeare.quick", "shakespeare"),
    ("lm/shakespeare_moe.seq", "lm.shakespeare.moe", "shakespeare"),
    ("mt/bible_transformer.seq", "mt.bible.transformer.smoke", "bible_en_es"),
    ("mt/lstm_attention.seq", "mt.bible.lstm", "bible_en_es"),
]


@pytest.mark.parametrize(("spec", "experiment", "input_name"), EXAMPLES)
def test_example_model_parity(spec: str, experiment: str, input_name: str) -> None:
    program = load_program(ROOT / "examples" / spec)
    resolved = resolve(program, experiment, symbols={f"{input_name}.vocab_size": VOCAB})
    task = resolved.tasks[0]
    graph = compile_task(program, resolved, task).graph
    error = parity_error(graph, params_of(graph), make_inputs(graph, seed=1))
    assert error <= TOLERANCE, f"{experiment}: {error:.2e}"


# ---------------------------------------------------------------------------- TF-only behaviour


@pytest.mark.parametrize("case", ["LSTM-bidirectional-padded", "SelfAttention-causal-masked"])
def test_one_trace_serves_every_batch_and_length(case: str) -> None:
    """With B and T unknown in the signature, dims are bound as tensors at run time: one trace
    runs two shapes and agrees with JAX on both."""
    graph = LAYERS[case]()
    params = params_of(graph)
    tf_params = {k: tf.constant(v) for k, v in params.items()}
    signature = {
        name: tf.TensorSpec(
            [None if isinstance(d, str) else d for d in graph.ops[vid].type.shape],
            tf.as_dtype(graph.ops[vid].type.dtype),
        )
        for name, vid in graph.inputs.items()
    }

    @tf.function(autograph=False, input_signature=[signature])
    def forward(xs: dict) -> list[tf.Tensor]:
        return tf_run_graph(graph, tf_params, xs, TfCtx())

    for seed, length in ((0, 5), (1, 7)):
        inputs = make_inputs(graph, seed, dims=DIMS | {"T": length})
        got = forward({k: tf.constant(v) for k, v in inputs.items()})[0].numpy()
        want = run_jax(graph, params, inputs)[0]
        assert got.shape == want.shape
        assert np.max(np.abs(got - want)) <= TOLERANCE * np.max(np.abs(want))
    assert forward.experimental_get_tracing_count() == 1


def test_dropout_in_training_draws_from_the_stateless_seed() -> None:
    """Masks differ from JAX's (another generator), so TF is checked on its own: the rate, the
    1 / (1 - rate) scaling, one mask per seed, and one mask over time with `broadcast_time`."""
    rate = 0.25
    x = np.random.default_rng(7).standard_normal((4, 64, 32)).astype(np.float32) + 5.0

    def dropout(graph: Graph, seed: int) -> np.ndarray:
        ctx = TfCtx(rng=tf.constant([seed, 0], tf.int32), training=True)

        @tf.function(autograph=False)
        def forward(xs: dict) -> list[tf.Tensor]:
            return tf_run_graph(graph, {}, xs, ctx)

        return forward({"x0": x})[0].numpy()

    g = build("Dropout", [f32("B", "T", "d")], rate=rate)
    out = dropout(g, 3)
    dropped = out == 0.0
    assert abs(dropped.mean() - rate) < 0.03  # 8192 draws: the std of the fraction is 0.005
    np.testing.assert_allclose(out[~dropped], x[~dropped] / (1 - rate), rtol=1e-6)
    np.testing.assert_array_equal(dropout(g, 3), out)
    assert np.any((dropout(g, 4) == 0.0) != dropped)

    g = build("Dropout", [f32("B", "T", "d")], rate=rate, broadcast_time=True)
    dropped = dropout(g, 3) == 0.0
    assert np.all(dropped == dropped[:, :1, :])
    assert abs(dropped.mean() - rate) < 0.06
