"""Early stopping: end a run when its dev score has stopped improving (`train.patience`).

Why: the recipe that trains best in a fixed budget is not the one that runs every step it was
given; a small corpus overfits, and the steps after the best dev score only cost time. The score
is the one the task is judged by: BLEU when the run measures it (`train.dev_translations`),
else WER, else perplexity (a CTC model's: its loss). A run of several tasks improves when any
task does. The step of the best score is kept, so a user knows which checkpoint to average
around or export.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# (figure, +1 when higher is better): the first a task's dev figures hold is its score
SCORES = (("bleu", 1.0), ("wer", -1.0), ("perplexity", -1.0), ("loss", -1.0))
"""A CTC model reports no perplexity (`seqc.run.scoring.evaluate`): without WER, its loss."""


def score_of(dev: dict[str, Any]) -> tuple[str, float] | None:
    """The figure a task's dev results are judged by, and its value with higher better."""
    for name, sign in SCORES:
        if name in dev:
            return name, sign * float(dev[name])
    return None


@dataclass
class Patience:
    """Counts dev evaluations since the last improvement of any task's score."""

    evaluations: int
    """Stop after this many evaluations without improvement; 0 never stops."""
    best: dict[str, tuple[float, int, str]] = field(default_factory=dict)
    """Each task's best (score, step, figure)."""
    stale: int = 0

    def update(self, step: int, dev: dict[str, dict[str, Any]]) -> bool:
        """Record the dev figures of `step` (by task); True when the run should stop now."""
        improved = False
        for task, figures in dev.items():
            scored = score_of(figures)
            if scored is None:
                continue
            name, value = scored
            if task not in self.best or value > self.best[task][0]:
                self.best[task] = (value, step, name)
                improved = True
        self.stale = 0 if improved else self.stale + 1
        return bool(self.evaluations) and self.stale >= self.evaluations

    def explain(self, step: int) -> str:
        """The line that says why the run stops at `step`."""
        parts = []
        for task, (value, at, name) in self.best.items():
            shown = value if name == "bleu" else -value
            prefix = f"{task}: " if len(self.best) > 1 else ""
            parts.append(f"{prefix}best dev {name} {shown:.2f} at step {at}")
        return (
            f"early stop at step {step}: no better dev score in {self.stale} evaluations "
            f"(train.patience = {self.evaluations}); " + ", ".join(parts)
        )
