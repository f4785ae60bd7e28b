"""The export benchmark runs end to end at a few repetitions, so it cannot rot.

Why: bench/export.py depends on tf2onnx and on seqc's ONNX emitter agreeing on the logits; if
either drifted, the first sign would be a crash in whoever runs the benchmark next.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "export.py"


def test_export_bench_prints_its_figures(capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("bench_export", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(["--reps", "2", "--length", "8"])
    lines = dict(
        line.split(": ", 1) for line in capsys.readouterr().out.splitlines() if ": " in line
    )
    assert int(lines["seqc_onnx_nodes"]) < int(lines["tf2onnx_nodes"])
    assert float(lines["seqc_step_ms"]) > 0
    assert lines["tf2onnx_unsupported_ops_as_written"] == "1"  # Erfc, from exact GELU
