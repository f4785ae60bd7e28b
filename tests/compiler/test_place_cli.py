"""`seqc place` through the real command line: a manual plan from the spec (encoder on one
device, decoder on the other), the algorithms' JSON plans, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from seqc.cli import app

ROOT = Path(__file__).resolve().parents[2]
SPEC = str(ROOT / "examples" / "mt" / "bible_transformer.seq")
BASE = [
    "place",
    SPEC,
    "-e",
    "mt.bible.transformer.smoke",
    "--set",
    'distribution.devices=2 x gpu(memory = "16GiB")',
    "--set",
    "translate.model.vocab=500",
]
MANUAL = "distribution.placement=manual(layers = {encoder: 0, enc_norm: 0, decoder: 1, out: 1})"
runner = CliRunner()


def test_manual_placement_puts_the_encoder_and_decoder_where_the_spec_says(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    result = runner.invoke(app, [*BASE, "--set", MANUAL, "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "manual: makespan" in result.output
    plan = json.loads(out.read_text())
    devices = {}
    for op in plan["ops"]:
        for layer in op["layers"]:
            devices.setdefault(layer.split(".")[0], set()).add(op["device"])
    assert devices["encoder"] == {0} and devices["decoder"] == {1} and devices["out"] == {1}
    assert plan["makespan"] >= plan["lower_bound"]


def test_every_algorithm_places_and_bad_plans_are_errors(tmp_path: Path) -> None:
    for alg in ("m_topo", "m_etf", "m_sct", "single"):
        result = runner.invoke(app, [*BASE, "-a", alg])
        assert result.exit_code == 0, (alg, result.output)
    bad = MANUAL.replace("out: 1", "out: 5")
    result = runner.invoke(app, [*BASE, "--set", bad])
    assert result.exit_code == 2 and "bad-device" in result.output
    result = runner.invoke(app, [*BASE, "-a", "m_fast"])
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_calibrate_measures_and_its_device_line_feeds_the_placer() -> None:
    from seqc.run.devices.calibrate import device_call

    result = runner.invoke(app, ["calibrate", "--quick", "--json"])
    assert result.exit_code == 0, result.output
    m = json.loads(result.output[result.output.index("{") :])
    assert m["flops"] > 1e8 and m["bandwidth"] > 1e8 and m["link"] > 1e6
    assert 0.0 <= m["latency"] < 0.1
    line = device_call(m)
    value = line.split("=", 1)[1].strip()
    result = runner.invoke(app, [*BASE[:4], "--set", f"distribution.devices={value}", *BASE[6:]])
    assert result.exit_code == 0, result.output
    assert "on 2 devices" in result.output
