"""The extras: `seqc.cli.extras` names the extra that installs each optional package, in step
with pyproject.toml, and a command that meets a missing one says which extra to install (exit 2),
never an ImportError."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from seqc.cli.extras import EXTRAS

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTION = {"orbax": "orbax-checkpoint", "tensorflow": "tensorflow-cpu", "piper": "piper-tts"}
"""Import names whose distribution is called otherwise (`ai_edge_litert` -> `ai-edge-litert`
follows the rule)."""


def _requirements(extra: str, table: dict[str, list[str]]) -> set[str]:
    names = set()
    for line in table[extra]:
        name = re.split(r"[<>=\[ ]", line, maxsplit=1)[0]
        if name == "seqc":
            names |= {
                n
                for e in line[line.index("[") + 1 : line.index("]")].split(",")
                for n in _requirements(e, table)
            }
        else:
            names.add(name.lower())
    return names


def test_the_table_follows_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    core = {re.split(r"[<>=\[ ]", d, maxsplit=1)[0].lower() for d in project["dependencies"]}
    for module, named in EXTRAS.items():
        dist = DISTRIBUTION.get(module, module.replace("_", "-")).lower()
        if module == "jaxlib":  # comes with jax
            dist = "jax"
        assert dist not in core, f"{module} is in the core install: drop it from EXTRAS"
        for extra in named:
            assert dist in _requirements(extra, extras), f"seqc[{extra}] does not install {dist}"
        assert dist in _requirements("all", extras)
    assert not core & {"jax", "tensorflow-cpu", "onnxruntime", "ai-edge-litert", "onnx"}


def test_a_command_without_its_extra_says_which_to_install(tmp_path: Path) -> None:
    """`seqc train` where the backend's packages are missing (blocked in `sys.modules`, as an
    install without the extra would have them)."""
    script = (
        "import sys\n"
        "for m in ('jax', 'optax', 'orbax', 'sentencepiece', 'tensorflow'):\n"
        "    sys.modules[m] = None\n"
        "sys.argv = ['seqc', *sys.argv[1:]]\n"
        "from seqc.cli import main\n"
        "main()\n"
    )
    spec = ROOT / "examples" / "lm" / "shakespeare.seq"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            "train",
            str(spec),
            "-e",
            "lm.shakespeare.quick",
            "--run-dir",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert "seqc train:" in done.stderr and "pip install 'seqc[jax]'" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "run").exists()
