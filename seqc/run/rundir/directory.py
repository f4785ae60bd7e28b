"""A run directory: everything needed to know what ran and to continue it.

spec/            the spec file and every file it imports, as they were (frozen text), in their
                 folders relative to each other, so imports resolve and `seqc check` and
                 `seqc train --resume` run from here (`run.json` names the root spec)
resolved.json    the resolved experiment, every value explicit, with provenance
run.json         experiment, seeds, backend, package versions, command line, start time, and
                 each resume (when, from which step)
metrics.jsonl    one JSON object per logged step, per evaluation and per checkpoint written
                 (`"split": "checkpoint"` with its training minutes), never a step twice
events/          TensorBoard event files (tensorboardX)
checkpoints/     the backend's checkpoints, every `train.checkpoint_every` steps
averaged/last-N-step-S/  written by `seqc average`: the mean of the N newest checkpoints (the
                 newest at step S) in the same format, and averaged.json (the steps); outside
                 checkpoints/, so `--resume` never takes it
eval/STEP-SPLIT/ written by `seqc eval` for a translation task (`-TASK` added in a multi-task
                 run): sources.txt, hypotheses.txt (detokenized) and references.txt, line N of
                 each the split's example N, and scores.json (BLEU, chrF, sacreBLEU signatures,
                 example count, checkpoint, decode strategy); replaced whole by a later eval
.lock            held (an OS file lock) by the run that owns the directory
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
from seqc.run.rundir.lock import RunLock, unwritable
from seqc.run.rundir.resume import check_resume
from seqc.spec.errors import FileError, source_text

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


def no_run(path: Path) -> FileError:
    """The error for a run directory or checkpoint that is not where a command was told."""
    return FileError(
        f"no run directory or checkpoint at {path}",
        path=str(path),
        code="no-checkpoint",
        hint=f"train first: seqc train SPEC -e EXP --run-dir {path}",
    )


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


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
    """Copy the spec and its imports, as they were parsed, into `dest` with their relative
    layout (`../common/x.seq` still resolves) and return the root spec's path inside `dest`.
    With `origin`, mark the copy with the folder it came from, where the spec's relative data
    paths still resolve."""
    root, files = spec_tree(program)
    parsed = {Path(f.path).resolve(): source_text(f.path) for f in program.files}
    dest.mkdir(parents=True, exist_ok=True)
    for src, rel in files.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        text = parsed.get(src)
        if text is None:  # not read by this process's parser (none such today)
            shutil.copy2(src, dest / rel)
            continue
        # the text that was parsed, not the file as it is now: an edit made since must not
        # reach the copy that says what ran
        with open(dest / rel, "w", encoding="utf-8", newline="") as f:
            f.write(text)
    if origin:  # also marks the top of the tree: imports resolve inside it (resolve/program.py)
        (dest / ORIGIN).write_text(str(root) + "\n", encoding="utf-8")
    else:
        (dest / "seqc.toml").write_text("# a frozen copy of a spec tree: its root\n")
    return dest / _root_spec(program, files)


def _root_spec(program: Program, files: dict[Path, Path]) -> Path:
    root_spec = Path(program.root.path).resolve()
    return files.get(root_spec, Path(root_spec.name))


class RunDir:
    """A run directory. `check` validates without writing; the writes (`start`, `resumed`,
    `log`) happen under `lock`, which one run holds at a time."""

    def __init__(self, path: Path, writer: bool = True) -> None:
        self.path = path
        self.writer = writer
        """False on the processes of a group other than the primary: they only read."""
        self.checkpoints = path / "checkpoints"
        self.metrics_path = path / "metrics.jsonl"
        self.spec_file = path / "spec"
        """The frozen copy of the root spec (set by `start` and `resumed`)."""
        self._writer: Any = None

    def has_checkpoints(self) -> bool:
        return self.checkpoints.is_dir() and any(self.checkpoints.iterdir())

    def check(self, resolved: ResolvedExperiment, resume: bool, locked: bool = False) -> None:
        """Everything that can refuse a run, before anything is written (`locked`: this
        process holds the directory's lock already)."""
        if self.path.exists() and not self.path.is_dir():
            raise unwritable(self.path, OSError(20, "Not a directory"))
        if not locked and self.writer:
            self.lock().check()  # another run owning it says so first, whatever else is wrong
        if resume:
            if not self.has_checkpoints():
                raise FileError(
                    f"nothing to resume in {self.path}: it holds no checkpoint",
                    path=str(self.checkpoints),
                    code="no-checkpoint",
                    hint="drop --resume to start a new run here",
                )
            check_resume(self.path, resolved)
        elif self.has_checkpoints():
            raise FileError(
                f"run directory {self.path} already holds a run",
                path=str(self.path),
                code="run-exists",
                hint="continue it with --resume, or choose another --run-dir",
            )

    def lock(self) -> RunLock:
        return RunLock(self.path)

    def start(self, program: Program, resolved: ResolvedExperiment, info: dict[str, Any]) -> None:
        """A new run: the frozen spec, the resolved experiment and the run's facts."""
        if not self.writer:
            return
        try:
            spec_dir = self.path / "spec"
            if spec_dir.exists():  # a run that stopped before its first checkpoint
                shutil.rmtree(spec_dir)
            self.spec_file = copy_spec_tree(program, spec_dir)
            self._write_resolved(resolved)
            info = {
                **info,
                "spec": self.spec_file.relative_to(self.path).as_posix(),
                "versions": versions(),
                "argv": sys.argv,
                "started": _now(),
            }
            (self.path / "run.json").write_text(json.dumps(info, indent=2, default=str) + "\n")
            self.metrics_path.write_text("")
        except OSError as e:
            raise unwritable(self.path, e) from None

    def resumed(self, program: Program, resolved: ResolvedExperiment, step: int) -> None:
        """A resumed run keeps its spec and facts; the resume is added to `run.json`, the
        settings it may change (`seqc.run.rundir.resume.ALLOWED`) to `resolved.json`, and the
        metrics past the checkpoint are dropped."""
        self.spec_file = self.path / "spec" / _root_spec(program, spec_tree(program)[1])
        if not self.writer:
            return
        try:
            self._write_resolved(resolved)
            run_json = self.path / "run.json"
            info = json.loads(run_json.read_text()) if run_json.exists() else {}
            info.setdefault("resumed", []).append(
                {"at": _now(), "from_step": step, "argv": sys.argv, "versions": versions()}
            )
            run_json.write_text(json.dumps(info, indent=2, default=str) + "\n")
            self.truncate_metrics(step)
        except OSError as e:
            raise unwritable(self.path, e) from None

    def _write_resolved(self, resolved: ResolvedExperiment) -> None:
        data = {
            "name": resolved.name,
            "chain": list(resolved.chain),
            "tasks": list(resolved.tasks),
            "config": to_json(resolved.config),
            "provenance": {p: str(resolved.origin(p)) for p, _ in resolved.leaves()},
        }
        (self.path / "resolved.json").write_text(json.dumps(data, indent=2, default=str) + "\n")

    def log(self, record: dict[str, Any]) -> None:
        """One line of metrics, written whole and flushed to the OS: a crash leaves at most a
        torn last line, which `truncate_metrics` drops."""
        if not self.writer:
            return
        try:
            with self.metrics_path.open("a") as f:
                f.write(json.dumps(record, default=float) + "\n")
        except OSError as e:
            raise unwritable(self.path, e) from None
        writer = self._tb()
        if writer is not None:
            step = int(record.get("step", 0))
            prefix = record.get("split", "train")
            if "task" in record:  # a multi-task run: one chart per task
                prefix = f"{prefix}/{record['task']}"
            for k, v in record.items():
                if isinstance(v, int | float) and k != "step":
                    writer.add_scalar(f"{prefix}/{k}", v, step)
                elif isinstance(v, list) and all(isinstance(x, int | float) for x in v):
                    for i, x in enumerate(v):  # a vector (experts' loads): one chart per entry
                        writer.add_scalar(f"{prefix}/{k}/{i}", x, step)
            writer.flush()

    def truncate_metrics(self, step: int) -> None:
        """On resume, drop records past the checkpoint so no step is logged twice, and a
        torn last line (a crash mid-write); a line that cannot be read elsewhere is an error."""
        if not self.metrics_path.exists():
            return
        lines = self.metrics_path.read_text(errors="replace").splitlines()
        keep = []
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                if i == len(lines) - 1:  # torn by a crash: the checkpoint has what matters
                    break
                raise FileError(
                    f"{self.metrics_path} line {i + 1} is not JSON",
                    path=f"{self.metrics_path}:{i + 1}",
                    code="bad-metrics",
                    hint="remove or repair that line, then resume again",
                ) from None
            if record.get("step", 0) <= step:
                keep.append(line)
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
