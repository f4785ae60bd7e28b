"""A run directory: everything needed to know what ran and to continue it.

spec/            the spec file and every file it imports, as they were (frozen text), in their
                 folders relative to each other, so imports resolve and `seqc check` and
                 `seqc train --resume` run from here (`run.json` names the root spec)
resolved.json    the resolved experiment, every value explicit, with provenance
run.json         experiment, seeds, backend, package versions, command line, start time
metrics.jsonl    one JSON object per logged step and per evaluation
events/          TensorBoard event files (tensorboardX)
checkpoints/     orbax checkpoints, every `train.checkpoint_every` steps
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from seqc.data.readers import ORIGIN
from seqc.resolve.experiment import ResolvedExperiment
from seqc.resolve.program import Program
from seqc.resolve.values import to_json
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


def spec_tree(program: Program) -> tuple[Path, dict[Path, Path]]:
    """The folder that holds the root spec and every file it imports by a relative path, and
    each file's path relative to it: the layout a copy keeps so relative imports resolve.

    A file imported by an absolute path resolves to itself from any copy; it is copied beside
    the root spec for the record (under its own name)."""
    by_path = {Path(f.path).resolve(): f for f in program.files}
    root_spec = Path(program.root.path).resolve()
    relative, pending = {root_spec}, [root_spec]
    while pending:
        current = pending.pop()
        spec = by_path.get(current)
        for imp in spec.imports if spec is not None else ():
            if Path(imp.path).is_absolute():
                continue
            target = (current.parent / imp.path).resolve()
            if target not in relative:
                relative.add(target)
                pending.append(target)
    root = Path(os.path.commonpath([f.parent for f in relative]))
    files = {f: f.relative_to(root) for f in relative if f.is_file()}
    base = root_spec.parent.relative_to(root)
    for f in by_path:
        if f not in files and f.is_file():
            name, n = base / f.name, 1
            while name in files.values():
                name, n = base / f"{f.stem}.{n}{f.suffix}", n + 1
            files[f] = name
    return root, files


def copy_spec_tree(program: Program, dest: Path, origin: bool = True) -> Path:
    """Copy the spec and its imports into `dest` with their relative layout (`../common/x.seq`
    still resolves) and return the root spec's path inside `dest`. With `origin`, mark the copy
    with the folder it came from, where the spec's relative data paths still resolve."""
    root, files = spec_tree(program)
    dest.mkdir(parents=True, exist_ok=True)
    for src, rel in files.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel)
    if origin:
        (dest / ORIGIN).write_text(str(root) + "\n", encoding="utf-8")
    return dest / _root_spec(program, files)


def _root_spec(program: Program, files: dict[Path, Path]) -> Path:
    root_spec = Path(program.root.path).resolve()
    return files.get(root_spec, Path(root_spec.name))


class RunDir:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.checkpoints = path / "checkpoints"
        self.metrics_path = path / "metrics.jsonl"
        self.spec_file = path / "spec"
        """The frozen copy of the root spec (set by `create`)."""
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
        if spec_dir.exists():  # a resumed run keeps the spec it started with
            run.spec_file = spec_dir / _root_spec(program, spec_tree(program)[1])
        else:
            run.spec_file = copy_spec_tree(program, spec_dir)
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
            "spec": self.spec_file.relative_to(self.path).as_posix(),
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
