"""What a sweep found: its trials as rows, the best trial and how to train it again, Optuna's
parameter importances, and Optuna's matplotlib plots written beside the study.

Nothing here computes a statistic of its own: importances are `optuna.importance`'s (fANOVA),
plots are `optuna.visualization.matplotlib`'s.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from seqc.run.sweep import ledger

STATES = {
    TrialState.COMPLETE: "complete",
    TrialState.PRUNED: "pruned",
    TrialState.RUNNING: "running",
    TrialState.WAITING: "queued",
}
HIDDEN = (ledger.DUPLICATE, ledger.SURPLUS)
"""Trials ended unrun by the sweep's own bookkeeping: not shown."""


def state(t: FrozenTrial) -> str:
    """A trial's state as the table says it: a failure says why (or that it was lost)."""
    if t.state != TrialState.FAIL:
        return STATES.get(t.state, t.state.name.lower())
    why = ledger.reason(t)
    if why is None:
        return "lost (retried)"
    if why == ledger.INTERRUPTED:
        return "stopped (resumes)"
    if why == ledger.INVALID:
        return "invalid"
    return "failed"


def steps(t: FrozenTrial) -> int | None:
    """How far its run trained: its last dev evaluation, or where it was stopped."""
    for key in ("steps", "stopped_at"):
        if t.user_attrs.get(key) is not None:
            return int(t.user_attrs[key])
    return max(t.intermediate_values) if t.intermediate_values else None


def value(t: FrozenTrial) -> float | None:
    """The trial's metric: its final value, or its last reported one (pruned, stopped)."""
    if t.value is not None:
        return t.value
    if t.intermediate_values:
        return t.intermediate_values[max(t.intermediate_values)]
    return None


@dataclass
class Row:
    number: int
    state: str
    params: dict[str, Any]
    value: float | None
    steps: int | None
    minutes: float | None
    note: str


def rows(study: optuna.Study) -> list[Row]:
    out = []
    for t in study.get_trials(deepcopy=False):
        if ledger.reason(t) in HIDDEN:
            continue
        note = ""
        if "retry_of" in t.user_attrs:
            note = f"retry of {t.user_attrs['retry_of']}"
        if t.state == TrialState.FAIL and t.user_attrs.get("error"):
            note = (note + "; " if note else "") + str(t.user_attrs["error"]).splitlines()[-1]
        minutes = t.user_attrs.get("minutes")
        out.append(Row(t.number, state(t), dict(t.params), value(t), steps(t), minutes, note))
    return out


def best(study: optuna.Study) -> FrozenTrial | None:
    complete = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
    finite = [t for t in complete if t.value is not None and math.isfinite(t.value)]
    if not finite:
        return None
    return study.best_trial


def importances(study: optuna.Study) -> dict[str, float]:
    """fANOVA importances of the parameters over the complete trials ({} with too few)."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(complete) < 2:
        return {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return dict(optuna.importance.get_param_importances(study))
    except (RuntimeError, ValueError, ZeroDivisionError):
        return {}  # one value per parameter, or no variation: nothing to attribute


PLOTS = {
    "history.png": "plot_optimization_history",
    "parallel.png": "plot_parallel_coordinate",
    "intermediate.png": "plot_intermediate_values",
}


def plots(study: optuna.Study, folder: Path) -> list[Path]:
    """Optuna's matplotlib plots of the study as PNGs in `folder`; those written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as vis

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, fn in PLOTS.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # Optuna marks these experimental
                ax = getattr(vis, fn)(study)
        except (ValueError, RuntimeError):
            continue  # nothing to draw yet (no complete trial, no intermediate values)
        fig = ax.figure if hasattr(ax, "figure") else ax.flat[0].figure
        fig.set_size_inches(9, 5.5)
        fig.tight_layout()
        fig.savefig(folder / name, dpi=100)
        plt.close(fig)
        written.append(folder / name)
    return written
