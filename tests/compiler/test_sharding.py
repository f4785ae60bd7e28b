"""The sharding plan: each param's split over the mesh, from the layer kinds' defaults, the
user's rules and fsdp; mistakes are errors at the rule or the layer, with both numbers."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from seqc.cli import app
from seqc.compiler.compile import compile_task
from seqc.compiler.sharding import ShardingPlan, check_batches, check_devices, plan_sharding
from seqc.resolve.experiment import resolve
from seqc.resolve.program import load_program
from seqc.spec.errors import CheckError

ROOT = Path(__file__).resolve().parents[2]
LM = ROOT / "examples" / "lm" / "shakespeare.seq"


def _plan(*sets: str) -> ShardingPlan:
    program = load_program(LM)
    r = resolve(program, "lm.shakespeare.quick", list(sets))
    return plan_sharding(compile_task(program, r, "lm").graph, r, "lm")


def test_megatron_defaults_on_a_data_and_model_mesh() -> None:
    plan = _plan("distribution.mesh={data: 2, model: 2}")
    spec = {n: p.spec for n, p in plan.params.items()}
    assert spec["blocks.0.attn.q.w"] == (None, "model")  # columns
    assert spec["blocks.0.attn.o.w"] == ("model", None)  # rows
    assert spec["blocks.0.mlp.w1.w"] == (None, "model")
    assert spec["blocks.0.mlp.w2.w"] == ("model", None)
    assert spec["embed.table"] == ("model", None)  # the vocabulary
    assert spec["blocks.0.norm1.scale"] == (None,)  # replicated
    assert plan.shard_shape("blocks.0.mlp.w1.w") == (128, 256)
    assert plan.batch_split == 2 and plan.devices == 4


def test_fsdp_splits_every_param_it_divides() -> None:
    plan = _plan("distribution.mesh={fsdp: 4, model: 2}")
    assert plan.params["blocks.0.attn.q.w"].spec == ("fsdp", "model")
    assert plan.params["blocks.0.norm1.scale"].spec == ("fsdp",)
    assert plan.params["out.b"].spec == ("model",)  # 2000 / 2 = 1000 left, not split further
    whole = sum(p.device_bytes({"fsdp": 1, "model": 1}) for p in plan.params.values())
    assert plan.device_bytes() < whole / 6


def test_axes_of_size_one_or_absent_are_dropped() -> None:
    plan = _plan("distribution.mesh={data: 4}")
    assert all(a is None for p in plan.params.values() for a in p.spec)


def test_a_rule_overrides_the_default() -> None:
    plan = _plan(
        "distribution.mesh={data: 2, model: 2}",
        'distribution.shard={"blocks.*.mlp.w1.w": [model, none]}',
    )
    assert plan.params["blocks.1.mlp.w1.w"].spec == ("model", None)
    assert plan.params["blocks.1.mlp.w1.w"].origin.startswith("rule")


@pytest.mark.parametrize(
    ("sets", "code", "says"),
    [
        (["distribution.mesh={model: 3}"], "shard-not-divisible", "(2000) is not divided"),
        (
            ["distribution.mesh={model: 2}", 'distribution.shard={"embed.table": [model]}'],
            "bad-shard-rule",
            "gives 1 axes",
        ),
        (
            ["distribution.mesh={model: 2}", 'distribution.shard={"nothing.*": [model]}'],
            "unused-shard-rule",
            "matches no param",
        ),
    ],
)
def test_mistakes_are_located(sets: list[str], code: str, says: str) -> None:
    with pytest.raises(CheckError) as err:
        _plan(*sets)
    assert err.value.code == code and says in err.value.message
    if code == "shard-not-divisible":  # a default: at the layer's line
        assert err.value.span is not None and err.value.span.line == 25


def test_the_mesh_must_match_the_devices_and_the_batches() -> None:
    plan = _plan("distribution.mesh={data: 2, model: 4}")
    with pytest.raises(CheckError) as err:
        check_devices(plan, 1, "this process")
    assert err.value.code == "mesh-devices" and "needs 8 devices" in err.value.message
    check_batches(plan, [32], None)
    with pytest.raises(CheckError, match="do not split"):
        check_batches(_plan("distribution.mesh={data: 3}"), [32], None)


def test_show_sharding() -> None:
    args = ["show", str(LM), "-e", "lm.shakespeare.quick", "--sharding"]
    result = CliRunner().invoke(app, [*args, "--set", "distribution.mesh={data: 2, model: 2}"])
    assert result.exit_code == 0, result.output
    assert "blocks.0.attn.q.w" in result.output and "[none, model]" in result.output
    assert "params per device" in result.output and "of device memory" in result.output
