"""`seqc profile` measures each op of a training step, and `seqc place --profile` plans with
the measurements; a profile of another graph, or a damaged one, is refused clearly."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from seqc.backends.registry import backend
from seqc.cli import app
from seqc.compiler.placement.from_graph import problem_from_graph
from seqc.run.devices.profile import UNMEASURED, one_op_graph, random_inputs
from seqc.run.session import compile_experiment

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "lm" / "shakespeare.seq"
EXP = "lm.shakespeare.quick"
runner = CliRunner()


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("profile") / "quick.json"
    result = runner.invoke(
        app, ["profile", str(EXAMPLE), "-e", EXP, "--reps", "1", "--json", str(path)]
    )
    assert result.exit_code == 0, result.output
    assert "measured / estimated" in result.output and "matmul" in result.output
    return path


def test_every_op_is_in_the_profile_measured_unless_a_leaf(profile: Path) -> None:
    data = json.loads(profile.read_text())
    _, compiled = compile_experiment(EXAMPLE, EXP)
    ops = data["ops"]
    assert [r["id"] for r in ops] == [op.id for op in compiled.graph.ops]
    assert data["dims"] == {"B": 32, "T": 64, "S": 64} and data["backend"] == "jax"
    for row, op in zip(ops, compiled.graph.ops, strict=True):
        assert row["measured"] == (op.kind not in UNMEASURED), op.kind
        if row["measured"]:
            assert row["forward_s"] > 0 and row["backward_s"] >= 0
    matmuls = [r for r in ops if r["kind"] == "matmul"]
    assert all(r["backward_s"] > 0 for r in matmuls)  # the gradient of a product is measured


def test_place_uses_the_measured_times(profile: Path) -> None:
    plain = runner.invoke(app, ["place", str(EXAMPLE), "-e", EXP, "-a", "m_etf"])
    measured = runner.invoke(
        app, ["place", str(EXAMPLE), "-e", EXP, "-a", "m_etf", "--profile", str(profile)]
    )
    assert plain.exit_code == 0 and measured.exit_code == 0, measured.output
    span = [line for line in plain.output.splitlines() if "makespan" in line]
    span_m = [line for line in measured.output.splitlines() if "makespan" in line]
    assert span and span_m and span != span_m
    assert "from the estimated costs, m-etf makes a plan that takes" in measured.output


def test_a_plan_replayed_on_its_own_problem_keeps_every_node_where_it_was() -> None:
    from seqc.compiler.placement.plan import place, replay

    for devices in ('2 x cpu(memory = "64MiB")', '4 x cpu(memory = "40MiB")'):
        resolved, compiled = compile_experiment(EXAMPLE, EXP, [f"distribution.devices={devices}"])
        placed = place(compiled.graph, resolved, compiled.name, "m_etf")
        again = replay(placed.problem, placed.devices)
        assert again.device == placed.plan.device and again.algorithm == "replay"
        assert again.makespan > 0 and again.lower_bound == placed.problem.lower_bound()


def test_measured_seconds_replace_the_estimate_op_by_op() -> None:
    _, compiled = compile_experiment(EXAMPLE, EXP)
    graph = compiled.graph
    first = next(op.id for op in graph.ops if op.kind == "matmul")
    devices = [{"kind": "cpu"}]
    base = problem_from_graph(graph, devices, fuse=False)
    slow = problem_from_graph(graph, devices, fuse=False, measured={first: 1.0})
    node = base.node_of[first]
    assert slow.nodes[node].compute_us - base.nodes[node].compute_us > 900_000
    others = [n for n in range(len(base.nodes)) if n != node]
    assert [base.nodes[n].compute_us for n in others] == [slow.nodes[n].compute_us for n in others]


def test_a_profile_of_other_sizes_is_refused_with_the_command_to_remake_it(
    profile: Path,
) -> None:
    result = runner.invoke(
        app,
        [
            "place",
            str(EXAMPLE),
            "-e",
            EXP,
            "--set",
            "lm.input.buckets={32: 16, 128: 8}",
            "--profile",
            str(profile),
        ],
    )
    assert result.exit_code == 2, result.output
    assert "stale-profile" in result.output and "seqc profile" in result.output


@pytest.mark.parametrize("damage", ["", "{", '{"format": 1}', "[1, 2]"])
def test_a_damaged_profile_is_a_clear_error(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(damage)
    result = runner.invoke(app, ["place", str(EXAMPLE), "-e", EXP, "--profile", str(path)])
    assert result.exit_code == 2, result.output
    assert "bad-profile" in result.output and "Traceback" not in result.output
    missing = runner.invoke(
        app, ["place", str(EXAMPLE), "-e", EXP, "--profile", str(tmp_path / "none.json")]
    )
    assert missing.exit_code == 2 and "no such profile" in missing.output


@pytest.mark.parametrize("name", ["jax", "tf"])
def test_each_backend_times_one_op_forward_and_backward(name: str) -> None:
    _, compiled = compile_experiment(EXAMPLE, EXP)
    graph = compiled.graph
    op = next(op for op in graph.ops if op.kind == "matmul")
    one = one_op_graph(graph, op)
    # sizes whose backward (two products) stands clear of the timer's noise on a busy machine
    feeds = random_inputs(one, {"B": 32, "T": 64, "S": 64}, seed=0)
    assert all(np.isfinite(v).all() for v in feeds.values() if v.dtype.kind == "f")
    fwd, bwd = backend(name).profile_op(one, feeds, reps=5)
    assert fwd > 0 and bwd > 0


@pytest.mark.parametrize("name", ["jax", "tf"])
def test_each_backend_times_an_embedding_lookup_whose_gradient_is_sparse(name: str) -> None:
    """TF's gradient of a gather with respect to its table is `IndexedSlices`, not a tensor:
    `seqc profile --backend tf` crashed on the embedding of every LM."""
    _, compiled = compile_experiment(EXAMPLE, EXP)
    graph = compiled.graph
    op = next(op for op in graph.ops if op.kind == "gather")
    one = one_op_graph(graph, op)
    feeds = random_inputs(one, {"B": 4, "T": 8, "S": 8}, seed=0)
    fwd, bwd = backend(name).profile_op(one, feeds, reps=2)
    assert fwd > 0 and bwd >= 0
