"""What counts toward a sweep's budget and what runs again, on a real Optuna study in memory."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from seqc.run.sweep import ledger

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _study() -> optuna.Study:
    return optuna.create_study(storage=optuna.storages.InMemoryStorage())


def _trial(study: optuna.Study, state: TrialState, reason: str | None = None, **attrs: object):
    t = study.ask({"x": optuna.distributions.FloatDistribution(0.0, 1.0)})
    if reason is not None:
        t.set_user_attr("reason", reason)
    for k, v in attrs.items():
        t.set_user_attr(k, v)
    if state == TrialState.COMPLETE:
        study.tell(t, 1.0)
    elif state != TrialState.RUNNING:
        study.tell(t, state=state)
    return t


def test_results_count_and_stops_do_not() -> None:
    study = _study()
    _trial(study, TrialState.COMPLETE)
    _trial(study, TrialState.PRUNED)
    _trial(study, TrialState.FAIL, ledger.INVALID)
    _trial(study, TrialState.FAIL, ledger.ERROR)
    _trial(study, TrialState.FAIL, ledger.INTERRUPTED)
    _trial(study, TrialState.FAIL)  # lost: no reason
    _trial(study, TrialState.FAIL, ledger.SURPLUS)
    _trial(study, TrialState.RUNNING)
    trials = study.get_trials()
    assert ledger.counted(trials) == 4
    assert [t.number for t in ledger.needs_retry(trials)] == [4, 5]


def test_a_retry_takes_over_once_and_keeps_values_and_run_dir() -> None:
    study = _study()
    _trial(study, TrialState.FAIL, ledger.INTERRUPTED, run_dir="runs/x/trial-000")
    assert ledger.enqueue_retries(study) == 1
    assert ledger.enqueue_retries(study) == 0  # the queued retry has taken it over
    waiting = study.get_trials(states=(TrialState.WAITING,))
    assert len(waiting) == 1
    assert waiting[0].user_attrs == {"retry_of": 0, "run_dir": "runs/x/trial-000"}
    assert waiting[0].system_attrs["fixed_params"] == study.trials[0].params


def test_a_second_retry_of_one_trial_is_a_duplicate() -> None:
    study = _study()
    first = _trial(study, TrialState.FAIL, ledger.INTERRUPTED)
    ledger.enqueue_retry(study, study.trials[first.number])
    ledger.enqueue_retry(study, study.trials[first.number])  # two workers at once
    a = study.ask()
    assert not ledger.duplicate(study.get_trials(), a)  # it replaces the stopped trial
    b = study.ask()
    assert ledger.duplicate(study.get_trials(), b)  # `a` runs it already


def test_a_retry_of_a_retry_is_not_a_duplicate() -> None:
    study = _study()
    _trial(study, TrialState.FAIL, ledger.INTERRUPTED)
    ledger.enqueue_retries(study)
    again = study.ask()
    again.set_user_attr("reason", ledger.INTERRUPTED)
    study.tell(again, state=TrialState.FAIL)  # stopped again
    assert ledger.enqueue_retries(study) == 1
    third = study.ask()
    assert third.user_attrs["retry_of"] == 0
    assert not ledger.duplicate(study.get_trials(), third)


@pytest.mark.parametrize(
    ("running", "done", "surplus"), [(1, 2, True), (0, 2, False), (0, 3, True)]
)
def test_surplus_counts_the_trials_before(running: int, done: int, surplus: bool) -> None:
    study = _study()
    for _ in range(done):
        _trial(study, TrialState.COMPLETE)
    for _ in range(running):
        _trial(study, TrialState.RUNNING)
    me = _trial(study, TrialState.RUNNING)
    assert ledger.surplus(study.get_trials(), me.number, budget=3) is surplus
