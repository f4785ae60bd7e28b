"""Checkpoints of the TF backend with `tf.train.Checkpoint`: params, optimizer state, step, seed.

Every variable the training step updates is saved, so a resumed run continues bit for bit as
on JAX. `tf.train.CheckpointManager` writes the data and index files first and the `checkpoint`
state file last, so a crash mid-write leaves the previous checkpoint as the latest one.
Variables are tracked by layer path (`params/blocks.0.attn.q.w`), which is what lets
`read_weights` read a TF checkpoint without building the model.

Under `MultiWorkerMirroredStrategy` every worker must save (saving may read variables through
collectives, which every worker joins), but one folder has one writer: TF's documented pattern
is that the chief writes the real checkpoint and the others write theirs to a scratch folder
they delete at once. `TfCheckpoints(..., writer=False)` is such another worker's store; it
restores from the real folder like the writer.

A save the device has no room for (TF raises `ResourceExhaustedError`: "No space left on
device") leaves nothing of itself: its temporary folder and any file of its step are removed,
and it is reported as `NoSpace` (`seqc.backends.disk`), the checkpoints before it intact. A
temporary folder that a killed run left (`ckpt-N_temp`) is swept when the next run opens the
folder.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from seqc.backends import checksums, disk
from seqc.backends.api import Weights
from seqc.backends.weights import damaged, newest_readable, unreadable
from seqc.spec.errors import no_checkpoint, no_step

PREFIX = "ckpt"
"""File prefix: `ckpt-<step>.index` and `ckpt-<step>.data-*` in the checkpoints folder."""
SUMS = ".sha256"
"""`ckpt-<step>.sha256`: the sha256 of that checkpoint's files (`seqc.backends.checksums`)."""
ASIDE = ".corrupt"
"""Suffix of the files of a damaged checkpoint a resumed run moved out of the way."""
TEMP = "_temp"
"""Suffix of the folder TF writes a checkpoint's shards into (`ckpt-N_temp`) before merging."""


def _trackable(state: dict[str, Any]) -> tf.train.Checkpoint:
    """The object graph a TF checkpoint records: dicts of variables by layer path."""
    opt = state["opt"]

    def track(o: Any) -> tf.train.Checkpoint:
        return tf.train.Checkpoint(count=o.count, slots=o.slots)

    # A multi-task model that steps one task at a time has an optimizer per task, and a step
    # count per task (its dropout seeds): `seqc.backends.tf.multitask`.
    per_task = isinstance(opt, dict)
    extra = {"task_steps": state["task_steps"]} if "task_steps" in state else {}
    return tf.train.Checkpoint(
        params=state["params"],
        step=state["step"],
        seed=state["seed"],
        opt=tf.train.Checkpoint(**{t: track(o) for t, o in opt.items()})
        if per_task
        else track(opt),
        **extra,
    )


def steps(directory: Path) -> list[int]:
    """The steps whose index file is here (not the `checkpoint` state file's list, which can
    name files that were set aside or deleted)."""
    found = []
    for index in directory.glob(f"{PREFIX}-*.index") if directory.is_dir() else []:
        number = index.name[len(PREFIX) + 1 : -len(".index")]
        if number.isdigit():
            found.append(int(number))
    return sorted(found)


def _files(directory: Path, step: int) -> list[Path]:
    return sorted(
        p for p in directory.glob(f"{PREFIX}-{step}.*") if not p.name.endswith((SUMS, ASIDE))
    )


def _sums(directory: Path, step: int) -> Path:
    return directory / f"{PREFIX}-{step}{SUMS}"


def _check(directory: Path, step: int) -> None:
    problem = checksums.verify(_sums(directory, step), directory)
    if problem is not None:
        raise damaged(directory / f"{PREFIX}-{step}", problem, step)


class TfCheckpoints:
    """The `CheckpointStore` of the TF backend (save, latest, restore, close), with the same
    checksums and fallback to the newest good checkpoint as JAX's."""

    def __init__(self, directory: Path, keep: int, *, writer: bool = True) -> None:
        self.directory = directory.resolve()
        self.keep = keep
        # False on a worker other than the chief of a multi-worker run: it saves into a scratch
        # folder it deletes, and never moves or deletes a file of the real one.
        self.writer = writer
        self.skipped: list[str] = []
        self._manager: tf.train.CheckpointManager | None = None
        self._bound: dict[str, Any] | None = None
        # Another worker's newest checkpoint: the real folder's at the start, then the ones it
        # saved or restored itself (the chief may already have written the next one, and the
        # loop's `latest() != step` test must give the same answer on every worker).
        self._last = None if writer else self._newest()
        if writer:  # the run owns the folder now: a killed run's half-written step goes
            for stale in self.directory.glob(f"{PREFIX}-*{TEMP}"):
                shutil.rmtree(stale, ignore_errors=True)

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
        if not self.writer:
            scratch = Path(tempfile.mkdtemp(prefix=f"seqc-{PREFIX}-{step}-"))
            try:
                _trackable(state).write(str(scratch / f"{PREFIX}-{step}"))
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            self._last = step
            return
        try:
            self._for(state).save(checkpoint_number=step)
            checksums.write(
                _sums(self.directory, step), self.directory, _files(self.directory, step)
            )
        except Exception as e:
            if not disk.is_full(e):
                raise
            self._discard(step)
            raise disk.no_space(step, self.directory) from None
        kept = set(steps(self.directory))
        for stale in self.directory.glob(f"{PREFIX}-*{SUMS}"):  # sums of deleted checkpoints
            number = stale.name[len(PREFIX) + 1 : -len(SUMS)]
            if number.isdigit() and int(number) not in kept:
                stale.unlink()

    def _discard(self, step: int) -> None:
        """Everything a failed save of `step` wrote: its temporary folder, its files, its sums
        (the `checkpoint` state file, written last, still names the step before)."""
        shutil.rmtree(self.directory / f"{PREFIX}-{step}{TEMP}", ignore_errors=True)
        sums = _sums(self.directory, step)
        for p in [*_files(self.directory, step), sums, sums.with_name(sums.name + ".tmp")]:
            p.unlink(missing_ok=True)
        self._manager = None  # it counts the step as written: a new one reads the folder

    def latest(self) -> int | None:
        return self._newest() if self.writer else self._last

    def _newest(self) -> int | None:
        found = steps(self.directory)
        return found[-1] if found else None

    def restore(self, like: dict[str, Any], step: int | None = None) -> dict[str, Any]:
        """Assign the saved values to the variables of `like` (a model's `state`): checkpoint
        `step`, or the newest readable one, setting damaged newer ones aside."""
        if step is not None:
            return self._restore(like, step)
        aside = self._aside if self.writer else None  # the writer alone moves files
        state, self.skipped = newest_readable(
            self.directory, steps(self.directory), lambda s: self._restore(like, s), aside
        )
        return state

    def _restore(self, like: dict[str, Any], step: int) -> dict[str, Any]:
        if step not in steps(self.directory):
            raise no_checkpoint(self.directory / f"{PREFIX}-{step}")
        _check(self.directory, step)
        path = self.directory / f"{PREFIX}-{step}"
        try:
            status = _trackable(like).read(str(path))
            status.assert_existing_objects_matched()
            status.expect_partial()  # the manager's own `save_counter` is not model state
        except Exception as e:  # TF raises NotFoundError, DataLossError, AssertionError, ...
            raise unreadable(path, e, step) from e
        self._last = step
        return like

    def _aside(self, step: int) -> None:
        """Move a damaged checkpoint's files out of the way (renamed `...corrupt`)."""
        for p in [*_files(self.directory, step), _sums(self.directory, step)]:
            if p.exists():
                p.rename(p.with_name(p.name + ASIDE))

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
    """The weights of checkpoint `step`, or of the newest readable one (read-only: damaged
    ones are passed over, not moved)."""
    if step is not None and step not in steps(directory):
        raise no_step(directory, step, steps(directory))
    candidates = steps(directory) if step is None else [step]
    (found, params, full), skipped = newest_readable(
        directory, candidates, lambda s: _read(directory, s)
    )
    return Weights("tf", found, params, directory, full, skipped)


def _read(directory: Path, step: int) -> tuple[int, dict[str, np.ndarray], bool]:
    _check(directory, step)
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
        raise unreadable(prefix, e, step) from e
    if not params:
        raise unreadable(prefix, "it holds no `params/...` variables", step)
    return step, params, any(k.startswith("opt/") for k in keys)


def write_weights(weights: Weights, directory: Path) -> None:
    variables = {k: tf.Variable(v, name=k) for k, v in weights.params.items()}
    ckpt = tf.train.Checkpoint(params=variables, step=tf.Variable(weights.step, dtype=tf.int32))
    manager = tf.train.CheckpointManager(ckpt, str(directory), 1, checkpoint_name=PREFIX)
    manager.save(checkpoint_number=weights.step)
    root = directory.resolve()
    checksums.write(_sums(root, weights.step), root, _files(root, weights.step))
