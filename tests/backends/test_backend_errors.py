"""Errors raised in backends and exporters are seqc errors: located at the layer's (or the
loss's) line, rendered by the CLI with exit code 2, never an "internal error" traceback.

- an op a backend fails to run names its op kind, its layer path and the spec line
  (the shared interpreter wraps the failure);
- a loss the compiler cannot lower yet is an error at the task's `loss = ...` line;
- an exporter that cannot express an op stops `seqc export` at that op's layer line;
- a TFLite conversion failure is a seqc export error naming the SavedModel.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from lowering_helpers import compile_spec, params_of
from shared_runs import LmRuns
from tiny_specs import LM_SPEC, lm_corpus
from typer.testing import CliRunner

from seqc.backends.jax import ops as jax_ops
from seqc.cli import app
from seqc.spec.errors import EmitError, ExportError, SeqcError

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    lm_corpus(tmp_path)
    common = (ROOT / "examples" / "common" / "transformer.seq").as_posix()
    path = tmp_path / "lm.seq"
    path.write_text(LM_SPEC.format(common=common))
    return path


def _line(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_a_failing_primitive_names_its_layer_and_line(
    spec: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiled = compile_spec(spec, "tiny", symbols={"tiny.vocab_size": 12})

    def broken(xs: list, attrs: dict, ctx: jax_ops.Ctx) -> None:
        raise RuntimeError("no kernel for this shape")

    monkeypatch.setitem(jax_ops.OPS, "layer_norm", broken)
    ids = np.ones((2, 5), np.int32)
    with pytest.raises(EmitError) as err:
        jax_ops.run_graph(compiled.graph, params_of(compiled.graph), {"ids": ids})
    e = err.value
    assert e.code == "op-failed" and "`layer_norm`" in e.message
    assert "layer `blocks.0.norm1`" in e.message and "no kernel for this shape" in e.message
    assert e.span is not None and e.span.file.endswith("transformer.seq")
    assert isinstance(e.__cause__, RuntimeError)  # --debug shows the original traceback


def test_a_sampled_loss_without_a_softmax_is_an_error_at_its_line(
    spec: Path, tmp_path: Path
) -> None:
    """Every loss of the catalogue trains now; what a sampled one cannot do is a model whose
    output is not a Softmax layer's (`seqc.compiler.lower.sampled.check_head`)."""
    text = spec.read_text().replace(
        "  decode = greedy", "  loss = nce(samples = 8)\n  decode = greedy"
    )
    text = text.replace("out = Softmax(vocab, d, tie = embed)", "out = Linear(d, vocab)")
    spec.write_text(text)
    line = _line(spec, "loss = nce")
    args = ["train", str(spec), "-e", "tiny", "--run-dir", str(tmp_path / "run")]
    result = runner.invoke(app, [*args, "--cache-dir", str(tmp_path / "cache")])
    assert result.exit_code == 2, result.output
    assert "needs-softmax" in result.output and "`nce`" in result.output
    assert f"lm.seq:{line}:" in result.output
    assert "internal error" not in result.output


def test_an_exporter_missing_a_primitive_stops_at_the_layer(
    spec: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lm_runs: LmRuns
) -> None:
    from seqc.backends.onnx import ops as onnx_ops

    base = [str(spec), "-e", "tiny", "--cache-dir", str(tmp_path / "cache")]
    run = str(lm_runs.copy(tmp_path / "run", "train.steps=2"))
    monkeypatch.delitem(onnx_ops.OPS, "layer_norm")
    result = runner.invoke(app, ["export", *base, "--run-dir", run, "--format", "onnx"])
    assert result.exit_code == 2, result.output
    assert "export error [onnx-export]" in result.output
    assert "no emitter for primitive `layer_norm`" in result.output
    assert "transformer.seq:" in result.output  # the layer's line, where the norm is declared
    assert not (Path(run) / "export" / "onnx-none").exists()


def test_tflite_conversion_errors_are_export_errors(tmp_path: Path) -> None:
    from seqc.backends.tflite.convert import TfliteConversionError, convert

    with pytest.raises(TfliteConversionError) as err:
        convert(tmp_path / "missing", "none")
    assert isinstance(err.value, ExportError) and isinstance(err.value, SeqcError)
    assert err.value.code == "tflite-conversion" and "not a SavedModel" in err.value.render()
