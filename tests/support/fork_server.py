"""Processes of a test's group forked from one process that has imported TensorFlow, in place of
a fresh interpreter each (`ForkServer`, the `forks` fixture): the import is about 6 CPU-s, most
of what a process of a group costs. Used by the TF process tests; a test of `seqc launch` itself
still starts fresh processes, so an import-time fault in a new process still shows there."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FORK_SERVER = r"""
import json, os, runpy, select, sys
import tensorflow  # what each process would import again: it is what forking saves

def serve():
    # Fork a process for each order read from stdin (one JSON line: argv, env, log), reporting
    # its pid and, once reaped, its exit code on stdout. In a forked process this returns the
    # order to run; in this one it returns None at EOF, the rest killed.
    pending, running = b"", set()
    while True:
        if select.select([0], [], [], 0.1)[0]:
            data = os.read(0, 1 << 16)
            if not data:
                break
            pending += data
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            order = json.loads(line)
            pid = os.fork()
            if pid == 0:
                return order
            running.add(pid)
            print(json.dumps({"started": pid}), flush=True)
        while running:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            running.discard(pid)
            code = os.waitstatus_to_exitcode(status)
            print(json.dumps({"ended": pid, "code": code}), flush=True)
    for pid in running:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    return None

order = serve()
if order is not None:  # a forked process: as `Popen(argv, start_new_session=True)` starts one
    os.setsid()
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    log = os.open(order["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.environ.update(order["env"])
    sys.argv = order["argv"]
    if sys.argv[0] == "seqc":  # `python -m seqc.cli ...`
        runpy.run_module("seqc.cli", run_name="__main__", alter_sys=True)
    else:  # `python SCRIPT ...`
        runpy.run_path(sys.argv[0], run_name="__main__")
"""


class Forked:
    """A process the fork server started, with the part of `subprocess.Popen` the tests use."""

    def __init__(self, pid: int, server: ForkServer) -> None:
        self.pid = pid
        self.server = server

    @property
    def returncode(self) -> int | None:
        return self.server.codes.get(self.pid)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float) -> int:
        with self.server.changed:
            if not self.server.changed.wait_for(lambda: self.pid in self.server.codes, timeout):
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
        return self.server.codes[self.pid]

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:  # not reaped yet, so the pid is still this process's
            os.kill(self.pid, signum)


class ForkServer:
    """Starts processes by forking one that has imported TensorFlow (`FORK_SERVER`), in place of
    a fresh interpreter each: the import is about 6 CPU-s, most of what a process of a group
    costs (a parameter server's whole life). The processes are its children: it reaps them and
    reports their exit codes, and kills those still running when it is closed."""

    def __init__(self, log: Path) -> None:
        with open(log, "w") as sink:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", FORK_SERVER],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=sink,
                text=True,
                cwd=ROOT,
            )
        self.log = log
        self.codes: dict[int, int] = {}
        self.changed = threading.Condition()
        self.started: queue.Queue[int] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            report = json.loads(line)
            if "started" in report:
                self.started.put(report["started"])
            else:
                with self.changed:
                    self.codes[report["ended"]] = report["code"]
                    self.changed.notify_all()

    def start(self, argv: list[str], log: Path, env: dict[str, str] | None = None) -> Forked:
        """`python -m seqc.cli ARGS` for `argv` `["seqc", *ARGS]`, else `python SCRIPT ARGS`,
        in a session of its own, its output in `log` and `env` added to its environment."""
        assert self.proc.stdin is not None
        order = {"argv": argv, "env": env or {}, "log": str(log)}
        self.proc.stdin.write(json.dumps(order) + "\n")
        self.proc.stdin.flush()
        try:
            return Forked(self.started.get(timeout=300), self)  # after its TF import
        except queue.Empty:
            text = self.log.read_text(errors="replace")[-3000:]
            raise AssertionError(f"the fork server started nothing:\n{text}") from None

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()  # it kills what still runs and ends
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module", name="forks")
def forks_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkServer]:
    server = ForkServer(tmp_path_factory.mktemp("forks") / "fork_server.log")
    try:
        yield server
    finally:
        server.close()
