"""A run directory: everything needed to know what ran and to continue it.

spec/            the spec file and every file it imports, as they were (frozen text)
resolved.json    the resolved experiment, every value explicit, with provenance
run.json         experiment, seeds, backend, package versions, command line, start time
metrics.jsonl    one JSON object per logged step and per evaluation
events/          TensorBoard event files (tensorboardX)
checkpoints/     orbax checkpoints, every `train.checkpoint_every` steps
"""

from __future__ import annotations

import json
import platform
import shutil
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from seqc.compiler.program import Program
from seqc.compiler.resolve import ResolvedExperiment
from seqc.compiler.values import to_json
from seqc.spec.errors import FileError

PACKAGES = (
    "seqc",
    "jax",
    "jaxlib",
    "optax",
    "orbax-checkpoint",
    "tensorflow-cpu",
    "tensorflow",
    "numpy",
    "sentencepiece",
    "lark",
    "pydantic",
)


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


class RunDir:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.checkpoints = path / "checkpoints"
        self.metrics_path = path / "metrics.jsonl"
        self._writer: Any = None

    @classmethod
    def create(
        cls, path: Path, program: Program, resolved: ResolvedExperiment, resume: bool
    ) -> RunDir:
        run = cls(path)
        if not resume and (path / "checkpoints").exists():
            raise FileError(
                f"run directory {path} already holds a run",
                path=str(path),
                code="run-exists",
                hint="continue it with --resume, or choose another --run-dir",
            )
        path.mkdir(parents=True, exist_ok=True)
        spec_dir = path / "spec"
        if not spec_dir.exists():
            spec_dir.mkdir()
            for f in program.files:
                src = Path(f.path)
                if src.is_file():
                    shutil.copy2(src, spec_dir / src.name)
        data = {
            "name": resolved.name,
            "chain": list(resolved.chain),
            "tasks": list(resolved.tasks),
            "config": to_json(resolved.config),
            "provenance": {p: str(resolved.origin(p)) for p, _ in resolved.leaves()},
        }
        (path / "resolved.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
        return run

    def write_run_info(self, info: dict[str, Any]) -> None:
        info = {
            **info,
            "versions": versions(),
            "argv": sys.argv,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        (self.path / "run.json").write_text(json.dumps(info, indent=2, default=str) + "\n")

    def log(self, record: dict[str, Any]) -> None:
        with self.metrics_path.open("a") as f:
            f.write(json.dumps(record, default=float) + "\n")
        writer = self._tb()
        if writer is not None:
            step = int(record.get("step", 0))
            prefix = record.get("split", "train")
            for k, v in record.items():
                if isinstance(v, int | float) and k != "step":
                    writer.add_scalar(f"{prefix}/{k}", v, step)
            writer.flush()

    def truncate_metrics(self, step: int) -> None:
        """On resume, drop records past the checkpoint so the curve has no duplicates."""
        if not self.metrics_path.exists():
            return
        keep = [
            line
            for line in self.metrics_path.read_text().splitlines()
            if line.strip() and json.loads(line).get("step", 0) <= step
        ]
        self.metrics_path.write_text("".join(line + "\n" for line in keep))

    def _tb(self) -> Any:
        if self._writer is None:
            try:
                from tensorboardX import SummaryWriter
            except ImportError:  # event files are a convenience; metrics.jsonl is the record
                self._writer = False
                return None
            self._writer = SummaryWriter(str(self.path / "events"))
        return self._writer or None

    def close(self) -> None:
        if self._writer:
            self._writer.close()
