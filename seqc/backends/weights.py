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

from pathlib import Path

import numpy as np

from seqc.backends import registry
from seqc.backends.api import Weights
from seqc.compiler.graph import Graph
from seqc.spec.errors import FileError

__all__ = [
    "Weights",
    "checkpoint_dir",
    "match_params",
    "read_weights",
    "unreadable",
    "write_weights",
]


def checkpoint_dir(path: Path) -> Path:
    """The checkpoints folder of a run directory, or the folder itself."""
    return path / "checkpoints" if (path / "checkpoints").is_dir() else path


def read_weights(path: Path, step: int | None = None) -> Weights:
    """The weights of checkpoint `step` (the latest by default) of a run directory or a
    checkpoints folder, written by any backend."""
    directory = checkpoint_dir(path)
    return registry.checkpoint_backend(directory).read_weights(directory.resolve(), step)


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


def unreadable(path: Path, e: Exception, step: int) -> FileError:
    """The error of a checkpoint that exists but cannot be read, in any format: the first line
    of what the library said, not its whole text."""
    first = (str(e).strip().splitlines() or [""])[0]
    return FileError(
        f"checkpoint {step} at {path} cannot be read: {type(e).__name__}: {first}",
        path=str(path),
        code="bad-checkpoint",
        hint="it may be corrupt or not a seqc checkpoint; delete it to fall back to an older one",
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
