"""From seqc's op graph to a placement problem, the plan reports, and `seqc place`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from seqc.compiler.compile import compile_task
from seqc.compiler.cost import size
from seqc.compiler.graph import DTYPE_BYTES
from seqc.compiler.placement.from_graph import GraphProblem, problem_from_graph
from seqc.compiler.placement.problem import UNLIMITED, Plan
from seqc.compiler.placement.report import gantt, memory_timeline, plan_json, summary
from seqc.resolve.experiment import resolve
from seqc.resolve.program import load_program
from seqc.spec.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
DIMS = {"B": 8, "T": 32}


@pytest.fixture(scope="module")
def lm():
    program = load_program(ROOT / "examples" / "lm" / "shakespeare.seq")
    resolved = resolve(program, "lm.shakespeare.quick", symbols={"shakespeare.vocab_size": 2000})
    graph = compile_task(program, resolved, "lm").graph
    return resolved, graph


def _problem(lm, **kw) -> GraphProblem:
    resolved, graph = lm
    return problem_from_graph(
        graph, resolved.config["distribution"]["devices"], batch_dims=DIMS, **kw
    )


def _single(problem) -> Plan:
    """All on device 0, in topological order: a stand-in plan that needs no placer."""
    end, start, finish = [0] * len(problem.nodes), [0] * len(problem.nodes), 0
    for v in problem.topo_order():
        start[v], finish = finish, finish + problem.nodes[v].compute_us
        end[v] = finish
    return Plan("single", [0] * len(problem.nodes), start, end, finish, problem.lower_bound())


@pytest.mark.parametrize("fuse", [False, True])
def test_problem_is_a_dag_with_positive_times(lm, fuse):
    p = _problem(lm, fuse=fuse)
    assert len(p.topo_order()) == len(p.nodes)  # raises on a cycle
    assert all(n.compute_us >= 1 for n in p.nodes)
    assert all(e.bytes > 0 for e in p.edges)
    assert [d.memory for d in p.devices] == [2 * 2**30] * 4
    assert p.comm.bytes_per_us == 10e9 / 1e6  # cpu link = 10GB


@pytest.mark.parametrize("slots", [0, 2])
def test_persistent_memory_is_params_grads_and_slots(lm, slots):
    _, graph = lm
    p = _problem(lm, optimizer_slots=slots)
    params = sum(q.size for q in graph.params.values())
    constants = sum(
        size(o.type.shape, DIMS) * DTYPE_BYTES[o.type.dtype]
        for o in graph.ops
        if o.kind == "constant"
    )
    # the position table the training backends gather a sinusoid's rows from
    tables = sum(
        4 * o.attrs["max_length"] * o.attrs["d"] for o in graph.ops if o.kind == "sinusoid"
    )
    assert tables == 4 * 4096 * 128
    assert sum(n.persistent for n in p.nodes) == 4 * params * (2 + slots) + constants + tables


def test_fusion_maps_every_op_once(lm):
    _, graph = lm
    flat = _problem(lm, fuse=False)
    p = _problem(lm)
    assert len(p.nodes) < len(flat.nodes)
    mapped = sorted(o for ops in p.ops for o in ops)
    assert mapped == list(range(len(graph.ops)))
    assert all(p.node_of[o] == v for v, ops in enumerate(p.ops) for o in ops)
    assert p.total_work() == pytest.approx(flat.total_work(), rel=0.01)  # rounding per node
    assert any("blocks.1" in layer for layers in p.layers for layer in layers)
    assert "shakespeare.seq:" in p.nodes[0].where  # the user's line, for errors


def test_tied_embedding_is_sent_to_the_output_layer(lm):
    p = _problem(lm)
    embed, out = p.node_of[1], p.node_of[len(lm[1].ops) - 1]
    assert p.edge_bytes[(embed, out)] >= 2000 * 128 * 4


def test_missing_dims_and_devices_are_usage_errors(lm):
    resolved, graph = lm
    with pytest.raises(UsageError, match="no size: T"):
        problem_from_graph(graph, resolved.config["distribution"]["devices"], batch_dims={"B": 1})
    with pytest.raises(UsageError, match=r"distribution\.devices"):
        problem_from_graph(graph, None)


def test_plan_json_schema(lm):
    p = _problem(lm)
    data = json.loads(json.dumps(plan_json(p, _single(p))))
    assert {"version", "algorithm", "devices", "ops", "edges", "makespan", "lower_bound"} <= set(
        data
    )
    assert data["devices"][0]["memory"] == 2 * 2**30
    op = data["ops"][-1]
    assert {
        "name",
        "layer",
        "device",
        "start",
        "end",
        "compute_us",
        "persistent",
        "temporary",
        "output",
        "inputs",
        "graph_ops",
        "layers",
    } <= set(op)
    assert op["inputs"] == p.pred[len(p.nodes) - 1]
    assert {"src", "dst", "bytes"} == set(data["edges"][0])
    assert data["makespan"] == p.total_work() and data["lower_bound"] >= p.critical_path()


def test_summary_and_memory_timeline(lm):
    p = _problem(lm)
    plan = _single(p)
    timeline = memory_timeline(p, plan)
    persistent = sum(n.persistent for n in p.nodes)
    assert timeline[0][0][0] == 0 and timeline[0][-1] == (plan.makespan, persistent)
    assert max(b for _, b in timeline[0]) > persistent
    assert timeline[1] == [(0, 0)]
    text = summary(p, plan)
    assert "cpu:0" in text and "lower bound" in text


def test_unlimited_memory_is_null_in_json(lm):
    _, graph = lm
    p = problem_from_graph(graph, [{"kind": "gpu", "flops": 1e13}], batch_dims=DIMS)
    assert p.devices[0].memory == UNLIMITED
    assert plan_json(p, _single(p))["devices"][0]["memory"] is None


def test_gantt_png(lm, tmp_path):
    pytest.importorskip("matplotlib")
    p = _problem(lm)
    path = gantt(p, _single(p), tmp_path / "g.png")
    assert path.read_bytes()[:4] == b"\x89PNG"


TINY = """seqc 1
import "{blocks}"

input tiny {{
  train = text("unused.txt")
  tokenizer = sentencepiece(vocab_size = 300)
  buckets = {{16: 4}}
}}

model Tiny(vocab: int, d: int = 32, layers: int = 2) {{
  embed = Embedding(vocab, d)
  blocks = repeat(layers) CausalBlock(d, 2, dropout = 0.0)
  out = Linear(d, vocab)
  forward (ids: int32[B, T]) -> float32[B, T, vocab] {{
    return out(blocks(embed(ids)))
  }}
}}

task lm {{
  input = tiny
  model = Tiny(vocab = input.vocab_size)
  loss = cross_entropy()
}}

experiment tiny {{
  tasks = [lm]
  distribution {{
    devices = 2 x gpu(memory = "1GiB")
    placement = {placement}
  }}
}}
"""


@pytest.mark.parametrize("placement", ["m_etf", "m_topo", "m_sct", "single", "manual"])
def test_place_command(tmp_path, placement):
    pytest.importorskip("seqc.compiler.placement.algorithms")
    import typer

    from seqc.cli.devices import place_cmd

    blocks = ROOT / "examples" / "common" / "transformer.seq"
    spec = tmp_path / "tiny.seq"
    spec.write_text(TINY.format(blocks=blocks, placement=placement))
    app = typer.Typer()
    app.command("place")(place_cmd)
    app.command("other")(lambda: None)  # two commands: typer keeps the subcommand name
    out = tmp_path / "plan.json"
    result = CliRunner().invoke(app, ["place", str(spec), "-e", "tiny", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "makespan" in result.output
    data = json.loads(out.read_text())
    assert len(data["devices"]) == 2 and data["ops"]


def test_fusion_follows_single_out_edges():
    """x -> a -> {b, c} -> d: b and c have one reader each and fuse into d; a has two readers
    and heads its own node, with x (one reader) fused into it."""
    from seqc.compiler.graph import GraphBuilder, TensorType

    g = GraphBuilder()
    x = g.input("x", TensorType("float32", ("B", 16)))
    a = g.unary("neg", x)
    b = g.unary("exp", a)
    c = g.unary("tanh", a)
    d = g.binary("add", b, c)
    g.graph.outputs = [d]
    p = problem_from_graph(g.graph, [{"kind": "cpu"}], batch_dims={"B": 4})
    assert p.ops == [(x, a), (b, c, d)]
    assert [(e.src, e.dst, e.bytes) for e in p.edges] == [(0, 1, 4 * 16 * 4)]  # a, sent once
    assert p.nodes[1].output == 4 * 16 * 4 and p.nodes[0].output == 4 * 16 * 4
