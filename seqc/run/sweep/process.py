"""One trial's `seqc train` process: started so that it dies with its worker, and followed
through the dev records it appends to its run directory's `metrics.jsonl`.

The trial is a real run, the same command a user types, so everything a run does (the frozen
spec, checkpoints, `--resume`, a clean stop on SIGTERM) holds for a trial too. It runs in a
session of its own, so a Ctrl-C at the terminal reaches the worker only, which stops the trial
itself (SIGTERM: the run checkpoints and exits 143). If the worker is killed outright, the
kernel sends the trial SIGUSR1 (`PR_SET_PDEATHSIG`), which stops it like SIGTERM, checkpoint
and all, but whose repeats (one per thread of the dying worker) never abort it: no trial trains
on with nobody to report to, and another worker resumes it from that checkpoint.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from seqc.run.rundir.lock import RunLock
from seqc.run.sweep import compile_cache
from seqc.run.train.interrupt import PARENT_GONE
from seqc.spec.errors import SeqcError

PR_SET_PDEATHSIG = 1
POLL_S = 0.2
STOPPED = tuple(
    code for sig in (signal.SIGTERM, signal.SIGINT, PARENT_GONE) for code in (-sig, 128 + sig)
)
"""Exit statuses of a run that a signal stopped (143 and 130 are seqc's, after its checkpoint)."""


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, PARENT_GONE)


@dataclass
class TrialCommand:
    """What `seqc train` is asked to do for one trial."""

    spec: Path
    experiment: str
    overrides: list[str]
    run_dir: Path
    log: Path
    backend: str | None = None
    extra: list[str] = field(default_factory=list)
    sweep_folder: Path | None = None
    """Where the sweep keeps what its trials share (`compile_cache`); None: nothing shared."""

    def resume(self) -> bool:
        """Continue the run directory's last checkpoint (a retried trial), or start afresh."""
        checkpoints = self.run_dir / "checkpoints"
        return checkpoints.is_dir() and any(checkpoints.iterdir())

    def argv(self) -> list[str]:
        args = ["train", str(self.spec), "-e", self.experiment]
        for o in self.overrides:
            args += ["--set", o]
        # the untrained model's dev figure is never reported: not computed either
        args += ["--run-dir", str(self.run_dir), "--no-progress", "--no-dev-eval-before"]
        if self.backend:
            args += ["--backend", self.backend]
        if self.resume():
            args.append("--resume")
        return [*args, *self.extra]

    def frozen_spec(self) -> Path | None:
        """The run's copy of the spec (`RUN/spec/...`, laid out as the spec tree it froze):
        the copy whose path is a tail of the spec's own."""
        folder = self.run_dir / "spec"
        whole = self.spec.resolve().parts
        for copy in folder.rglob(self.spec.name) if folder.is_dir() else ():
            tail = copy.relative_to(folder).parts
            if whole[-len(tail) :] == tail:
                return copy
        return None

    def shown(self) -> str:
        """The command that trains this trial again: `seqc train` on the run's frozen spec
        (once the run has written it) with the trial's overrides, in a new run directory."""
        import shlex

        spec = self.frozen_spec() or self.spec
        args = ["train", str(spec), "-e", self.experiment]
        for o in self.overrides:
            args += ["--set", o]
        return "seqc " + " ".join(shlex.quote(a) for a in args)


def wait_unlocked(run_dir: Path, limit_s: float = 120.0) -> None:
    """Wait for a run directory's last owner to let go (a trial of a killed worker finishing its
    checkpoint), so its retry resumes from that checkpoint instead of being refused."""
    deadline = time.monotonic() + limit_s
    while True:
        try:
            RunLock(run_dir).check()
            return
        except SeqcError:
            if time.monotonic() > deadline:
                raise
            time.sleep(POLL_S)


def start(command: TrialCommand) -> subprocess.Popen[bytes]:
    """The trial's process, its output appended to `command.log`."""
    command.log.parent.mkdir(parents=True, exist_ok=True)
    wait_unlocked(command.run_dir)
    log = open(command.log, "ab")  # noqa: SIM115 - the child holds it; closed by `finish`
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if command.sweep_folder is not None:
        env = compile_cache.trial_env(command.sweep_folder, env)
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "seqc.cli", *command.argv()],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
    finally:
        log.close()


class MetricsTail:
    """The records a run appends to `metrics.jsonl`, read as they come (whole lines only)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: TextIO | None = None
        self._partial = ""

    def new(self) -> Iterator[dict[str, Any]]:
        if self._file is None:
            if not self.path.is_file():
                return
            self._file = open(self.path, encoding="utf-8")  # noqa: SIM115 - kept open to tail
        chunk = self._file.read()
        if not chunk:
            return
        text = self._partial + chunk
        lines = text.split("\n")
        self._partial = lines.pop()
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                yield record

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def follow(
    proc: subprocess.Popen[bytes],
    metrics: Path,
    on_record: Callable[[dict[str, Any]], None],
    should_stop: Callable[[], bool],
) -> int:
    """Feed the run's records to `on_record` until it exits; SIGTERM it once `should_stop`
    says so (a pruned or interrupted trial: it checkpoints and exits). Its exit status."""
    tail = MetricsTail(metrics)
    asked = False
    try:
        while True:
            status = proc.poll()
            for record in tail.new():
                on_record(record)
            if status is not None:
                for record in tail.new():
                    on_record(record)
                return status
            if not asked and should_stop():
                asked = True
                proc.send_signal(signal.SIGTERM)
            time.sleep(POLL_S)
    finally:
        tail.close()


def last_lines(log: Path, n: int = 12) -> list[str]:
    """The end of a trial's log, for the error a failed trial reports."""
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    return [line for line in lines if line.strip()][-n:]


def stopped(status: int) -> bool:
    return status in STOPPED
