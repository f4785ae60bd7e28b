"""Checkpoints of the TF backend with `tf.train.Checkpoint`: params, optimizer state, step, seed.

Every variable the training step updates is saved, so a resumed run continues bit for bit as
on JAX. `tf.train.CheckpointManager` writes the data and index files first and the `checkpoint`
state file last, so a crash mid-write leaves the previous checkpoint as the latest one.
Variables are tracked by layer path (`params/blocks.0.attn.q.w`), which is what lets
`read_weights` read a TF checkpoint without building the model.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from seqc.backends.api import Weights
from seqc.backends.weights import unreadable
from seqc.spec.errors import FileError, no_checkpoint

PREFIX = "ckpt"
"""File prefix: `ckpt-<step>.index` and `ckpt-<step>.data-*` in the checkpoints folder."""


def _trackable(state: dict[str, Any]) -> tf.train.Checkpoint:
    """The object graph a TF checkpoint records: dicts of variables by layer path."""
    opt = state["opt"]
    return tf.train.Checkpoint(
        params=state["params"],
        step=state["step"],
        seed=state["seed"],
        opt=tf.train.Checkpoint(count=opt.count, slots=opt.slots),
    )


class TfCheckpoints:
    """The `Checkpoints` interface of the JAX backend (save, latest, restore, close) on TF."""

    def __init__(self, directory: Path, keep: int = 3) -> None:
        self.directory = directory.resolve()
        self.keep = keep
        self._manager: tf.train.CheckpointManager | None = None
        self._bound: dict[str, Any] | None = None

    def _for(self, state: dict[str, Any]) -> tf.train.CheckpointManager:
        if self._manager is None or self._bound is not state:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._manager = tf.train.CheckpointManager(
                _trackable(state),
                str(self.directory),
                max_to_keep=self.keep,
                checkpoint_name=PREFIX,
            )
            self._bound = state
        return self._manager

    def save(self, step: int, state: dict[str, Any]) -> None:
        self._for(state).save(checkpoint_number=step)

    def latest(self) -> int | None:
        path = tf.train.latest_checkpoint(str(self.directory)) if self.directory.is_dir() else None
        return None if path is None else int(path.rsplit("-", 1)[1])

    def restore(self, like: dict[str, Any], step: int | None = None) -> dict[str, Any]:
        """Assign the saved values to the variables of `like` (a model's `state`)."""
        step = self.latest() if step is None else step
        if step is None:
            raise no_checkpoint(self.directory)
        path = self.directory / f"{PREFIX}-{step}"
        try:
            status = _trackable(like).read(str(path))
            status.assert_existing_objects_matched()
        except Exception as e:  # TF raises NotFoundError, DataLossError, AssertionError, ...
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise FileError(
                f"checkpoint {step} in {self.directory} cannot be read: {type(e).__name__}: "
                f"{first}",
                path=str(path),
                code="bad-checkpoint",
                hint="it may be corrupt or from a different model; delete it to fall back to an "
                "older one",
            ) from None
        return like

    def close(self) -> None:
        self._manager = None


_TF_KEY = re.compile(r"^params/(.+)/\.ATTRIBUTES/VARIABLE_VALUE$")


def _unescape(name: str) -> str:
    """TF's object-graph escaping: `.` is written `..` and `/` is written `.S`."""
    out, i = [], 0
    while i < len(name):
        if name[i] == "." and i + 1 < len(name):
            out.append("/" if name[i + 1] == "S" else name[i + 1])
            i += 2
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


def read_weights(directory: Path, step: int | None = None) -> Weights:
    if step is None:
        latest = tf.train.latest_checkpoint(str(directory))
        if latest is None:
            raise no_checkpoint(directory)
        step = int(latest.rsplit("-", 1)[1])
    prefix = directory / f"{PREFIX}-{step}"
    try:
        reader = tf.train.load_checkpoint(str(prefix))
        keys = reader.get_variable_to_shape_map()
        params = {
            _unescape(m.group(1)): np.asarray(reader.get_tensor(k))
            for k in keys
            if (m := _TF_KEY.match(k))
        }
    except Exception as e:
        raise unreadable(prefix, e, step) from None
    if not params:
        raise unreadable(prefix, ValueError("no `params/...` variables in it"), step)
    full = any(k.startswith("opt/") for k in keys)
    return Weights("tf", step, params, directory, full)


def write_weights(weights: Weights, directory: Path) -> None:
    variables = {k: tf.Variable(v, name=k) for k, v in weights.params.items()}
    ckpt = tf.train.Checkpoint(params=variables, step=tf.Variable(weights.step, dtype=tf.int32))
    manager = tf.train.CheckpointManager(ckpt, str(directory), 1, checkpoint_name=PREFIX)
    manager.save(checkpoint_number=weights.step)
