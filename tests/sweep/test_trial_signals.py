"""A trial whose sweep worker is killed stops cleanly, once: the kernel's parent-death signal
comes again for each thread of the dying worker, and none of those echoes may abort the trial
in the middle of its stop checkpoint (they did while the signal was SIGTERM, whose second
delivery means "abort now")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from seqc.run.train.interrupt import PARENT_GONE, StopRequests

CHILD = """
import sys, time
from seqc.run.train.interrupt import StopRequests
out = open(sys.argv[1], "a", buffering=1)
with StopRequests() as stop:
    out.write("ready\\n")
    while stop.signum is None:
        time.sleep(0.01)
    out.write(f"stopping on {stop.signum}\\n")
    time.sleep(1.0)  # the stop checkpoint, while the echoes arrive
    out.write("checkpointed\\n")
"""

WORKER = """
import subprocess, sys, threading, time
from seqc.run.sweep.process import _die_with_parent
for _ in range(16):  # the threads a worker has (Optuna's heartbeat, readers, XLA's pool)
    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], preexec_fn=_die_with_parent)
time.sleep(600)
"""


def test_a_repeated_parent_death_signal_does_not_abort_the_stop() -> None:
    with StopRequests() as stop:
        for _ in range(3):
            os.kill(os.getpid(), PARENT_GONE)
            time.sleep(0.01)
        assert stop.signum == PARENT_GONE  # still here: the repeats were not a second signal


def test_a_trial_whose_worker_is_killed_finishes_its_checkpoint(tmp_path: Path) -> None:
    log = tmp_path / "trial.log"
    worker = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(WORKER), textwrap.dedent(CHILD), str(log)]
    )
    try:
        deadline = time.monotonic() + 60
        while "ready" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline, "the trial never started"
            time.sleep(0.05)
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
        deadline = time.monotonic() + 30
        while "checkpointed" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
    finally:
        worker.kill()
    assert f"stopping on {int(PARENT_GONE)}" in log.read_text()
