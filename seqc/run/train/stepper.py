"""What the training loop steps: one task's model, or the tasks of a multi-task model in their mix.

The loop (`seqc.run.train.loop`) is written once over this seam: `batches(start)` gives, for
each step from `start`, the batch of every task that step trains (by task name), and `step`
takes the update. A single task is the mix of one task at every step; a multi-task run draws
its tasks from the mix (`seqc.run.train.mix`), each task reading its own input pipeline from its
own position, so a resumed run continues every pipeline exactly where it was.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from seqc.backends.api import Model, MultiTaskModel
from seqc.run.session import MultiTaskSession, Session
from seqc.run.train.candidates import Candidates, candidates_for
from seqc.run.train.mix import Mix

Warn = Callable[[str], None]


@dataclass
class Unit:
    """One task as the loop evaluates it: its session, its model (a view of a joint one), and
    the params it reads out of the whole state's."""

    session: Session
    model: Model
    params: Callable[[Any], Any]

    @property
    def has_dev(self) -> bool:
        return "dev" in self.session.pipeline.splits


class TaskSteps:
    """The steps of a one-task run."""

    def __init__(self, session: Session, model: Model, seed: int, warn: Warn) -> None:
        self.session, self.model = session, model
        self.candidates = candidates_for(session.compiled, session.pipeline, seed, warn=warn)
        self.units = {session.task: Unit(session, model, lambda p: p)}
        self.several = False
        # A parameter-server model's workers read their own batches (other models ignore it),
        # unless a sampled loss's candidates are attached (their labels' expected counts are
        # computed here from the batch's ids) or the audio is augmented (on the host, by the
        # pipeline): then the chief reads them and the batch travels.
        augmented = session.pipeline.splits["train"].augment is not None
        if self.candidates is None and not augmented:
            model.read_on_workers(session.pipeline.row_records("train"))

    def initial(self) -> dict[str, Any]:
        """Initial values known only from the data (a sampled loss's output bias)."""
        return {} if self.candidates is None else self.candidates.initial(self.session.compiled)

    def batches(
        self, start: int, loader: Mapping[str, Mapping[str, Any]] | None = None
    ) -> Iterator[dict[str, Any]]:
        """Each step's batch from `start`; the stream goes on from `loader` (its state as a
        checkpoint recorded it) when given, else from step `start`."""
        step = start
        task = self.session.task
        first = _position(loader, task, start)
        self.stream = self.session.pipeline.batches(
            "train", start_step=first, local_rows=self.model.local_rows
        )
        for batch in self.stream:
            if self.candidates is not None:  # a sampled loss: the step's candidate words
                batch = self.candidates.attach(batch, step)
            yield {task: batch}
            step += 1

    def loader_state(self) -> dict[str, dict[str, Any]]:
        """The data stream's state, for a checkpoint to record."""
        return {self.session.task: self.stream.get_state()}

    def step(
        self, state: Any, batches: Mapping[str, Any], rate: float
    ) -> tuple[Any, dict[str, Any]]:
        ((task, batch),) = batches.items()
        state, metrics = self.model.train_step(state, batch, rate)
        return state, {task: metrics}


class MultiTaskSteps:
    """The steps of a multi-task run: each step's tasks from the mix, each task's batch from its
    own pipeline, each task's learning rate scaled by its `lr_scale`."""

    def __init__(
        self, joint: MultiTaskSession, model: MultiTaskModel, mix: Mix, seed: int, warn: Warn
    ) -> None:
        self.joint, self.model, self.mix = joint, model, mix
        self.candidates: dict[str, Candidates | None] = {
            t: candidates_for(s.compiled, s.pipeline, seed, warn=warn)
            for t, s in joint.sessions.items()
        }
        self.units = {
            t: Unit(s, model.view(t), lambda p, t=t: model.task_params(t, p))
            for t, s in joint.sessions.items()
        }
        self.several = True

    def initial(self) -> dict[str, Any]:
        given: dict[str, Any] = {}
        for t, c in self.candidates.items():
            if c is not None:
                given |= c.initial(self.joint.sessions[t].compiled)
        return given

    def batches(
        self, start: int, loader: Mapping[str, Mapping[str, Any]] | None = None
    ) -> Iterator[dict[str, Any]]:
        """Each step's batches from `start`, each task's stream from its position: as the
        checkpoint's `loader` state recorded it, else as the mix says it was at `start`."""
        position = self.mix.positions(start)
        position = {t: _position(loader, t, p) for t, p in position.items()}
        streams = {
            t: s.pipeline.batches(
                "train", start_step=position[t], local_rows=self.units[t].model.local_rows
            )
            for t, s in self.joint.sessions.items()
        }
        self.streams = streams
        for picks in self.mix.schedule(start):
            out = {}
            for t in picks:
                batch = next(streams[t])
                candidates = self.candidates[t]
                if candidates is not None:
                    batch = candidates.attach(batch, position[t])
                position[t] += 1
                out[t] = batch
            yield out

    def loader_state(self) -> dict[str, dict[str, Any]]:
        """Each task's data stream's state, for a checkpoint to record."""
        return {t: s.get_state() for t, s in self.streams.items()}

    def step(
        self, state: Any, batches: Mapping[str, Any], rate: float
    ) -> tuple[Any, dict[str, Any]]:
        rates = {t: rate * self.mix.lr_scale[t] for t in batches}
        return self.model.train_step(state, batches, rates)


def _position(loader: Mapping[str, Mapping[str, Any]] | None, task: str, derived: int) -> int:
    """Where a task's stream goes on from: the recorded loader state's next index, else the
    position derived from the step."""
    state = (loader or {}).get(task) or {}
    return int(state.get("next_index", derived))
