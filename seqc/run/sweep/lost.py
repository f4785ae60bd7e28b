"""Trials whose worker died: found by the worker's process, where no heartbeat exists.

An RDB storage records Optuna's heartbeat and fails a silent trial by itself. A journal file
has no heartbeat, but a journal is shared by the processes of one machine, which can see each
other: every running trial records its worker's host, pid and the kernel's start time of that
pid (so a recycled pid is not mistaken for the worker). A trial whose worker is gone from this
host is failed (without a `reason`: lost) and queued again by `ledger`. A trial of another
host (a journal on a shared file system) is left alone: that host's workers will find it.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import FrozenTrial, TrialState

HOST = socket.gethostname()


def started_at(pid: int) -> str | None:
    """The kernel's start time of `pid` (clock ticks since boot), or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]


def me() -> dict[str, str | int]:
    """This worker, as its trials record it."""
    pid = os.getpid()
    return {"host": HOST, "worker_pid": pid, "worker_start": started_at(pid) or ""}


def alive(t: FrozenTrial) -> bool:
    """Whether the worker of running trial `t` still runs (True when it cannot tell)."""
    attrs = t.user_attrs
    if attrs.get("host") != HOST or "worker_pid" not in attrs:
        return True
    start = started_at(int(attrs["worker_pid"]))
    return start is not None and start == str(attrs.get("worker_start", start))


def fail_lost(study: optuna.Study) -> list[FrozenTrial]:
    """Fail the running trials of this host whose worker is gone; those this call failed."""
    failed = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if alive(t):
            continue
        try:
            study.tell(t.number, state=TrialState.FAIL)
        except (UpdateFinishedTrialError, RuntimeError, ValueError):
            continue  # another worker got there first
        failed.append(t)
    return failed
