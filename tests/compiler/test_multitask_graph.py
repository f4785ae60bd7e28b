"""A multi-task model placed and printed whole: `seqc place` plans one step of every task with
each shared param held once (or one task's graph with `--task`), and `seqc show --graph` prints
each task's report, then the model's params counted once and what each share holds.

The spec states every size (the vocabulary is a number), so nothing here reads data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from seqc.cli import app
from seqc.compiler.config import OptimizerConfig
from seqc.compiler.graph import DTYPE_BYTES
from seqc.compiler.multitask import MultiTask
from seqc.compiler.placement.plan import place, place_multitask
from seqc.resolve.experiment import ResolvedExperiment
from seqc.run.session import compile_multitask

ROOT = Path(__file__).resolve().parents[2]
BLOCKS = ROOT / "examples" / "common" / "transformer.seq"

TWO_TASKS = """seqc 1
import "{blocks}"

input short {{
  train = text("unused.txt")
  tokenizer = words(vocab_size = 50)
  buckets = {{16: 4}}
}}

input long {{
  train = text("unused.txt")
  tokenizer = words(vocab_size = 50)
  buckets = {{32: 2}}
}}

model M(vocab: int, d: int = 16) {{
  embed = Embedding(vocab, d)
  blocks = repeat(1) CausalBlock(d, 2, dropout = 0.0)
  out = Linear(d, vocab)
  forward (ids: int32[B, T]) -> float32[B, T, vocab] {{
    return out(blocks(embed(ids)))
  }}
}}

task a {{
  input = short
  model = M(vocab = 50)
  loss = cross_entropy()
}}

task b {{
  input = long
  model = M(vocab = 50)
  loss = cross_entropy()
}}

experiment two {{
  tasks = [a, b]
  share {{
    embed = [a.embed, b.embed]
    blocks = [a.blocks, b.blocks]
  }}
  distribution {{
    devices = 2 x cpu(memory = "1GiB")
    placement = m_etf
  }}
}}
"""

# Values per param group of M(vocab = 50, d = 16): the embedding 50 x 16; one CausalBlock (two
# layer norms 2 x 32, attention 4 x (16 x 16 + 16), MLP 16 x 64 + 64 and 64 x 16 + 16); the
# output layer 16 x 50 + 50.
EMBED, BLOCK, OUT = 800, 3280, 850
runner = CliRunner()


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("multitask") / "two.seq"
    path.write_text(TWO_TASKS.format(blocks=BLOCKS))
    return path


@pytest.fixture(scope="module")
def joint(spec: Path) -> tuple[ResolvedExperiment, MultiTask]:
    return compile_multitask(spec, "two")


def _persistent(plan: dict) -> int:
    return sum(op["persistent"] for op in plan["ops"])


def test_place_plans_every_task_with_each_shared_param_held_once(
    spec: Path, joint: tuple[ResolvedExperiment, MultiTask], tmp_path: Path
) -> None:
    resolved, multi = joint
    plans = {}
    for name, extra in (("joint", []), ("a", ["--task", "a"]), ("b", ["--task", "b"])):
        out = tmp_path / f"{name}.json"
        result = runner.invoke(app, ["place", str(spec), "-e", "two", *extra, "--json", str(out)])
        assert result.exit_code == 0, result.output
        plans[name] = json.loads(out.read_text())
        if name == "joint":
            text = result.output
    assert "104 ops of 2 tasks (a, b)" in text
    assert "m-etf: makespan" in text
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.strip()}
    assert rows["a"][1] == "52" and rows["b"][1] == "52"  # each task's ops, over both devices
    assert sum(map(int, rows["a"][2:4])) == 52
    assert rows["embed"][1:5] == ["1", "3.12", "KiB", "a,"]
    assert rows["blocks"][1] == "16"
    assert "params: 21 tensors (22.58 KiB), each held once; the tasks alone would hold 38" in text

    # Memory: params, gradients and optimizer slots of the shared params once, not per task.
    owners = multi.owners()
    shared = sum(
        p.size * DTYPE_BYTES[p.type.dtype] for n, p in multi.params.items() if len(owners[n]) > 1
    )
    per_param = 2 + OptimizerConfig.of(resolved.config["train"]["optimizer"]).slots
    assert shared == 4 * (EMBED + BLOCK)
    assert _persistent(plans["joint"]) == (
        _persistent(plans["a"]) + _persistent(plans["b"]) - shared * per_param
    )

    # Each op says its tasks; each task keeps its own batch dims.
    tasks = plans["joint"]["tasks"]
    assert tasks["a"] == {"graph_ops": [0, 52], "dims": {"B": 4, "T": 16, "S": 16}}
    assert tasks["b"] == {"graph_ops": [52, 104], "dims": {"B": 2, "T": 32, "S": 32}}
    assert {t for op in plans["joint"]["ops"] for t in op["tasks"]} == {"a", "b"}
    assert "tasks" not in plans["a"]


def test_place_task_places_that_task_alone(spec: Path, tmp_path: Path) -> None:
    out = tmp_path / "a.json"
    result = runner.invoke(
        app, ["place", str(spec), "-e", "two", "--task", "a", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "52 ops ->" in result.output and "each held once" not in result.output
    plan = json.loads(out.read_text())
    assert sorted(o for op in plan["ops"] for o in op["graph_ops"]) == list(range(52))
    layers = {layer.split(".")[0] for op in plan["ops"] for layer in op["layers"]}
    assert layers == {"embed", "blocks", "a"}  # shares by their name, the rest by the task's

    result = runner.invoke(app, ["place", str(spec), "-e", "two", "--task", "c"])
    assert result.exit_code == 2 and "[unknown-task]" in result.output
    assert "Traceback" not in result.output


def test_joint_placement_holds_every_param_once(
    joint: tuple[ResolvedExperiment, MultiTask],
) -> None:
    resolved, multi = joint
    placed = place_multitask(multi, resolved)
    problem = placed.problem
    assert set(problem.params) == set(multi.params)  # one holder each, shared ones included
    assert len(placed.devices) == len(multi.union_graph().ops)
    alone = place(multi.tasks["a"].graph, resolved, "a").problem
    assert alone.segments == [] and alone.tasks == []
    assert set(alone.params) == {n for n, ts in multi.owners().items() if "a" in ts}


def test_show_graph_prints_each_task_then_the_model_once(spec: Path) -> None:
    result = runner.invoke(app, ["show", str(spec), "-e", "two", "--graph"])
    assert result.exit_code == 0, result.output
    text = result.output
    task_values = EMBED + BLOCK + OUT
    assert text.count(f"params: 19 tensors, {task_values:,} values") == 2
    assert "a.model: M, lowered for B = 1, T = S = 16" in text
    assert "b.model: M, lowered for B = 1, T = S = 32" in text
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.strip()}
    assert rows["a.out"][1:3] == ["4", f"{OUT}"] and rows["b.out"][1:3] == ["4", f"{OUT}"]
    assert "model: 2 tasks (a, b), 2 share(s)" in text
    whole = EMBED + BLOCK + 2 * OUT
    assert f"params: 21 tensors, {whole:,} values" in text
    assert f"the tasks alone: 38 tensors, {2 * task_values:,} values" in text
    assert rows["embed"][-4:] == ["a,", "b", "1", f"{EMBED}"]
    assert rows["blocks"][-4:] == ["a,", "b", "16", f"{BLOCK:,}"]


def test_show_sharding_prints_each_task(spec: Path) -> None:
    result = runner.invoke(app, ["show", str(spec), "-e", "two", "--sharding"])
    assert result.exit_code == 0, result.output
    assert "a.model on mesh" in result.output and "b.model on mesh" in result.output
