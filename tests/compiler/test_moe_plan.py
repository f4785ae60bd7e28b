"""Mixture of experts at compile time: the capacity, the two forms of the layer (GShard's dispatch
in training, every expert at inference, over the same params), what the training graph hands
the criterion, the expert axis' sharding, and each refusal at its spec line.

Framework-free: the numbers (the dispatch against a numpy GShard, JAX = TF) are in
`tests/backends/test_moe.py`, the sharded step in `tests/processes/test_moe_mesh.py`."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_specs import MOE_LM_SPEC
from typer.testing import CliRunner

from seqc.cli import app
from seqc.compiler.compile import compile_task
from seqc.compiler.expert_terms import FIELDS, WithExperts
from seqc.compiler.lower.moe import capacity
from seqc.compiler.sharding import plan_sharding
from seqc.resolve.experiment import resolve
from seqc.resolve.program import load_program


def _compiled(tmp_path: Path, *sets: str) -> tuple:
    spec = tmp_path / "lm.seq"
    spec.write_text(MOE_LM_SPEC)
    program = load_program(spec)
    resolved = resolve(program, "tiny", list(sets))
    return compile_task(program, resolved, "lm"), resolved


def test_capacity_is_ceil_of_the_share_of_a_group() -> None:
    assert capacity(12, 1.0, 2, 4) == 6
    assert capacity(12, 1.25, 2, 8) == 4  # ceil(3.75)
    assert capacity(1, 1.25, 1, 8) == 1  # one token: a slot, never zero
    assert capacity(64, 2.0, 2, 4) == 64  # E / top_k: room for every token
    # a symbolic length: a dim expression the backends size when the step runs
    text = capacity("T", 1.25, 2, 8)
    assert text == "((5*T+15)//16)"
    for t in (1, 7, 12, 63, 64, 100):
        assert eval(text, {}, {"T": t}) == capacity(t, 1.25, 2, 8)


def test_training_and_inference_forms_share_params(tmp_path: Path) -> None:
    task, _ = _compiled(tmp_path)
    assert task.experts == 2
    assert [t.layer for t in task.graph.experts] == ["blocks.0.mlp", "blocks.1.mlp"]
    inference = {op.kind for op in task.graph.ops}
    assert "causal_mask" in inference  # attention's; the experts add no dispatch at inference
    assert sum(op.kind == "fill" for op in task.graph.ops) == 0
    training = task.lowered_train_graph  # before the passes (cse merges the two layers' fills)
    assert sum(op.kind == "fill" for op in training.ops) == 2  # a slot axis a layer
    assert set(training.params) == set(task.graph.params)
    # the training graph's outputs: the model's own, then each layer's aux loss, dropped, load
    assert len(task.training_graph.outputs) == 1 + len(FIELDS) * 2
    names = task.train_criterion.output_names
    assert names[:3] == ("loss", "nll_sum", "tokens")
    assert names[3:] == tuple(
        f"moe.blocks.{i}.mlp.{f}" for i in range(2) for f in ("aux_loss", "dropped", "load")
    )
    out = task.model_output(list(range(len(task.training_graph.outputs))))
    assert isinstance(out, WithExperts) and out.main == 0 and out.terms == (1, 2, 3, 4, 5, 6)
    assert task.model_output([0]) == 0  # the inference graph: plain logits
    slots = next(op for op in training.ops if op.kind == "fill")
    assert slots.attrs["shape"] == ("((T+1)//2)",)  # 1.0 * 2 * T / 4


def test_the_expert_axis_splits_the_experts(tmp_path: Path) -> None:
    task, resolved = _compiled(tmp_path, "distribution.mesh={data: 2, expert: 2}")
    plan = plan_sharding(task.graph, resolved, "lm")
    assert plan.params["blocks.0.mlp.w1"].spec == ("expert", None, None)
    assert plan.shard_shape("blocks.0.mlp.w1") == (2, 16, 32)
    assert plan.shard_shape("blocks.1.mlp.b2") == (2, 16)
    assert plan.params["blocks.0.mlp.router.w"].spec == (None, None)
    spec = tmp_path / "lm.seq"
    args = ["show", str(spec), "-e", "tiny", "--sharding", "--set", "distribution.mesh={expert: 4}"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "[expert, none, none]" in result.output and "MoE default" in result.output


@pytest.mark.parametrize(
    ("sets", "code", "says"),
    [
        (["lm.model.top_k=5"], "bad-relation", "top_k = 5, experts = 4"),
        (["lm.model.capacity_factor=0.0"], "out-of-range", "capacity_factor"),
        (["distribution.mesh={expert: 3}"], "expert-not-divisible", "(3) does not divide the 4"),
        (
            ["distribution.mesh={stage: 2}", "distribution.pipeline=gpipe(4)"],
            "pipeline-experts",
            "mixture of experts",
        ),
        (["distribution.mesh={exprt: 2}"], "bad-choice", "did you mean `expert`"),
    ],
)
def test_each_refusal_is_at_its_line(tmp_path: Path, sets: list[str], code: str, says: str) -> None:
    spec = tmp_path / "lm.seq"
    spec.write_text(MOE_LM_SPEC)
    args = ["check", str(spec), "-e", "tiny"]
    for s in sets:
        args += ["--set", s]
    result = CliRunner().invoke(app, args)
    assert result.exit_code != 0, result.output
    text = " ".join(result.output.split())  # as wrapped to the terminal's width
    assert f"[{code}]" in text and says in text, result.output
    assert "Traceback" not in result.output


def test_an_expert_axis_over_a_dense_model_is_refused() -> None:
    spec = Path(__file__).resolve().parents[2] / "examples" / "lm" / "shakespeare.seq"
    sets = ["--set", "distribution.mesh={expert: 2}", "--set", "distribution.placement=single"]
    result = CliRunner().invoke(app, ["check", str(spec), "-e", "lm.shakespeare.quick", *sets])
    assert result.exit_code != 0
    text = " ".join(result.output.split())
    assert "[no-experts]" in text and "has no MoE layer" in text, result.output


def test_a_multitask_model_keeps_its_experts_when_renamed(tmp_path: Path) -> None:
    """A task of a multi-task model is its graphs with every path renamed: the experts' terms
    and the criterion's output names go along, or its training step would lose them."""
    from seqc.compiler.multitask import rename_graph

    task, _ = _compiled(tmp_path)
    renamed = rename_graph(task.graph, lambda path: f"a.{path}")
    assert [t.layer for t in renamed.experts] == ["a.blocks.0.mlp", "a.blocks.1.mlp"]
    criterion = rename_graph(task.train_criterion, lambda path: f"a.{path}")
    assert criterion.output_names == task.train_criterion.output_names
