"""Where the run commands find backends and artifact formats, by name.

A name maps to the module that implements the contract of `seqc.backends.api` (its `BACKEND` or
`FORMAT`); the module is imported on first use, so `seqc check` never loads a framework and a
JAX run never loads TensorFlow. Adding a backend is one line here and one folder.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from seqc.spec.errors import FileError, UsageError

if TYPE_CHECKING:
    from seqc.backends.api import ArtifactFormat, Backend

BACKENDS = {"jax": "seqc.backends.jax.backend", "tf": "seqc.backends.tf.backend"}
TITLES = {"jax": "JAX", "tf": "TensorFlow"}
CALIBRATION = "seqc.backends.tf.calibrate"
"""The module (run as `python -m`) that measures this machine's device numbers for the placer,
with the backend that runs placed programs; prints them as one JSON line."""
FORMATS = {
    "onnx": "seqc.backends.onnx.artifact",
    "tflite": "seqc.backends.tflite.artifact",
    "savedmodel": "seqc.backends.tf.artifact",
}


def _known(name: str, table: dict[str, str], what: str, code: str) -> str:
    if name not in table:
        raise UsageError(
            f"unknown {what} `{name}`", code=code, expected=", ".join(table), found=name
        )
    return name


def check_backend(name: str) -> str:
    return _known(name, BACKENDS, "backend", "bad-backend")


def title(name: str) -> str:
    """A backend's name in messages (`JAX`, `TensorFlow`), without importing it."""
    return TITLES.get(name, name)


def backend(name: str) -> Backend:
    return importlib.import_module(BACKENDS[check_backend(name)]).BACKEND


def check_format(name: str) -> str:
    return _known(name, FORMATS, "export format", "bad-format")


def artifact_format(name: str) -> ArtifactFormat:
    return importlib.import_module(FORMATS[check_format(name)]).FORMAT


def checkpoint_backend(directory: Path) -> Backend:
    """The backend whose checkpoints are in this folder (each backend recognises its own)."""
    if not directory.is_dir():
        raise FileError(
            f"no checkpoints at {directory}",
            path=str(directory),
            code="no-checkpoint",
            hint="give a run directory or its checkpoints folder; train first if there is none",
        )
    for name in BACKENDS:
        found = backend(name)
        if found.wrote(directory):
            return found
    raise FileError(
        f"{directory} holds no checkpoint of any backend",
        path=str(directory),
        code="no-checkpoint",
        hint="expected numbered folders (JAX, orbax) or ckpt-N.index files (TF)",
    )
