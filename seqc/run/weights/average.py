"""The mean of a run's last N checkpoints' weights, as a checkpoint of its own (`seqc average`).

Why: at the end of training the weights wander around a minimum with the noise of the updates;
their mean over the last few checkpoints sits nearer its centre and usually scores better than
any one of them, for the cost of reading them. It is standard in machine translation: Vaswani
et al. (2017) averaged the last 5 checkpoints of their base Transformer and the last 20 of the
big one.

What is averaged: the weights only (an average of optimizer moments means nothing to a resumed
run), tensor by tensor by layer path, in float64 and cast back to each tensor's dtype; a tensor
that is not floating point (a count, a table of ids) must be the same in every checkpoint. The
result is written in the backend format of its sources, one checkpoint whose step is the newest
averaged, so `seqc eval`, `decode` and `export` take it with `--checkpoint` unchanged.

Where: `RUN/averaged/last-N-step-S` by default (N checkpoints, the newest at step S), beside
`RUN/checkpoints` and never inside it: `--resume` reads only `checkpoints/`, so training never
continues from an average, and no training checkpoint is overwritten. `averaged.json` in that
folder records the steps averaged and where they came from. The folder is written under a
temporary name and renamed when complete, so an interrupted average never looks whole.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from seqc.backends import registry
from seqc.backends.api import Backend, Weights
from seqc.backends.weights import checkpoint_dir, write_weights
from seqc.run.rundir.directory import no_run
from seqc.spec.errors import FileError, UsageError

FOLDER = "averaged"
"""The folder of a run directory that holds its averages (beside `checkpoints/`)."""
RECORD = "averaged.json"
"""The file inside an average's folder that says which steps it averages."""


@dataclass(frozen=True)
class Averaged:
    """What `average` wrote."""

    backend: str
    steps: list[int]
    tensors: int
    path: Path


def average(run: Path, last: int, target: Path | None = None) -> Averaged:
    """Average the newest `last` checkpoints of `run` into `target` (default: `averaged/` beside
    the checkpoints folder, `RUN/averaged/last-N-step-S` for a run directory); every refusal
    comes before anything is written."""
    if last < 1:
        raise UsageError(
            "--last must be at least 1",
            code="bad-count",
            expected="a whole number of checkpoints, 1 or more",
            found=str(last),
        )
    directory = _checkpoints(run)
    engine = registry.checkpoint_backend(directory)
    steps = _last_steps(engine, directory, last)
    target = target or directory.parent / FOLDER / f"last-{last}-step-{steps[-1]}"
    _check_target(target, directory)
    params = mean_params(engine, directory, steps)
    _write(engine, Weights(engine.name, steps[-1], params, target, False), directory, steps)
    return Averaged(engine.name, steps, len(params), target)


def _checkpoints(run: Path) -> Path:
    """The checkpoints folder of a run directory (or the folder given)."""
    if not run.exists():
        raise no_run(run)
    return checkpoint_dir(run)


def _last_steps(engine: Backend, directory: Path, last: int) -> list[int]:
    """The newest `last` steps, oldest first."""
    steps = engine.steps(directory.resolve())
    if len(steps) < last:
        held = ", ".join(str(s) for s in steps) or "none"
        raise UsageError(
            f"cannot average the last {last} checkpoints: {directory} holds {len(steps)} "
            f"(steps {held})",
            path=str(directory),
            code="too-few-checkpoints",
            hint=f"average fewer (--last {len(steps)}); training keeps only its newest few "
            "checkpoints, so save them more often (train.checkpoint_every) near the end",
        )
    return steps[-last:]


def _check_target(target: Path, directory: Path) -> None:
    """Refuse a folder that holds anything, or one inside the checkpoints folder (a step
    folder there would be a checkpoint that training resumes from)."""
    if target.resolve().is_relative_to(directory.resolve()):
        raise UsageError(
            f"{target} is inside the checkpoints folder {directory}",
            path=str(target),
            code="bad-out",
            hint="write the average elsewhere: training would resume from it there",
        )
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise FileError(
            f"{target} already exists",
            path=str(target),
            code="exists",
            hint="an average is never overwritten: remove it, or choose another --out",
        )


def mean_params(engine: Backend, directory: Path, steps: list[int]) -> dict[str, np.ndarray]:
    """The mean of the checkpoints' params, read one checkpoint at a time (memory: the sums and
    one checkpoint); floating-point tensors summed in float64 and cast back to their dtype."""
    first = _read(engine, directory, steps[0])
    sums = {k: v.astype(np.float64) if _floating(v) else v for k, v in first.params.items()}
    for step in steps[1:]:
        other = _read(engine, directory, step)
        _check_same(first, other, directory)
        for name, value in other.params.items():
            if _floating(value):
                sums[name] += value.astype(np.float64)
            elif not np.array_equal(value, first.params[name]):
                raise _differs(name, first.step, step, directory)
    n = len(steps)
    return {
        k: (sums[k] / n).astype(v.dtype) if _floating(v) else v for k, v in first.params.items()
    }


def _floating(value: np.ndarray) -> bool:
    """float16/32/64, and the ml_dtypes floats (bfloat16, float8) that numpy calls `V`."""
    return value.dtype.kind == "f" or "float" in value.dtype.name


def _read(engine: Backend, directory: Path, step: int) -> Weights:
    """Checkpoint `step`'s weights; a damaged one is named, not passed over for an older one."""
    try:
        return engine.read_weights(directory.resolve(), step)
    except FileError as e:
        if e.code != "bad-checkpoint":
            raise
        why = e.message.rsplit("\n  - ", 1)[-1]  # the one checkpoint tried, with its path
        raise FileError(
            f"cannot average: {why}",
            path=str(directory),
            code="bad-checkpoint",
            hint="average only the checkpoints after it (a smaller --last), or restore its files "
            "from a backup",
        ) from e


def _check_same(first: Weights, other: Weights, directory: Path) -> None:
    """The same tensor names, shapes and dtypes in both; the first difference (by name) named."""
    problems = {n: _difference(n, first, other) for n in set(first.params) | set(other.params)}
    found = {n: p for n, p in problems.items() if p is not None}
    if found:
        more = f" (and {len(found) - 1} more differences)" if len(found) > 1 else ""
        raise FileError(
            f"checkpoints {first.step} and {other.step} in {directory} hold different models: "
            f"{found[min(found)]}{more}",
            path=str(directory),
            code="checkpoint-mismatch",
            hint="only checkpoints of one model can be averaged: were files copied in from "
            "another run? average fewer (a smaller --last)",
        )


def _difference(name: str, first: Weights, other: Weights) -> str | None:
    """How tensor `name` differs in layout between two checkpoints, or None."""
    a, b = first.params.get(name), other.params.get(name)
    if a is None or b is None:
        return f"tensor `{name}` is in step {(first if b is None else other).step} only"
    if a.shape != b.shape or a.dtype != b.dtype:
        return (
            f"tensor `{name}` is {a.dtype}{list(a.shape)} in step {first.step}, "
            f"{b.dtype}{list(b.shape)} in step {other.step}"
        )
    return None


def _differs(name: str, first: int, step: int, directory: Path) -> FileError:
    return FileError(
        f"tensor `{name}` is not floating point and differs between steps {first} and {step} "
        f"in {directory}: it cannot be averaged",
        path=str(directory),
        code="cannot-average",
        hint="average fewer checkpoints (a smaller --last), ones where it is the same",
    )


def _write(engine: Backend, weights: Weights, directory: Path, steps: list[int]) -> None:
    """Write the average under a temporary name beside its target, check it reads back
    exactly, then rename it into place with its record."""
    target = weights.path
    target.parent.mkdir(parents=True, exist_ok=True)
    work = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.partial")
    work.mkdir()  # not `mkdtemp`: its folder is private (0700), the average should not be
    try:
        write_weights(weights, work, engine.name)
        _check_written(engine, work, weights)
        record = {
            "steps": steps,
            "step": weights.step,
            "backend": engine.name,
            "source": str(directory.resolve()),
            "tensors": len(weights.params),
            "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        (work / RECORD).write_text(json.dumps(record, indent=2) + "\n")
        if target.exists():  # an empty folder: `_check_target` let it through
            target.rmdir()
        work.rename(target)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _check_written(engine: Backend, folder: Path, weights: Weights) -> None:
    back = engine.read_weights(folder.resolve(), weights.step)
    same = back.params.keys() == weights.params.keys() and all(
        np.array_equal(back.params[k], v) for k, v in weights.params.items()
    )
    if not same:
        raise FileError(
            f"the average written to {folder} does not read back as written",
            path=str(folder),
            code="average-failed",
        )
