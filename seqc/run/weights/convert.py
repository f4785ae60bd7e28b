"""`seqc convert`: a checkpoint's weights written in another backend's format, tensor by tensor
by layer path, and read back to check that every tensor arrived exactly.

Why: weights are named by layer path on every backend, so a run trained on one evaluates,
decodes and exports on the other (`--checkpoint`); converting once saves doing it on every
load, and gives a folder of the other format to ship.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from seqc.backends.registry import check_backend
from seqc.backends.weights import read_weights, write_weights
from seqc.data.targets import new_folder
from seqc.spec.errors import FileError


@dataclass(frozen=True)
class Converted:
    """What `convert_weights` wrote."""

    tensors: int
    nbytes: int
    step: int
    source_backend: str
    backend: str
    path: Path
    dropped_state: bool
    """The source held the optimizer state too: it stays behind (the result is weights only)."""


def convert_weights(source: Path, backend: str, target: Path, step: int | None) -> Converted:
    """Write the weights of `source` (its checkpoint `step`, default the latest) to the new
    folder `target` in `backend`'s format; refused before any weight is read when `target`
    exists or `backend` is unknown, and refused after when they do not read back the same."""
    check_backend(backend)
    new_folder(target, "--out", "the converted weights")  # before any weight is read
    weights = read_weights(source, step)
    write_weights(weights, target, backend)
    back = read_weights(target)
    worst = max(
        (float(np.max(np.abs(back.params[k] - v), initial=0.0)) for k, v in weights.params.items()),
        default=0.0,
    )
    if set(back.params) != set(weights.params) or worst != 0.0:
        raise FileError(
            f"the converted weights at {target} differ from the source (max |diff| {worst})",
            path=str(target),
            code="convert-failed",
        )
    return Converted(
        tensors=len(weights.params),
        nbytes=sum(v.nbytes for v in weights.params.values()),
        step=weights.step,
        source_backend=weights.backend,
        backend=backend,
        path=target,
        dropped_state=weights.full_state,
    )
