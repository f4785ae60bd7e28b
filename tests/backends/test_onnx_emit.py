"""The ONNX backend against the JAX interpreter: same graph, same params, same inputs.

Why: the emitter (`seqc.backends.onnx`) is a third table from primitive to framework op; the
JAX table is checked against float64 references, so an emitted model is right where
onnxruntime running it agrees with JAX. Every built-in layer kind (the cases of
`test_tf_parity.py`) and the model of every example spec is emitted, passes the gate
(`check`), runs in onnxruntime and in `onnx.reference`, and agrees with JAX in float32:
max |onnx - jax| <= 1e-4, and the normwise relative error max|onnx - jax| / max|jax| <= 1e-5.
Example models run at two batch sizes and lengths on one model: B, T, S are dynamic axes.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import onnx
import pytest
from lowering_helpers import build, f32, params_of
from test_tf_parity import EXAMPLES, LAYERS, VOCAB, run_jax

from seqc.backends.onnx.emit import OnnxExportError, check, to_onnx
from seqc.backends.onnx.ops import OPS
from seqc.backends.onnx.runtime import OnnxRunner, reference_run
from seqc.compiler import sinusoid
from seqc.compiler.compile import compile_task
from seqc.compiler.graph import (
    BINARY,
    LOGICAL,
    PRIMITIVES,
    REDUCE,
    UNARY,
    Graph,
    GraphBuilder,
    Init,
    TensorType,
)
from seqc.resolve.experiment import resolve
from seqc.resolve.program import load_program

ROOT = Path(__file__).resolve().parents[2]
ABS_TOLERANCE = 1e-4
REL_TOLERANCE = 1e-5
SHAPES = ({"B": 3, "T": 5, "S": 6}, {"B": 2, "T": 9, "S": 4})


def feeds(graph: Graph, seed: int, dims: dict[str, int]) -> dict[str, np.ndarray]:
    """Random inputs at `dims`: ids in [0, VOCAB), bool masks right-padded to random lengths
    (the first row full), floats standard normal. Any batch size, unlike the fixed `LENGTHS`."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, vid in graph.inputs.items():
        t = graph.ops[vid].type
        shape = tuple(d if isinstance(d, int) else dims[d] for d in t.shape)
        if t.dtype == "bool":
            lengths = rng.integers(1, shape[1] + 1, shape[0])
            lengths[0] = shape[1]
            out[name] = np.arange(shape[1])[None, :] < lengths[:, None]
        elif t.dtype.startswith("int"):
            out[name] = rng.integers(0, VOCAB, shape).astype(np.int32)
        else:
            out[name] = rng.standard_normal(shape).astype(np.float32)
    return out


def errors(got: list[np.ndarray], want: list[np.ndarray]) -> tuple[float, float]:
    """(max abs error, max normwise relative error) over every output; shapes and dtypes equal."""
    assert len(got) == len(want)
    worst_abs = worst_rel = 0.0
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
        if not b.size:
            continue
        diff = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
        worst_abs = max(worst_abs, diff)
        worst_rel = max(worst_rel, diff / max(float(np.max(np.abs(b))), 1e-6))
    return worst_abs, worst_rel


# ---------------------------------------------------------------------------- one layer each


def test_every_primitive_has_an_emitter() -> None:
    assert set(OPS) | {"input", "param", "scan"} == PRIMITIVES


@pytest.mark.parametrize("case", sorted(LAYERS))
def test_layer_matches_jax(case: str) -> None:
    graph = LAYERS[case]()
    params = params_of(graph)
    model = check(to_onnx(graph, params))
    inputs = feeds(graph, 0, SHAPES[0])
    got = OnnxRunner(model).run(inputs)
    abs_err, rel_err = errors(got, run_jax(graph, params, inputs))
    assert abs_err <= ABS_TOLERANCE and rel_err <= REL_TOLERANCE, (case, abs_err, rel_err)
    ref_abs, _ = errors(reference_run(model, inputs), got)
    assert ref_abs <= ABS_TOLERANCE, (case, ref_abs)


def every_primitive(b_dim: int | str, t_dim: int | str) -> Graph:
    """One graph using each primitive no built-in layer reaches (reductions, log_softmax,
    comparisons, logical ops, int/float promotion...), one output per use, so one JAX program
    and one ONNX session check them all. With int dims, the static paths (constant iota and
    causal mask, constant reshape targets) are taken instead of the `Shape`-reading ones."""
    g = GraphBuilder()
    g.layer = "prims"
    x = g.input("x", f32(b_dim, t_dim, 4))
    y = g.input("y", f32(b_dim, t_dim, 4))
    ids = g.input("ids", TensorType("int32", (b_dim, t_dim)))
    m = g.input("m", TensorType("bool", (b_dim, t_dim)))
    positive = g.binary("add", g.unary("square", x), g.constant(1.0))
    outs = [
        g.unary(k, positive if k in ("log", "sqrt", "rsqrt") else x)
        for k in sorted(UNARY)
        if k != "logical_not"
    ]
    outs += [g.binary(k, x, y) for k in sorted(BINARY - LOGICAL)]
    big = g.binary("greater", ids, g.constant(5, "int32"))
    outs += [g.unary("logical_not", m), g.binary("logical_and", m, big)]
    outs += [g.binary("logical_or", m, big)]
    outs += [g.reduce(k, x, (1,)) for k in sorted(REDUCE)]
    outs += [g.reduce("reduce_sum", x, (1, 2), keepdims=False)]
    outs += [g.softmax(x, axis=1), g.log_softmax(x), g.log_softmax(x, axis=1)]
    column = g.reshape(ids, (b_dim, t_dim, 1))
    outs += [g.binary("add", column, x), g.cast(ids, "float32"), g.cast(x, "int32")]
    outs += [g.where(g.reshape(m, (b_dim, t_dim, 1)), x, g.constant(-1.0))]
    outs += [g.transpose(x, (2, 0, 1)), g.concat([x, y], axis=-1), g.slice(x, 2, 1, 3)]
    outs += [g.reshape(x, (b_dim, t_dim, 2, 2)), g.fill(2.5, (b_dim, 3))]
    outs += [g.positions(x, axis=1), g.causal_mask(x, axis=1)]
    outs += [g.einsum("btd,bsd->bts", x, y)]
    outs += [g.batched_matmul(x, g.transpose(y, (0, 2, 1)))]
    bias = g.param("bias", (4,), Init("zeros"))
    outs += [g.layer_norm(x, None, bias, 1e-5, rms=True)]
    outs += [g.layer_norm(x, None, bias, 1e-5, rms=False)]
    g.graph.outputs = outs
    return g.graph


@pytest.mark.parametrize("dims", ["symbolic", "static"])
def test_every_primitive_matches_jax(dims: str) -> None:
    graph = every_primitive("B", "T") if dims == "symbolic" else every_primitive(3, 5)
    params = {"prims.bias": np.linspace(-1.0, 1.0, 4, dtype=np.float32)}
    model = check(to_onnx(graph, params))
    inputs = feeds(graph, 0, SHAPES[0])
    got, want = OnnxRunner(model).run(inputs), run_jax(graph, params, inputs)
    bad = []
    for vid, a, b in zip(graph.outputs, got, want, strict=True):
        abs_err, rel_err = errors([a], [b])
        if abs_err > ABS_TOLERANCE or rel_err > REL_TOLERANCE:
            bad.append((graph.ops[vid].kind, abs_err, rel_err))
    assert not bad, bad
    assert errors(reference_run(model, inputs), got)[0] <= ABS_TOLERANCE


@pytest.mark.parametrize("opset", [18, 20])
@pytest.mark.parametrize("case", ["RMSNorm", "FeedForward-gelu", "LSTM-bidirectional-padded"])
def test_newer_opsets(case: str, opset: int) -> None:
    """Opset 18 moves reduction axes to inputs; opset 20 has a Gelu op of its own."""
    graph = LAYERS[case]()
    params = params_of(graph)
    model = check(to_onnx(graph, params, opset=opset))
    assert model.opset_import[0].version == opset
    inputs = feeds(graph, 0, SHAPES[1])
    assert errors(OnnxRunner(model).run(inputs), run_jax(graph, params, inputs))[0] <= ABS_TOLERANCE


# ---------------------------------------------------------------------------- example models


@functools.cache
def example(spec: str) -> tuple[Graph, dict[str, np.ndarray], onnx.ModelProto]:
    """The lowered model of an example spec (as `test_tf_parity` lowers it), its params and
    the emitted, gated ONNX model; cached, the quantization tests use them too."""
    spec_file, experiment, input_name = next(e for e in EXAMPLES if e[0] == spec)
    program = load_program(ROOT / "examples" / spec_file)
    resolved = resolve(program, experiment, symbols={f"{input_name}.vocab_size": VOCAB})
    task = resolved.tasks[0]
    graph = compile_task(program, resolved, task).graph
    params = params_of(graph)
    metadata = {"experiment": experiment, "task": task}
    return graph, params, check(to_onnx(graph, params, name=experiment, metadata=metadata))


SPECS = [spec for spec, _, _ in EXAMPLES]


@pytest.mark.parametrize("spec", SPECS)
def test_example_model_matches_jax_at_two_shapes(spec: str) -> None:
    graph, params, model = example(spec)
    session = OnnxRunner(model)
    for seed, dims in enumerate(SHAPES):
        inputs = feeds(graph, seed + 1, dims)
        got = session.run(inputs)
        assert got[0].shape[:2] == (dims["B"], dims["T"])
        abs_err, rel_err = errors(got, run_jax(graph, params, inputs))
        assert abs_err <= ABS_TOLERANCE and rel_err <= REL_TOLERANCE, (spec, dims, abs_err, rel_err)
        ref_abs, _ = errors(reference_run(model, inputs), got)
        assert ref_abs <= ABS_TOLERANCE, (spec, dims, ref_abs)


@pytest.mark.parametrize("spec", SPECS)
def test_symbolic_dims_are_named_dynamic_axes(spec: str) -> None:
    graph, _, model = example(spec)
    for value in model.graph.input:
        t = graph.ops[graph.inputs[value.name]].type
        dims = value.type.tensor_type.shape.dim
        assert [d.dim_param or d.dim_value for d in dims] == list(t.shape)
    assert {t.name for t in model.graph.initializer if not t.name.startswith("const/")} == set(
        graph.params
    )
    props = {p.key: p.value for p in model.metadata_props}
    assert props["experiment"] == model.graph.name


def test_sinusoid_positions_are_computed_to_the_last_position() -> None:
    """The position signal is a few ops of the positions, not a stored max_length x d table
    (4096 x 128 floats is 2 MB, more than a small model's weights), and it stays within float32
    rounding of the training backends' float64 table at every position it covers."""
    graph = build("SinusoidalPosition", [f32(1, "T", 128)], d=128)
    model = check(to_onnx(graph, {}))
    assert not model.graph.initializer
    assert {"Sin", "Cos"} <= {n.op_type for n in model.graph.node}
    want = sinusoid.table(next(op.attrs for op in graph.ops if op.kind == "sinusoid"))
    got = OnnxRunner(model).run({"x0": np.zeros((1, 4096, 128), np.float32)})[0][0]
    assert want.shape == got.shape and float(np.max(np.abs(got - want))) <= 3e-7


@pytest.mark.parametrize("spec", ["lm/shakespeare.seq", "mt/bible_transformer.seq"])
def test_example_files_store_only_their_weights(spec: str) -> None:
    graph, _, model = example(spec)
    assert {t.name for t in model.graph.initializer} == set(graph.params)


# ---------------------------------------------------------------------------- naming


def test_inputs_renamed_outputs_named_and_weights_by_layer_path() -> None:
    graph = LAYERS["Softmax-tied"]()  # two outputs: logits and embeddings
    params = params_of(graph)
    model = check(
        to_onnx(
            graph,
            params,
            input_names={"ids": "tokens"},
            output_names=["logits", "embedded"],
            metadata={"vocab": "spm.model"},
        )
    )
    assert [i.name for i in model.graph.input] == ["tokens", "x"]
    assert [o.name for o in model.graph.output] == ["logits", "embedded"]
    assert {t.name for t in model.graph.initializer} == {"embed.table", "out.b"}
    assert {p.key: p.value for p in model.metadata_props} == {"vocab": "spm.model"}
    inputs = feeds(graph, 0, SHAPES[0])
    got = OnnxRunner(model).run({"tokens": inputs["ids"].astype(np.int64), "x": inputs["x"]})
    assert errors(got, run_jax(graph, params, inputs))[0] <= ABS_TOLERANCE


def test_every_node_names_its_layer_and_spec_location() -> None:
    graph, _, model = example("mt/bible_transformer.seq")
    layers = {op.layer for op in graph.ops}
    einsums = [n for n in model.graph.node if n.op_type == "Einsum"]
    assert einsums and all(n.name.split("/")[0] in layers for n in einsums)
    assert all(".seq:" in n.doc_string for n in einsums), einsums[0].doc_string


# ---------------------------------------------------------------------------- the gate


def test_gate_names_the_layer_of_a_broken_node() -> None:
    graph = LAYERS["SelfAttention"]()
    model = to_onnx(graph, params_of(graph))
    matmul = next(n for n in model.graph.node if n.op_type == "MatMul")
    del matmul.input[1]
    with pytest.raises(OnnxExportError, match=r"seqc op `matmul` of layer `l`"):
        check(model)


def test_gate_finds_a_broken_node_inside_a_scan_body() -> None:
    graph = LAYERS["GRU"]()
    model = to_onnx(graph, params_of(graph))
    scan = next(n for n in model.graph.node if n.op_type == "Scan")
    body = scan.attribute[0].g
    tanh = next(n for n in body.node if n.op_type == "Tanh")
    tanh.op_type = "Tanhh"
    with pytest.raises(OnnxExportError, match=r"seqc op `tanh` of layer `l`"):
        check(model)


def test_gate_blames_the_cause_not_the_nodes_after_it() -> None:
    """A shape error makes every later node's input untyped; the first one named is the cause."""
    graph = LAYERS["SelfAttention"]()
    model = to_onnx(graph, params_of(graph))
    einsum = next(n for n in model.graph.node if n.op_type == "Einsum")
    einsum.attribute[0].s = b"bqhd,bkhd->bhqkz"
    with pytest.raises(OnnxExportError, match=r"`einsum` of layer `l`"):
        check(model)


def test_weights_that_do_not_fit_are_named() -> None:
    graph = build("Linear", [f32("B", "T", 8)], d_in=8, d_out=5)
    params = params_of(graph)
    params["l.linear.w"] = params["l.linear.w"][:4]
    del params["l.linear.b"]
    with pytest.raises(OnnxExportError) as e:
        to_onnx(graph, params)
    assert "`l.linear.w` has shape [4, 5], expected [8, 5]" in str(e.value)
    assert "missing `l.linear.b`" in str(e.value)


def test_only_params_some_op_reads_become_initializers() -> None:
    """A graph split off a model (an encoder, a decoder step) keeps the model's whole param
    table; its file must hold only its own weights, and needs no others to be given."""
    graph = build("Linear", [f32("B", "T", 8)], d_in=8, d_out=5)
    other = build("Linear", [f32("B", "T", 5)], path="other", d_in=5, d_out=3)
    graph.params |= other.params
    model = check(to_onnx(graph, params_of(build("Linear", [f32("B", "T", 8)], d_in=8, d_out=5))))
    assert {t.name for t in model.graph.initializer} == {"l.linear.w", "l.linear.b"}


# ---------------------------------------------------------------------------- the runtime


def test_session_loads_from_a_file_and_checks_feeds(tmp_path: Path) -> None:
    graph = LAYERS["Embedding"]()
    model = check(to_onnx(graph, params_of(graph)))
    path = tmp_path / "embedding.onnx"
    onnx.save(model, path)
    session = OnnxRunner(path)
    assert session.input_names == ["x0"] and session.output_names == ["output0"]
    ids = np.arange(6).reshape(2, 3)  # int64, cast to the model's int32
    np.testing.assert_array_equal(
        session.run({"x0": ids})[0], OnnxRunner(model).run({"x0": ids})[0]
    )
    with pytest.raises(ValueError, match=r"missing \['x0'\], unexpected \['ids'\]"):
        session.run({"ids": ids})
    with pytest.raises(ValueError, match="input `x0` is float32, the model takes int32"):
        session.run({"x0": ids.astype(np.float32)})
