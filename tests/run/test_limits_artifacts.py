"""Artifacts that do not load, what loading one may run, and the logs the CLI keeps to itself.

A tiny character LM is trained for two steps and exported to ONNX, TFLite and a SavedModel.
A model file cut in half whose sha256 in `manifest.json` was updated to match passes the
artifact's integrity check, so its runtime is the first to see it: `seqc decode --artifact`
must say which file is broken and how to fix it (exit 2), not print the runtime's traceback.
The ONNX and TFLite loaders must run nothing from the file (no pickle, no custom-op libraries,
no delegate plugins). And `seqc eval --backend tf` prints its results without TensorFlow's own
C++ log lines (oneDNN's notice, absl's preamble), which `--debug` would let through.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from shared_runs import LmRuns
from tiny_specs import LM_SPEC, lm_corpus
from typer.testing import CliRunner

from seqc.cli import app
from seqc.cli.logs import NATIVE_LOG_ENV
from seqc.run.export.artifact import MANIFEST, sha256_of, write_manifest

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()

FORMATS = [("onnx", "step.onnx"), ("tflite", "model.tflite"), ("savedmodel", "saved_model")]


@pytest.fixture(scope="module")
def exported(
    tmp_path_factory: pytest.TempPathFactory, lm_runs: LmRuns
) -> tuple[list[str], Path, Path]:
    folder = tmp_path_factory.mktemp("artifacts")
    lm_corpus(folder)
    common = ROOT / "examples" / "common" / "transformer.seq"
    (folder / "lm.seq").write_text(LM_SPEC.format(common=common.as_posix()))
    base = [str(folder / "lm.seq"), "-e", "tiny", "--cache-dir", str(folder / "cache")]
    run, out = lm_runs.copy(folder / "run", "train.steps=2"), folder / "out"
    formats = [a for f, _ in FORMATS for a in ("--format", f)]
    args = ["export", *base, "--run-dir", str(run), *formats, "--quantize", "none"]
    result = runner.invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return base, run, out


@pytest.mark.parametrize(("fmt", "name"), FORMATS, ids=[f for f, _ in FORMATS])
def test_truncated_model_file_with_a_matching_hash_is_a_file_error(
    exported: tuple[list[str], Path, Path], tmp_path: Path, fmt: str, name: str
) -> None:
    art = tmp_path / fmt
    shutil.copytree(exported[2] / f"{fmt}-none", art)
    target = art / name
    cut = target / "saved_model.pb" if target.is_dir() else target
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    manifest = json.loads((art / MANIFEST).read_text())
    kept = {k: v for k, v in manifest.items() if k not in ("files", "manifest_sha256")}
    write_manifest(art, kept)  # re-hashed and re-sealed: the integrity check passes
    assert json.loads((art / MANIFEST).read_text())["files"][name] == sha256_of(target)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("abc\n")
    result = runner.invoke(app, ["decode", "--artifact", str(art), "--input", str(prompts)])
    assert result.exit_code == 2, result.output
    assert f"{target}: file error [bad-model]: " in result.output
    assert f"cannot load the model file {target}" in result.output
    assert "export the artifact again" in result.output
    assert "Traceback" not in result.output and "internal error" not in result.output


@pytest.mark.parametrize(("fmt", "name"), FORMATS, ids=[f for f, _ in FORMATS])
def test_an_edited_manifest_is_refused_before_the_runtime_sees_it(
    exported: tuple[list[str], Path, Path], tmp_path: Path, fmt: str, name: str
) -> None:
    """The manifest says how to drive the model: its caches' shapes edited (32 -> 16) made ONNX
    Runtime fail with an internal error; the manifest is sealed like the files it lists."""
    art = tmp_path / fmt
    shutil.copytree(exported[2] / f"{fmt}-none", art)
    text = (art / MANIFEST).read_text()
    manifest = json.loads(text)
    shape, _ = next(iter(manifest["step"]["caches"].values()))
    shape[-1] //= 2  # [B, L, heads, head_dim]: half the width the model was built for
    (art / MANIFEST).write_text(json.dumps(manifest, indent=2))
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("abc\n")
    result = runner.invoke(app, ["decode", "--artifact", str(art), "--input", str(prompts)])
    assert result.exit_code == 2, result.output
    assert "bad-artifact" in result.output and "manifest.json was changed" in result.output
    assert "Traceback" not in result.output and "internal error" not in result.output
    # formatting alone (what a JSON tool writes back) is not an edit
    (art / MANIFEST).write_text(json.dumps(json.loads(text), indent=4))
    result = runner.invoke(app, ["decode", "--artifact", str(art), "--input", str(prompts)])
    assert result.exit_code == 0, result.output


def test_an_intact_artifact_still_decodes(
    exported: tuple[list[str], Path, Path], tmp_path: Path
) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("abc\n")
    for fmt, _ in FORMATS:
        art = exported[2] / f"{fmt}-none"
        result = runner.invoke(app, ["decode", "--artifact", str(art), "--input", str(prompts)])
        assert result.exit_code == 0, result.output


# The modules `seqc decode --artifact` runs for ONNX and TFLite artifacts.
LOADERS = [
    "seqc/backends/onnx/runtime.py",
    "seqc/backends/onnx/artifact.py",
    "seqc/backends/tflite/runtime.py",
    "seqc/backends/tflite/artifact.py",
    "seqc/run/export/artifact.py",
    "seqc/run/decoding/steps.py",
    "seqc/data/tokenizers.py",
]
CODE_LOADERS = {
    "pickle",
    "cPickle",
    "dill",
    "marshal",
    "shelve",
    "allow_pickle",
    "eval",
    "exec",
    "register_custom_ops_library",
    "load_op_library",
    "load_delegate",
    "experimental_delegates",
    "custom_op_registerers",
}
"""Names through which loading a file could run code: unpickling, custom ops, plugins."""


@pytest.mark.parametrize("module", LOADERS)
def test_onnx_and_tflite_loading_runs_no_code_from_the_file(module: str) -> None:
    tree = ast.parse((ROOT / module).read_text(encoding="utf-8"))
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            used.add(node.id)
        elif isinstance(node, ast.Attribute):
            used.add(node.attr)
        elif isinstance(node, ast.keyword) and node.arg:
            used.add(node.arg)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            used.update(a.name.split(".")[0] for a in node.names)
            used.update((getattr(node, "module", None) or "").split("."))
    assert not used & CODE_LOADERS, f"{module} uses {sorted(used & CODE_LOADERS)}"
    text = (ROOT / module).read_text(encoding="utf-8")
    if "InferenceSession(" in text:  # onnxruntime: the CPU provider only
        assert 'providers=["CPUExecutionProvider"]' in text


# ------------------------------------------------------------------------------------ logs

NOISE = (
    "absl::InitializeLog",
    "oneDNN custom operations",
    "cpu_feature_guard",
    "XNNPACK delegate",
    "I0000 ",
    "W0000 ",
)


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in NATIVE_LOG_ENV}


def test_native_log_filter_keeps_errors_and_python_output() -> None:
    script = textwrap.dedent(
        """\
        import os, sys
        from seqc.cli.logs import quiet_native_logs
        undo = quiet_native_logs()
        os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called are "
                    b"written to STDERR\\n")
        os.write(2, b"I0000 00:00:1796258525.324927   31970 port.cc:153] oneDNN custom "
                    b"operations are on.\\n")
        os.write(2, b"W0000 00:00:1796258365.426324   30132 helpers.cc:364] Ignored.\\n")
        os.write(2, b"INFO: Created TensorFlow Lite XNNPACK delegate for CPU.\\n")
        os.write(2, b"E0000 00:00:1796258365.426324   30132 loader.cc:1] a real error\\n")
        print("from python", file=sys.stderr)
        os.write(2, b"a last line without its newline")
        undo()
        print(os.environ["TF_CPP_MIN_LOG_LEVEL"])
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=_clean_env(),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "2\n"
    for noise in NOISE:
        assert noise not in proc.stderr, proc.stderr
    for kept in ("loader.cc:1] a real error", "from python", "a last line without its newline"):
        assert kept in proc.stderr


def test_eval_on_tensorflow_prints_only_its_own_lines(
    exported: tuple[list[str], Path, Path],
) -> None:
    base, run, _ = exported
    command = [sys.executable, "-m", "seqc.cli", "eval", *base, "--run-dir", str(run)]
    proc = subprocess.run(
        [*command, "--backend", "tf"],
        capture_output=True,
        text=True,
        env=_clean_env(),
        cwd=run.parent,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert "dev_perplexity" in proc.stdout
    for noise in NOISE:
        assert noise not in proc.stderr + proc.stdout, proc.stderr


def test_an_export_that_finds_its_folder_written_meanwhile_says_so(
    exported: tuple[list[str], Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two exports into one --out at once: the one that finished second crashed renaming its
    artifact into place (FileExistsError, exit 3) and left its hidden folders behind."""
    import seqc.run.export.build as export

    base, run, _ = exported
    out = tmp_path / "out"
    sizes = export.model_bytes

    def the_other_export_finishes_first(folder: Path, fmt: str) -> int:
        (out / "onnx-none").mkdir(parents=True)
        (out / "onnx-none" / "manifest.json").write_text("{}")
        return sizes(folder, fmt)

    monkeypatch.setattr(export, "model_bytes", the_other_export_finishes_first)
    args = ["export", *base, "--run-dir", str(run), "--format", "onnx", "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "[exists]" in result.output and "written by another export meanwhile" in result.output
    assert sorted(p.name for p in out.iterdir()) == ["onnx-none"]  # no staging folder left
