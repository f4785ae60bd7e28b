"""Checkpoints of the JAX backend with orbax: every N steps, written to a temporary folder and
renamed when complete, so a crash mid-write never leaves a checkpoint that looks whole.

A checkpoint is the state pytree (`params` by layer path, `opt_state`, `step`, `rng`); a
weights-only one (`seqc convert`) holds `params` and `step`. Both read back as `Weights`
without building the model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from seqc.backends.api import Weights
from seqc.backends.weights import unreadable
from seqc.spec.errors import FileError, no_checkpoint


class Checkpoints:
    def __init__(self, directory: Path, keep: int = 3) -> None:
        self.directory = directory.resolve()
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True)
        self.manager = ocp.CheckpointManager(self.directory, options=options)

    def save(self, step: int, state: dict[str, Any]) -> None:
        self.manager.save(step, args=ocp.args.StandardSave(state), force=True)
        self.manager.wait_until_finished()

    def latest(self) -> int | None:
        return self.manager.latest_step()

    def restore(self, like: dict[str, Any], step: int | None = None) -> dict[str, Any]:
        """Restore into the structure of `like` (a freshly initialised state)."""
        step = self.latest() if step is None else step
        if step is None:
            raise no_checkpoint(self.directory)
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like)
        try:
            return self.manager.restore(step, args=ocp.args.StandardRestore(abstract))
        except Exception as e:  # orbax raises many kinds; all mean the same to a user
            raise FileError(
                f"checkpoint {step} in {self.directory} cannot be read: {type(e).__name__}: {e}",
                path=str(self.directory / str(step)),
                code="bad-checkpoint",
                hint="it may be corrupt or from a different model; delete it to fall back to an "
                "older one",
            ) from None

    def close(self) -> None:
        self.manager.close()


def read_weights(directory: Path, step: int | None = None) -> Weights:
    manager = ocp.CheckpointManager(directory)
    step = manager.latest_step() if step is None else step
    if step is None:
        raise no_checkpoint(directory)
    try:
        tree = manager.restore(step, args=ocp.args.StandardRestore())
    except Exception as e:  # orbax raises many kinds; all mean the same to a user
        raise unreadable(directory / str(step), e, step) from None
    finally:
        manager.close()
    if not isinstance(tree, dict) or not isinstance(tree.get("params"), dict):
        raise unreadable(directory / str(step), ValueError("no `params` in the saved tree"), step)
    params = {k: np.asarray(v) for k, v in tree["params"].items()}
    return Weights("jax", step, params, directory, "opt_state" in tree)


def write_weights(weights: Weights, directory: Path) -> None:
    options = ocp.CheckpointManagerOptions(create=True)
    manager = ocp.CheckpointManager(directory.resolve(), options=options)
    tree = {"params": weights.params, "step": np.asarray(weights.step, np.int32)}
    manager.save(weights.step, args=ocp.args.StandardSave(tree), force=True)
    manager.wait_until_finished()
    manager.close()
