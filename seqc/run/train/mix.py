"""Which task a multi-task run trains at each step (`train { mix = {...}; mix_by = ... }`).

The mix is a pure function of (seed, step), like the data order, so a resumed run continues the
same sequence of tasks, and each task's input pipeline resumes at its own position: the number
of steps that trained the task before the checkpoint's step (`positions`). Nothing of the mix
needs storing in a checkpoint.

- `sample`: each step draws one task with probability proportional to its weight (Lingvo's
  default scheduler), from a generator seeded by (seed, step).
- `round_robin`: the tasks interleave deterministically in proportion to their weights (smooth
  weighted round robin: with equal weights, a b a b ...; with 2:1, a b a a b a ...), so over any
  window each task's share of the steps is as close to its weight as whole steps allow.
- `sum`: every step trains every task, on the weighted sum of their losses.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from seqc.compiler.config import TrainConfig
from seqc.compiler.run_checks import mix_weights
from seqc.resolve.experiment import ResolvedExperiment

_STREAM = 0x6D6978
"""Separates the mix's random stream from the other users of the seed."""


@dataclass(frozen=True)
class Mix:
    tasks: tuple[str, ...]
    weights: dict[str, float]
    """Normalised to sum to 1."""
    by: str
    seed: int
    lr_scale: dict[str, float]

    @classmethod
    def of(cls, resolved: ResolvedExperiment) -> Mix:
        """The experiment's mix, checked at the train block's lines (`mix_weights`, which
        `seqc check` runs too): every task named in `mix` and `lr_scale` is a task of the
        experiment; every task trains (weight > 0); a per-task learning rate needs steps of one
        task (not `sum`)."""
        train, tasks = TrainConfig.of(resolved.config["train"]), tuple(resolved.tasks)
        weights = mix_weights(resolved)
        total = sum(weights.values()) or 1.0
        return cls(
            tasks=tasks,
            weights={t: w / total for t, w in weights.items()},
            by=train.mix_by,
            seed=train.seed,
            lr_scale={t: train.lr_scale.get(t, 1.0) for t in tasks},  # a task not named: 1
        )

    def schedule(self, start: int = 0) -> Iterator[tuple[str, ...]]:
        """The tasks each step trains, from step `start` on."""
        if self.by == "sum":
            while True:
                yield self.tasks
        if self.by == "sample":
            step = start
            while True:
                yield (self._draw(step),)
                step += 1
        credit = dict.fromkeys(self.tasks, 0.0)
        step = 0
        while True:
            for t in self.tasks:  # smooth weighted round robin
                credit[t] += self.weights[t]
            top = max(credit.values()) - 1e-9  # ties (to rounding): the first task listed
            pick = next(t for t in self.tasks if credit[t] >= top)
            credit[pick] -= 1.0
            if step >= start:
                yield (pick,)
            step += 1

    def _draw(self, step: int) -> str:
        u = np.random.default_rng([self.seed, _STREAM, step]).random()
        edge = 0.0
        for t in self.tasks:
            edge += self.weights[t]
            if u < edge:
                return t
        return self.tasks[-1]

    def positions(self, step: int) -> dict[str, int]:
        """How many steps before `step` trained each task: where its pipeline resumes."""
        counts = dict.fromkeys(self.tasks, 0)
        for i, picks in enumerate(self.schedule(0)):
            if i >= step:
                break
            for t in picks:
                counts[t] += 1
        return counts

    def describe(self) -> str:
        shares = ", ".join(f"{t} {w:.2f}" for t, w in self.weights.items())
        scaled = {t: s for t, s in self.lr_scale.items() if s != 1.0}
        lr = "" if not scaled else "; lr x " + ", ".join(f"{t} {s:g}" for t, s in scaled.items())
        return f"mix by {self.by}: {shares}{lr}"
