"""Checkpoints of the JAX backend with orbax: every N steps, written to a temporary folder and
renamed when complete, so a crash mid-write never leaves a checkpoint that looks whole.

A checkpoint is the state pytree (`params` by layer path, `opt_state`, `step`, `rng`); a
weights-only one (`seqc convert`) holds `params` and `step`. Both read back as `Weights`
without building the model. Each checkpoint folder also holds the sha256 of its files
(`seqc.backends.checksums`): orbax restores a flipped bit in a compressed data file without
noticing, so damage is found by the sums, and reading falls back to the newest good checkpoint.

A save that cannot complete leaves nothing behind: on a full device it is refused before a byte
is written (`seqc.backends.disk`: orbax's own failure there comes with dozens of log lines and
tracebacks from its writer threads), and a save that fails anyway (the device filled meanwhile,
or another process of the run died) has its temporary folder removed and is reported as
`NoSpace` or `CollectiveFailed`, orbax's log lines about it held back. A temporary folder that
a killed run left is swept when the next run opens the folder (`cleanup_tmp_directories`).
"""

from __future__ import annotations

import logging
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from seqc.backends import checksums, disk
from seqc.backends.api import Weights
from seqc.backends.jax.mesh import CollectiveFailed, any_process, barrier, lost_peer
from seqc.backends.jax.staged import from_portable, portable
from seqc.backends.weights import damaged, newest_readable, unreadable
from seqc.spec.errors import no_checkpoint, no_step

SUMS = "seqc.sha256"
"""The checksum file inside each step folder."""
ASIDE = ".corrupt"
"""Suffix of a damaged step folder a resumed run moved out of the way (orbax ignores it)."""
TMP = ".orbax-checkpoint-tmp"
"""Suffix of the folder orbax writes a step into before renaming it to the step's number."""
SETTLE_S = 5.0
"""How long a failed save's leftovers are removed again as its writes under way land."""


def _files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and p.name != SUMS]


def _check(directory: Path, step: int) -> None:
    folder = directory / str(step)
    problem = checksums.verify(folder / SUMS, folder)
    if problem is not None:
        raise damaged(folder, problem, step)


class Checkpoints:
    def __init__(self, directory: Path, keep: int) -> None:
        self.directory = directory.resolve()
        self.keep = keep
        self.skipped: list[str] = []
        self._lost = False
        """A save failed because another process died: orbax still waits for it."""
        self.manager = self._manager()

    def _manager(self) -> ocp.CheckpointManager:
        options = ocp.CheckpointManagerOptions(
            max_to_keep=self.keep,
            create=True,
            cleanup_tmp_directories=True,  # a killed run's half-written step: never a step
        )
        return ocp.CheckpointManager(self.directory, options=options)

    def save(self, step: int, state: dict[str, Any]) -> None:
        state = portable(state)  # a pipeline's params by name, as every other run's
        needed = _nbytes(state)
        short = disk.free_bytes(self.directory) < needed
        if any_process(short):  # every process refuses together: none waits in the save
            raise disk.no_space(step, self.directory, needed)
        quiet = _Quiet().hold()
        try:
            self.manager.save(step, args=ocp.args.StandardSave(state), force=True)
            self.manager.wait_until_finished()
            if jax.process_index() == 0:  # one writer of the sums, after the commit
                folder = self.directory / str(step)
                checksums.write(folder / SUMS, folder, _files(folder))
        except Exception as e:
            full, lost = disk.is_full(e), jax.process_count() > 1 and lost_peer(e)
            if not (full or lost):
                quiet.release()
                raise
            quiet.keep()
            self._discard(step)
            if full:
                raise disk.no_space(step, self.directory, needed) from None
            self._lost = True
            raise CollectiveFailed(str(e)) from None
        quiet.release()
        barrier(f"seqc-saved-{step}")

    def _discard(self, step: int) -> None:
        """What a failed save of `step` wrote: orbax's temporary folder (a committed step keeps
        its folder, without sums: it reads as it is) and the sums' own temporary file. The
        save's writes already under way go on after it failed, into the folder they make
        again: removed until it stays gone (`SETTLE_S` at most; else the next run sweeps it)."""
        deadline = time.monotonic() + SETTLE_S
        while True:
            for tmp in self.directory.glob(f"{step}{TMP}*"):
                shutil.rmtree(tmp, ignore_errors=True)
            time.sleep(0.25)
            if not any(self.directory.glob(f"{step}{TMP}*")) or time.monotonic() > deadline:
                break
        sums = self.directory / str(step) / SUMS
        sums.with_name(sums.name + ".tmp").unlink(missing_ok=True)

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
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, portable(like, host=True))
        quiet = _Quiet().hold()  # a failed restore's reads fail as a failed save's writes do
        try:
            restored = self.manager.restore(step, args=ocp.args.StandardRestore(abstract))
        except Exception as e:  # orbax raises many kinds; all mean the same to a user
            quiet.keep()
            raise unreadable(self.directory / str(step), e, step) from e
        quiet.release()
        return from_portable(like, restored)

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
        if not self._lost:  # else closing waits for the dead process's part of the save
            self.manager.close()


def _nbytes(state: dict[str, Any]) -> int:
    """The bytes of a state's arrays (whole, not per process): about what its checkpoint takes
    (orbax's compression gains little on weights and moments)."""
    return sum(int(getattr(x, "nbytes", 0)) for x in jax.tree.leaves(state))


class _Quiet(logging.Filter):
    """What orbax says while a save runs, held back: the records of its logger (absl's), and
    the failures of its closed event loops. When a write fails, orbax closes the event loop of
    its call while TensorStore's other writes are still completing; each of their callbacks
    then fails with "Event loop is closed", an unraisable exception printed with its traceback,
    by the dozen, some after the save has raised. A failed save is said once, by the error
    seqc raises for it."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []
        self._logger = logging.getLogger("absl")
        self._previous = sys.unraisablehook

    def filter(self, record: logging.LogRecord) -> bool:
        self.records.append(record)
        return False

    def _unraisable(self, info: Any) -> None:
        exc = info.exc_value
        if not (isinstance(exc, RuntimeError) and "Event loop is closed" in str(exc)):
            self._previous(info)

    def hold(self) -> _Quiet:
        """Begin holding back; then `release` (the save went well) or `keep` (it failed)."""
        self._logger.addFilter(self)
        sys.unraisablehook = self._unraisable
        return self

    def release(self) -> None:
        """Let it all through as it came: the save went on, or failed for a reason seqc does not
        say itself."""
        self._logger.removeFilter(self)
        if sys.unraisablehook == self._unraisable:
            sys.unraisablehook = self._previous
        records, self.records = self.records, []
        for record in records:
            self._logger.handle(record)

    def keep(self) -> None:
        """Keep the failed save's leftovers quiet for as long as the process lives (it ends with
        seqc's error for the save): its threads may still log, its callbacks still fail."""
        self.records.clear()
        self.filter = lambda record: False  # type: ignore[method-assign]


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
