"""Which trials count toward a sweep's `trials`, and which must run again.

Optuna records a trial as running, complete, pruned or failed. A sweep needs one more
distinction among the failed: a trial that failed on its own (its values break a rule, its run
crashed) is a result and counts; a trial that was stopped (Ctrl-C, SIGTERM) or lost (its worker
was killed) is not, and is run again. Its retry keeps the trial's values and its run directory,
and resumes from the run's last checkpoint, so the work done before the stop is kept and
nothing is counted twice. The reason is written as the trial's user attribute `reason` while it
is still running (Optuna freezes a finished trial); a failed trial without one was lost.
"""

from __future__ import annotations

from collections.abc import Sequence

import optuna
from optuna.trial import FrozenTrial, TrialState

INVALID = "invalid"
"""Its values break a rule of the spec (`d % heads`): reported, counted, never run."""
ERROR = "error"
"""Its run failed (a non-zero exit other than a stop): counted, with the log's last lines."""
INTERRUPTED = "interrupted"
"""Stopped by a signal to the sweep: not counted, retried from its checkpoint."""
DUPLICATE = "duplicate"
"""A second retry of one stopped trial (two workers enqueued it at once): ended unrun."""
SURPLUS = "surplus"
"""Started by a worker after others had filled the budget: ended unrun."""

UNCOUNTED = (INTERRUPTED, DUPLICATE, SURPLUS, None)
RETRIED = (INTERRUPTED, None)


def reason(t: FrozenTrial) -> str | None:
    return t.user_attrs.get("reason")


def root(t: FrozenTrial) -> int:
    """The number of the first trial of these values (a retry's original)."""
    return int(t.user_attrs.get("retry_of", t.number))


def counted(trials: Sequence[FrozenTrial]) -> int:
    """Trials that are results: complete, pruned, or failed on their own."""
    n = 0
    for t in trials:
        result = t.state in (TrialState.COMPLETE, TrialState.PRUNED)
        failed = t.state == TrialState.FAIL and reason(t) not in UNCOUNTED
        n += result or failed
    return n


def active(trials: Sequence[FrozenTrial]) -> int:
    return sum(t.state in (TrialState.RUNNING, TrialState.WAITING) for t in trials)


def needs_retry(trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    """Stopped or lost trials that no later trial has taken over."""
    later: dict[int, int] = {}
    for t in trials:
        later[root(t)] = max(later.get(root(t), -1), t.number)
    return [
        t
        for t in trials
        if t.state == TrialState.FAIL and reason(t) in RETRIED and later[root(t)] == t.number
    ]


def enqueue_retry(study: optuna.Study, t: FrozenTrial) -> None:
    """Queue `t` again: its values, its run directory, its original number."""
    attrs = {"retry_of": root(t)}
    if "run_dir" in t.user_attrs:
        attrs["run_dir"] = t.user_attrs["run_dir"]
    study.enqueue_trial(dict(t.params), user_attrs=attrs, skip_if_exists=False)


def enqueue_retries(study: optuna.Study) -> int:
    """Queue every stopped or lost trial that nothing has taken over; how many."""
    todo = needs_retry(study.get_trials(deepcopy=False))
    for t in todo:
        enqueue_retry(study, t)
    return len(todo)


def duplicate(trials: Sequence[FrozenTrial], me: FrozenTrial | optuna.Trial) -> bool:
    """A retry whose trial another retry has already taken over: the latest trial of the
    same values before it (not counting queued or ended-unrun ones) is not a stopped one."""
    if "retry_of" not in me.user_attrs:
        return False
    mine = int(me.user_attrs["retry_of"])
    before = [
        t
        for t in trials
        if root(t) == mine
        and t.number < me.number
        and t.state != TrialState.WAITING
        and reason(t) not in (DUPLICATE, SURPLUS)
    ]
    if not before:
        return False
    latest = max(before, key=lambda t: t.number)
    return not (latest.state == TrialState.FAIL and reason(latest) in RETRIED)


def surplus(trials: Sequence[FrozenTrial], number: int, budget: int) -> bool:
    """Whether the trials before `number` (results and those running) already fill the budget."""
    before = [t for t in trials if t.number < number]
    running = sum(t.state == TrialState.RUNNING for t in before)
    return counted(before) + running >= budget
