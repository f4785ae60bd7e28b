"""Pipeline stages at compile time: the optimal chain partition against brute force, the units a
stage may begin at, the graph cut into stage graphs, and each refusal at its spec line.

Framework-free: the plan is the compiler's; the pipelined step is tested in
`tests/processes/test_pipeline.py`, on forced CPU devices."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest
from tiny_specs import PIPELINE_LM_SPEC
from typer.testing import CliRunner

from seqc.cli import app
from seqc.compiler.compile import compile_task
from seqc.compiler.pipeline.partition import best_split, stage_sums
from seqc.compiler.pipeline.plan import pipeline_for
from seqc.compiler.pipeline.stages import CARRY, readers, split
from seqc.compiler.pipeline.units import LEAF_KINDS, unit_path, units_of
from seqc.compiler.sharding import mesh_of
from seqc.resolve.experiment import resolve
from seqc.resolve.program import load_program

PIPE = ["--set", "distribution.mesh={stage: 2}", "--set", "distribution.pipeline=gpipe(4)"]


def _brute(times: list[float], memory: list[float], stages: int, limit: float) -> float | None:
    best = None
    for cuts in itertools.combinations(range(1, len(times)), stages - 1):
        if max(stage_sums(memory, cuts)) > limit:
            continue
        worst = max(stage_sums(times, cuts))
        best = worst if best is None else min(best, worst)
    return best


def test_the_split_is_the_optimal_one_under_the_memory_limit() -> None:
    rng = random.Random(0)
    for _ in range(300):
        n = rng.randint(1, 9)
        stages = rng.randint(1, n)
        times = [rng.choice([1.0, 2.0, 3.0, 5.0, 8.0]) for _ in range(n)]
        memory = [rng.uniform(0, 10) for _ in range(n)]
        limit = rng.choice([float("inf"), 12.0, 20.0])
        cuts = best_split(times, memory, stages, limit)
        expected = _brute(times, memory, stages, limit)
        if expected is None:
            assert cuts is None
            continue
        assert cuts is not None and len(cuts) == stages - 1
        assert max(stage_sums(memory, cuts)) <= limit
        assert max(stage_sums(times, cuts)) == pytest.approx(expected)
    assert best_split([1.0, 1.0], [1.0, 1.0], 3) is None  # more stages than units


def test_units_are_top_level_layers_and_repeat_copies() -> None:
    assert unit_path("blocks.3.attn.q") == "blocks.3"
    assert unit_path("encoder.blocks.2.ff.w1") == "encoder.blocks.2"
    assert unit_path("embed") == "embed"


def _compiled(tmp_path: Path, *sets: str) -> tuple:
    spec = tmp_path / "lm.seq"
    spec.write_text(PIPELINE_LM_SPEC)
    (tmp_path / "train.txt").write_text("abc\n")
    program = load_program(spec)
    r = resolve(program, "tiny", list(sets))
    return compile_task(program, r, "lm"), r


def test_the_graph_cut_into_stages_keeps_every_op_once(tmp_path: Path) -> None:
    task, r = _compiled(tmp_path, "distribution.mesh={stage: 4}", "distribution.pipeline=gpipe(2)")
    graph = task.training_graph
    units = units_of(graph, {"B": 8, "T": 12})
    assert [u.path for u in units] == [
        "embed",
        "pos",
        "blocks.0",
        "blocks.1",
        "blocks.2",
        "blocks.3",
        "norm",
    ]
    plan = pipeline_for(task, r, "lm", mesh_of(r))
    assert plan.count == 4 and plan.bubble == pytest.approx(3 / 5)
    stages = split(graph, plan.starts)
    computed = [op.kind for op in graph.ops if op.kind not in LEAF_KINDS]
    cut = [op.kind for s in stages for op in s.graph.ops if op.kind not in LEAF_KINDS]
    assert cut == computed  # every computing op in exactly one stage, in order
    for before, after in itertools.pairwise(stages):
        assert before.carry_out == after.carry_in  # what one hands over, the next reads
        assert after.carry_in and all(f"{CARRY}{v}" in after.graph.inputs for v in after.carry_in)
    assert stages[-1].carry_out == graph.outputs
    held = readers(stages, task.train_criterion)
    assert held["embed.table"] == {0, 3}  # tied: the embedding and the fused loss's output layer
    owner = next(s.index for s in plan.stages if "blocks.1" in s.units)
    assert held["blocks.1.attn.q.w"] == {owner}


def test_manual_stages_begin_where_listed(tmp_path: Path) -> None:
    task, r = _compiled(
        tmp_path,
        "distribution.mesh={stage: 2}",
        "distribution.pipeline=gpipe(2)",
        'distribution.stages=manual(["norm"])',
    )
    plan = pipeline_for(task, r, "lm", mesh_of(r))
    assert plan.stages[1].units == ("norm",)
    assert plan.stages[0].units[-1] == "blocks.3"


@pytest.mark.parametrize(
    ("sets", "code", "says"),
    [
        (["distribution.mesh={stage: 2}"], "pipeline-missing", "no pipeline says"),
        (["distribution.pipeline=gpipe(4)"], "pipeline-no-stages", "needs a stage axis"),
        (
            ["distribution.mesh={stage: 9}", "distribution.pipeline=gpipe(4)"],
            "pipeline-stages",
            "the model of `lm` has 7",
        ),
        (
            ["distribution.mesh={stage: 2}", "distribution.pipeline=gpipe(3)"],
            "microbatches-not-divisible",
            "do not split into 3 micro-batches",
        ),
        (
            ["distribution.mesh={stage: 2, data: 2}", "distribution.pipeline=gpipe(8)"],
            "microbatches-not-divisible",
            "on each of the 2 slice(s)",
        ),
        (
            ["distribution.mesh={stage: 2, model: 2}", "distribution.pipeline=gpipe(4)"],
            "pipeline-model-axis",
            "model axis inside a stage",
        ),
        (
            [*PIPE[1::2], 'distribution.stages=manual(["blocks.9"])'],
            "pipeline-manual",
            "did you mean `blocks.3`",
        ),
        (
            [*PIPE[1::2], 'distribution.stages=manual(["norm", "pos"])'],
            "pipeline-manual",
            "for 2 stages, not 2",
        ),
        (
            [*PIPE[1::2], 'distribution.devices=2 x cpu(memory = "20KiB")'],
            "stage-memory",
            "which has 20.00 KiB",
        ),
        ([*PIPE[1::2], 'backend="tf"'], "pipeline-backend", "on TF"),
        (["distribution.mesh={dta: 2}"], "bad-choice", "did you mean `data`"),
    ],
)
def test_each_refusal_is_at_its_line(tmp_path: Path, sets: list[str], code: str, says: str) -> None:
    spec = tmp_path / "lm.seq"
    spec.write_text(PIPELINE_LM_SPEC)
    args = ["check", str(spec), "-e", "tiny"]
    for s in sets:
        args += ["--set", s]
    result = CliRunner().invoke(app, args)
    assert result.exit_code != 0, result.output
    text = " ".join(result.output.split())  # as wrapped to the terminal's width
    assert f"[{code}]" in text and says in text, result.output
    assert "--set" in result.output  # the line shown is the one that asked for it
    assert "Traceback" not in result.output


def test_a_stage_that_fits_where_the_whole_model_would_not(tmp_path: Path) -> None:
    """The per-stage check, not the whole model's, decides under a pipeline."""
    spec = tmp_path / "lm.seq"
    spec.write_text(PIPELINE_LM_SPEC)
    mem = 'distribution.devices=4 x cpu(memory = "180KiB")'
    base = ["check", str(spec), "-e", "tiny", "--set", mem]
    one = CliRunner().invoke(app, [*base, "--set", "distribution.mesh={fsdp: 1}"])
    assert one.exit_code == 0, one.output  # one device is not planned over a mesh
    four = ["--set", "distribution.mesh={stage: 4}", "--set", "distribution.pipeline=gpipe(2)"]
    result = CliRunner().invoke(app, [*base, *four])
    assert result.exit_code == 0, result.output
    two = ["--set", "distribution.mesh={stage: 2}", "--set", "distribution.pipeline=gpipe(2)"]
    result = CliRunner().invoke(app, [*base, *two])
    assert result.exit_code != 0 and "[stage-memory]" in result.output, result.output


def test_place_pipeline_prints_the_stages(tmp_path: Path) -> None:
    spec = tmp_path / "lm.seq"
    spec.write_text(PIPELINE_LM_SPEC)
    sets = ["--set", "distribution.mesh={stage: 4}", "--set", "distribution.pipeline=gpipe(8)"]
    result = CliRunner().invoke(app, ["place", str(spec), "-e", "tiny", "--pipeline", *sets])
    assert result.exit_code == 0, result.output
    assert "bubble (S - 1) / (M + S - 1) = 27.3%" in result.output
    assert "blocks.3 .. norm" in result.output
    result = CliRunner().invoke(app, ["place", str(spec), "-e", "tiny", "--pipeline"])
    assert result.exit_code != 0 and "[no-pipeline]" in result.output
    result = CliRunner().invoke(app, ["show", str(spec), "-e", "tiny", "--sharding", *sets])
    assert result.exit_code == 0, result.output
    assert "lm pipeline on mesh {stage: 4}" in result.output
    assert "stage 1, " in result.output and "shared, " in result.output


def test_a_multitask_model_is_refused() -> None:
    spec = Path(__file__).resolve().parents[2] / "examples" / "mt" / "bible_both_ways.seq"
    sets = ["--set", "distribution.mesh={stage: 2}", "--set", "distribution.pipeline=gpipe(4)"]
    result = CliRunner().invoke(app, ["check", str(spec), "-e", "mt.bible.both_ways.cpu", *sets])
    assert result.exit_code != 0
    assert "[pipeline-multitask]" in result.output and "2 tasks as one" in result.output
