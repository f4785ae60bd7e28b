"""Weights by layer path, whichever backend's checkpoint holds them.

Why a module of its own: a checkpoint written by one backend loads in another, tensor by tensor,
by layer path (`blocks.0.attn.q.w`), without building either model. Each backend reads and
writes its own format (`Backend.read_weights`, `Backend.write_weights`); this module finds which
backend wrote a folder (`seqc.backends.registry.checkpoint_backend`) and checks weights against a
model's op graph, naming the tensor and both shapes on a mismatch.

Only weights and the step cross backends: optimizer state is laid out differently by each, so a
converted checkpoint serves eval, decode and export, and a run resumes only from a checkpoint of
its own backend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

import numpy as np

from seqc.backends import registry
from seqc.backends.api import Weights
from seqc.compiler.graph import Graph
from seqc.spec.errors import FileError, no_checkpoint

T = TypeVar("T")

__all__ = [
    "Weights",
    "checkpoint_dir",
    "match_params",
    "newest_readable",
    "read_weights",
    "unreadable",
    "write_weights",
]


def checkpoint_dir(path: Path) -> Path:
    """The checkpoints folder of a run directory, or the folder itself."""
    return path / "checkpoints" if (path / "checkpoints").is_dir() else path


def read_weights(path: Path, step: int | None = None) -> Weights:
    """The weights of checkpoint `step` of a run directory or a checkpoints folder, written by
    any backend: by default the newest that can be read. `RUN/checkpoints/N` (or `ckpt-N`)
    names step N."""
    named = _named_step(path)
    if named is not None and step is None:
        path, step = named
    directory = checkpoint_dir(path)
    return registry.checkpoint_backend(directory).read_weights(directory.resolve(), step)


def names_weights(path: Path) -> bool:
    """Whether `path` can name weights: a run directory or checkpoints folder that exists, or
    one step of one (`RUN/checkpoints/N`, `.../ckpt-N`), which need not exist as a path: a TF
    checkpoint is files named `ckpt-N.*`, not a folder `N`."""
    return path.exists() or _named_step(path) is not None


def _named_step(path: Path) -> tuple[Path, int] | None:
    """(the checkpoints folder, N) for a path naming one checkpoint: `.../N` or `.../ckpt-N`."""
    name = path.name.removeprefix("ckpt-")
    if name.isdigit() and path.parent.is_dir() and not (path / "checkpoints").is_dir():
        return path.parent, int(name)
    return None


def write_weights(weights: Weights, directory: Path, backend: str) -> Path:
    """A weights-only checkpoint (params and step) in `backend`'s format, in a new folder."""
    if directory.exists() and any(directory.iterdir()):
        raise FileError(
            f"{directory} is not empty",
            path=str(directory),
            code="exists",
            hint="choose a new folder for the converted checkpoint",
        )
    registry.backend(backend).write_weights(weights, directory)
    return directory


def unreadable(path: Path, why: str | Exception, step: int) -> FileError:
    """The error of a checkpoint that exists but cannot be read, in any format. A library's
    own text (TensorStore's, TF's) stays out of the message: `--debug` shows it, chained."""
    if isinstance(why, Exception):
        why = f"its files are incomplete or do not decode ({type(why).__name__})"
    return FileError(
        f"checkpoint {step} at {path} cannot be read: {why}",
        path=str(path),
        code="bad-checkpoint",
        hint="it may be damaged or from another model; an older checkpoint is used when there "
        "is one, or name one with --checkpoint RUN/checkpoints/N",
    )


class CheckpointDamaged(FileError):
    """A checkpoint whose own sums say its files changed: the one case in which a run sets a
    checkpoint aside (a restore that fails for another reason, such as a model that is not the
    one that wrote it, leaves it where it is)."""


def damaged(path: Path, why: str, step: int) -> CheckpointDamaged:
    """The error of a checkpoint its sums find damaged (`checksums.verify`'s `why`)."""
    return CheckpointDamaged(
        f"checkpoint {step} at {path} cannot be read: {why}",
        path=str(path),
        code="bad-checkpoint",
        hint="it is damaged; an older checkpoint is used when there is one, or name one with "
        "--checkpoint RUN/checkpoints/N",
    )


def newest_readable(
    directory: Path,
    steps: Iterable[int],
    read: Callable[[int], T],
    set_aside: Callable[[int], None] | None = None,
) -> tuple[T, list[str]]:
    """`read` of the newest step that can be read, and why each newer one could not.

    With `set_aside` (a run about to resume from it), a checkpoint its sums find damaged is
    passed to it (moved out of the way) and the next older one tried; one that fails to restore
    for any other reason stops the resume there, moving nothing: its files are as written, so
    the model asking for it is what differs, and an older checkpoint would only hide that."""
    skipped: list[str] = []
    ordered = sorted(steps, reverse=True)
    if not ordered:
        raise no_checkpoint(directory)
    for step in ordered:
        try:
            return read(step), skipped
        except CheckpointDamaged as e:
            skipped.append(e.message)
            if set_aside is not None:
                set_aside(step)
        except FileError as e:
            if set_aside is not None:
                raise FileError(
                    f"checkpoint {step} in {directory} does not restore into this run's model, "
                    "though its files pass their checks (or have no sums to check): the model "
                    "differs from the one that wrote it",
                    path=str(directory),
                    code="checkpoint-mismatch",
                    found=e.message,
                    hint="resume with the run's own spec (its frozen copy is in RUN/spec) and "
                    "settings; nothing was moved",
                ) from e
            skipped.append(e.message)
    listed = "".join(f"\n  - {line}" for line in skipped)
    raise FileError(
        f"no checkpoint in {directory} can be read:{listed}",
        path=str(directory),
        code="bad-checkpoint",
        hint="start a new run (another --run-dir), or restore the files from a backup",
    )


def match_params(graph: Graph, weights: Weights) -> dict[str, np.ndarray]:
    """The weights in the graph's param order, float32; every mismatch named with its shapes."""
    problems: list[str] = []
    for name, p in graph.params.items():
        want = tuple(int(d) for d in p.type.shape)
        got = weights.params.get(name)
        if got is None:
            problems.append(f"missing tensor `{name}` (the model expects {list(want)})")
        elif tuple(got.shape) != want:
            problems.append(
                f"tensor `{name}` has shape {list(got.shape)}, the model expects {list(want)}"
            )
    extra = sorted(set(weights.params) - set(graph.params))
    problems += [f"unexpected tensor `{n}` {list(weights.params[n].shape)}" for n in extra]
    if problems:
        shown = problems[:8] + ([f"... and {len(problems) - 8} more"] if len(problems) > 8 else [])
        listed = "".join(f"\n  - {line}" for line in shown)
        raise FileError(
            f"the {registry.title(weights.backend)} checkpoint at {weights.path} (step "
            f"{weights.step}) does not fit this model:{listed}",
            path=str(weights.path),
            code="checkpoint-mismatch",
            hint="was it trained with another spec, experiment or --set? use the same ones",
        )
    return {n: np.asarray(weights.params[n], np.float32) for n in graph.params}
