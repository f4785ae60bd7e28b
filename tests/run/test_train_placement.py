"""The placement a spec asks for, applied by `seqc train`: on TF each op runs on its planned
device (two logical CPUs here), with the same losses as the unplaced program; JAX, which runs a
step as one program on one device, refuses a plan over several at the spec's placement line; a
plan over devices the process lacks is an error before anything is written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_specs import LM_SPEC, lm_corpus
from typer.testing import CliRunner

from seqc.cli import app

ROOT = Path(__file__).resolve().parents[2]
PLACED = """
experiment placed extends tiny {
  backend = "tf"
  distribution.devices = 2 x cpu(memory = "1GiB")
  distribution.placement = manual(layers = {blocks: 1, out: 1})
}
"""
PLACEMENT_LINE = 38
"""The line of `distribution.placement` in LM_SPEC + PLACED."""


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    lm_corpus(tmp_path)
    common = (ROOT / "examples" / "common" / "transformer.seq").as_posix()
    path = tmp_path / "lm.seq"
    path.write_text(LM_SPEC.format(common=common) + PLACED)
    line = path.read_text().splitlines()[PLACEMENT_LINE - 1]
    assert line.strip().startswith("distribution.placement"), line
    return path


SCRIPT = r"""
import json, sys
from typer.testing import CliRunner
from seqc.cli import app
spec, tmp = sys.argv[1:3]
base = ["--cache-dir", tmp + "/cache", "--no-progress", "--set", "train.steps=6", "--no-dev-eval"]
out = {}
for name, exp, backend in (("placed", "placed", "tf"), ("single", "tiny", "tf")):
    args = ["train", spec, "-e", exp, "--backend", backend, "--run-dir", f"{tmp}/{name}", *base]
    result = CliRunner().invoke(app, args)
    out[name] = {"code": result.exit_code, "output": result.output[-4000:]}
print(json.dumps(out))
"""


def _losses(run: Path) -> list[float]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [json.loads(x)["loss"] for x in lines if json.loads(x)["split"] == "train"]


def test_tf_trains_the_plan_with_the_unplaced_losses(spec: Path, tmp_path: Path) -> None:
    """In a fresh process: logical devices are set up before TensorFlow starts."""
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(spec), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    placed, single = out["placed"], out["single"]
    assert placed["code"] == 0 and single["code"] == 0, placed["output"] + single["output"]
    assert "placement (TensorFlow devices)" in placed["output"]
    assert "manual: makespan" in placed["output"]  # the plan's summary
    assert "placement" not in single["output"]
    info = json.loads((tmp_path / "placed" / "run.json").read_text())
    assert info["placement"] == {"algorithm": "manual", "devices": 2}
    want, got = _losses(tmp_path / "single"), _losses(tmp_path / "placed")
    assert len(got) == 6
    for a, b in zip(want, got, strict=True):
        assert abs(a - b) <= 1e-5 * abs(a), (want, got)


def test_jax_refuses_a_plan_over_several_devices_at_its_line(spec: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    args = ["train", str(spec), "-e", "placed", "--backend", "jax", "--run-dir", str(run)]
    result = CliRunner().invoke(app, [*args, "--cache-dir", str(tmp_path / "cache")])
    assert result.exit_code == 2, result.output
    assert "cannot-place" in result.output and "--backend tf" in result.output
    assert f"lm.seq:{PLACEMENT_LINE}:" in result.output
    assert not run.exists()  # refused before anything was written


def test_a_plan_one_device_runs_on_jax(spec: Path, tmp_path: Path) -> None:
    """m-ETF on devices big enough keeps this small model on device 0: nothing to refuse."""
    run = tmp_path / "run"
    args = ["train", str(spec), "-e", "tiny", "--run-dir", str(run), "--no-progress"]
    sets = ["--set", "train.steps=1", "--set", "distribution.placement=m_etf"]
    sets += ["--set", 'distribution.devices=2 x cpu(memory = "1GiB")']
    result = CliRunner().invoke(app, [*args, *sets, "--cache-dir", str(tmp_path / "cache")])
    assert result.exit_code == 0, result.output
    assert "every op on device 0" in result.output


LATE = r"""
import json, sys
import tensorflow as tf
tf.constant(1.0)  # the runtime starts with the host's one CPU device
from typer.testing import CliRunner
from seqc.cli import app
spec, run, cache = sys.argv[1:4]
args = ["train", spec, "-e", "placed", "--run-dir", run, "--cache-dir", cache]
result = CliRunner().invoke(app, args)
print(json.dumps({"code": result.exit_code, "output": result.output[-3000:]}))
"""


def test_devices_the_process_lacks_are_an_error_before_any_write(
    spec: Path, tmp_path: Path
) -> None:
    """TF has started with its one CPU: the plan's second device cannot be made any more, and
    the run stops before it writes anything."""
    run = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-c", LATE, str(spec), str(run), str(tmp_path / "cache")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["code"] == 2, out["output"]
    assert "unknown-device" in out["output"] and "/device:CPU:1" in out["output"]
    assert not run.exists()
