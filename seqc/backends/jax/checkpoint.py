"""Checkpoints of the JAX backend with orbax: every N steps, written to a temporary folder and
renamed when complete, so a crash mid-write never leaves a checkpoint that looks whole.

A checkpoint is the state pytree (`params` by layer path, `opt_state`, `step`, `rng`); a
weights-only one (`seqc convert`) holds `params` and `step`. Both read back as `Weights`
without building the model. Each checkpoint folder also holds the sha256 of its files
(`seqc.backends.checksums`): orbax restores a flipped bit in a compressed data file without
noticing, so damage is found by the sums, and reading falls back to the newest good checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from seqc.backends import checksums
from seqc.backends.api import Weights
from seqc.backends.jax.mesh import barrier
from seqc.backends.weights import newest_readable, unreadable
from seqc.spec.errors import no_checkpoint, no_step

SUMS = "seqc.sha256"
"""The checksum file inside each step folder."""
ASIDE = ".corrupt"
"""Suffix of a damaged step folder a resumed run moved out of the way (orbax ignores it)."""


def _files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and p.name != SUMS]


def _check(directory: Path, step: int) -> None:
    folder = directory / str(step)
    problem = checksums.verify(folder / SUMS, folder)
    if problem is not None:
        raise unreadable(folder, problem, step)


class Checkpoints:
    def __init__(self, directory: Path, keep: int = 3) -> None:
        self.directory = directory.resolve()
        self.keep = keep
        self.skipped: list[str] = []
        self.manager = self._manager()

    def _manager(self) -> ocp.CheckpointManager:
        options = ocp.CheckpointManagerOptions(max_to_keep=self.keep, create=True)
        return ocp.CheckpointManager(self.directory, options=options)

    def save(self, step: int, state: dict[str, Any]) -> None:
        self.manager.save(step, args=ocp.args.StandardSave(state), force=True)
        self.manager.wait_until_finished()
        if jax.process_index() == 0:  # one writer of the sums, as of the checkpoint's commit
            folder = self.directory / str(step)
            checksums.write(folder / SUMS, folder, _files(folder))
        barrier(f"seqc-saved-{step}")

    def latest(self) -> int | None:
        return self.manager.latest_step()

    def restore(self, like: dict[str, Any], step: int | None = None) -> dict[str, Any]:
        """Restore into the structure of `like` (a freshly initialised state): checkpoint
        `step`, or the newest readable one, setting damaged newer ones aside."""
        if step is not None:
            return self._restore(like, step)
        state, self.skipped = newest_readable(
            self.directory,
            self.manager.all_steps(),
            lambda s: self._restore(like, s),
            self._set_aside,
        )
        return state

    def _restore(self, like: dict[str, Any], step: int) -> dict[str, Any]:
        if step not in self.manager.all_steps():
            raise no_checkpoint(self.directory / str(step))
        _check(self.directory, step)
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like)
        try:
            return self.manager.restore(step, args=ocp.args.StandardRestore(abstract))
        except Exception as e:  # orbax raises many kinds; all mean the same to a user
            raise unreadable(self.directory / str(step), e, step) from e

    def _set_aside(self, step: int) -> None:
        """Move a damaged checkpoint out of the way: kept for inspection, and its step free
        for the resumed run to write again."""
        folder = self.directory / str(step)
        if jax.process_index() == 0:
            target, n = folder.with_name(folder.name + ASIDE), 1
            while target.exists():
                target, n = folder.with_name(f"{folder.name}{ASIDE}.{n}"), n + 1
            folder.rename(target)
        barrier(f"seqc-aside-{step}")
        self.manager.reload()

    def close(self) -> None:
        self.manager.close()


def steps(directory: Path) -> list[int]:
    """The steps orbax lists here, oldest first: the same list `read_weights` takes a step
    from (a folder still being written, or set aside, is not one)."""
    manager = ocp.CheckpointManager(directory, item_handlers=ocp.StandardCheckpointHandler())
    try:
        return sorted(manager.all_steps())
    finally:
        manager.close()


def read_weights(directory: Path, step: int | None = None) -> Weights:
    """The weights of checkpoint `step`, or of the newest readable one (read-only: damaged
    ones are passed over, not moved)."""
    manager = ocp.CheckpointManager(directory, item_handlers=ocp.StandardCheckpointHandler())
    try:
        steps = manager.all_steps() if step is None else [step]
        if step is not None and step not in manager.all_steps():
            raise no_step(directory, step, manager.all_steps())
        tree, skipped = newest_readable(directory, steps, lambda s: _read(manager, directory, s))
    finally:
        manager.close()
    s, tree = tree
    params = {k: np.asarray(v) for k, v in tree["params"].items()}
    return Weights("jax", s, params, directory, "opt_state" in tree, skipped)


def _read(manager: ocp.CheckpointManager, directory: Path, step: int) -> tuple[int, Any]:
    _check(directory, step)
    try:
        # Onto this process's first device, whatever mesh the checkpoint was written from.
        here = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
        target = jax.tree.map(
            lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=here),
            manager.item_metadata(step),
        )
        tree = manager.restore(step, args=ocp.args.StandardRestore(target))
    except Exception as e:  # orbax raises many kinds; all mean the same to a user
        raise unreadable(directory / str(step), e, step) from e
    if not isinstance(tree, dict) or not isinstance(tree.get("params"), dict):
        raise unreadable(directory / str(step), "it holds no `params`", step)
    return step, tree


def write_weights(weights: Weights, directory: Path) -> None:
    options = ocp.CheckpointManagerOptions(create=True)
    manager = ocp.CheckpointManager(directory.resolve(), options=options)
    tree = {"params": weights.params, "step": np.asarray(weights.step, np.int32)}
    manager.save(weights.step, args=ocp.args.StandardSave(tree), force=True)
    manager.wait_until_finished()
    manager.close()
    folder = directory.resolve() / str(weights.step)
    checksums.write(folder / SUMS, folder, _files(folder))
