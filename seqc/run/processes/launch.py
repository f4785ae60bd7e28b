"""`seqc launch -n N [--ps K] -- train FILE -e EXP ...`: a run of several processes on this machine.

It starts the seqc command after `--` N times (plus a chief and K parameter servers with
`--ps`), each told its place in the run: `SEQC_COORDINATOR`, `SEQC_NUM_PROCESSES` and
`SEQC_PROCESS_ID` for JAX's `jax.distributed`, and `TF_CONFIG` for `tf.distribute`, on free
localhost ports chosen now. Each line a process prints is shown prefixed with its rank. If one
process fails, the others are stopped (SIGTERM, then SIGKILL after a grace period) and the
launcher exits with the failed process's code, showing its last lines. SIGINT and SIGTERM sent to
the launcher are passed to every process, so a preempted machine's run stops everywhere at one
step, with one checkpoint. With `--ps`, the chief's exit ends the run: workers and parameter
servers serve until then, and a worker that dies is the chief's to survive (asynchronous
training goes on with the others).

On a real cluster the same `seqc train` command runs once per process, and reads its place from
the cluster's environment (SLURM, Open MPI, `TF_CONFIG`): see the README.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from seqc.run.report import PlainReporter, Reporter
from seqc.spec.errors import UsageError

GRACE_S = 20.0
"""How long stopped processes get to write their checkpoint before they are killed."""
NOTICE_S = 5.0
"""How long the others get, after one process died, to find out by themselves (their next
collective fails at once) and say so, before they are asked to stop: a SIGTERM racing that
failure would turn their clear `process-lost` into a stop that waits on the dead peer."""
TAIL = 20


def free_ports(n: int) -> list[int]:
    """`n` distinct free TCP ports on 127.0.0.1 (bound and released; the OS does not reuse a
    port at once)."""
    sockets = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@dataclass
class Member:
    """One process of the run."""

    role: str
    index: int
    rank: int
    env: dict[str, str]
    proc: subprocess.Popen | None = None
    tail: deque = field(default_factory=lambda: deque(maxlen=TAIL))

    @property
    def label(self) -> str:
        return f"{self.role} {self.index}" if self.role != "worker" else f"rank {self.rank}"


def members(n: int, ps: int) -> list[Member]:
    """Every process with its environment: N workers (and a chief and `ps` servers)."""
    roles = ([("chief", 0)] if ps else []) + [("worker", i) for i in range(n)]
    roles += [("ps", i) for i in range(ps)]
    ports = free_ports(len(roles) + 1)
    coordinator = f"127.0.0.1:{ports[0]}"
    spec: dict[str, list[str]] = {}
    for (role, _), port in zip(roles, ports[1:], strict=True):
        spec.setdefault(role, []).append(f"127.0.0.1:{port}")
    out = []
    for rank, (role, index) in enumerate(roles):
        tf_config = {"cluster": spec, "task": {"type": role, "index": index}}
        env = {
            "SEQC_COORDINATOR": coordinator,
            "SEQC_NUM_PROCESSES": str(len(roles)),
            "SEQC_PROCESS_ID": str(rank),
            "TF_CONFIG": json.dumps(tf_config),
        }
        out.append(Member(role, index, rank, env))
    return out


def _pump(member: Member, stream: object, lock: threading.Lock) -> None:
    for line in iter(stream.readline, ""):  # type: ignore[attr-defined]
        line = line.rstrip("\n")
        member.tail.append(line)
        with lock:
            sys.stderr.write(f"[{member.label}] {line}\n")
            sys.stderr.flush()


def run_group(
    command: list[str],
    n: int,
    ps: int = 0,
    grace: float = GRACE_S,
    pin: bool = False,
    reporter: Reporter | None = None,
) -> int:
    """Run the group; the exit code is the first failure's, else 0. With `pin`, worker i runs
    on core i (mod the cores this process may use)."""
    reporter = reporter or PlainReporter()
    group = members(n, ps)
    cores = sorted(os.sched_getaffinity(0))
    signalled: list[int] = []
    lock = threading.Lock()
    pumps = []
    for m in group:
        core = {cores[m.index % len(cores)]} if pin and m.role == "worker" else None
        # TF sizes its thread pools by the cores a process may use: one core gives one
        # inter-op thread, on which a parameter-server worker's blocking receive deadlocks.
        threads = {"TF_NUM_INTEROP_THREADS": "4"} if core is not None else {}
        m.proc = subprocess.Popen(
            [sys.executable, "-m", "seqc.cli", *command],
            env=threads | os.environ | m.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,  # a terminal's Ctrl-C reaches them through us, once
            preexec_fn=None if core is None else lambda core=core: os.sched_setaffinity(0, core),
        )
        t = threading.Thread(target=_pump, args=(m, m.proc.stdout, lock), daemon=True)
        t.start()
        pumps.append(t)
    reporter.info("started " + ", ".join(f"{m.label} (pid {m.proc.pid})" for m in group if m.proc))

    def forward(signum: int, frame: object) -> None:
        signalled.append(signum)
        for m in group:
            if m.proc is not None and m.proc.poll() is None:
                m.proc.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    failed = None
    try:
        code, failed = _watch(group, ps, reporter)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if failed is not None and not signalled:
            _await(group, min(grace, NOTICE_S))
        _stop(group, grace)
        for t in pumps:
            t.join(timeout=5)
    if failed is not None and signalled:
        name = signal.Signals(signalled[0]).name
        reporter.info(f"stopped by {name}: every process was asked to checkpoint and stop")
    elif failed is not None:
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"failed (exit {code})"
        reporter.info(f"{failed.label} {how}; its last lines:")
        for line in failed.tail:
            reporter.info(f"  {line}")
    return code


def _watch(group: list[Member], ps: int, reporter: Reporter) -> tuple[int, Member | None]:
    """Wait for the run's end: every process done (sync), or the chief (async); the first
    failure ends it at once. A worker lost under async is reported, not fatal."""
    lost: set[int] = set()
    while True:
        # One killed by a signal is named first: the others it takes down with it (each says
        # `process-lost`, exit 2) end within the same poll, as they find out at once.
        killed = [
            m
            for m in group
            if m.proc is not None
            and (m.proc.poll() or 0) < 0
            and not (ps and m.role == "worker")  # under --ps a worker's end is survived
        ]
        if killed:
            assert killed[0].proc is not None
            return int(killed[0].proc.returncode), killed[0]
        for m in group:
            assert m.proc is not None
            code = m.proc.poll()
            if code is None or m.rank in lost:
                continue
            if code != 0 and not (ps and m.role == "worker"):
                return code, m
            if ps and m.role == "worker":
                lost.add(m.rank)
                workers = sum(1 for w in group if w.role == "worker")
                if len(lost) == workers:  # the chief would wait for them (TF: up to an hour)
                    reporter.info("every worker has ended: the chief cannot go on")
                    return code or 1, m
                reporter.info(f"{m.label} ended (exit {code}); the chief goes on with the others")
            if ps and m.role == "chief":
                return 0, None
        if not ps and all(m.proc is not None and m.proc.poll() == 0 for m in group):
            return 0, None
        time.sleep(0.1)


def _await(group: list[Member], seconds: float) -> None:
    """Wait up to `seconds` for the processes still running to end by themselves."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if all(m.proc is None or m.proc.poll() is not None for m in group):
            return
        time.sleep(0.1)


def _stop(group: list[Member], grace: float) -> None:
    """SIGTERM to the processes still running, then SIGKILL to those that outlive `grace`."""
    running = [m.proc for m in group if m.proc is not None and m.proc.poll() is None]
    for p in running:
        p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in running:
        try:
            p.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def launch(
    command: list[str],
    n: int = 2,
    ps: int = 0,
    grace: float = GRACE_S,
    pin: bool = False,
    reporter: Reporter | None = None,
) -> int:
    """Run `seqc COMMAND` as a group of `n` local workers (and a chief and `ps` parameter
    servers); the exit code a shell would report for the run: the first failure's (128 + N
    for a process killed by signal N), else 0."""
    if not command:
        raise UsageError(
            "give the command to run after `--`",
            code="missing-command",
            hint="seqc launch -n 2 -- train FILE -e EXP --run-dir D",
        )
    if n < 1 or ps < 0 or grace < 0:
        raise UsageError(
            "need at least one process, no negative servers or grace",
            code="bad-cluster",
            found=f"-n {n} --ps {ps} --grace {grace}",
        )
    code = run_group(list(command), n, ps, grace, pin, reporter)
    return 128 - code if code < 0 else code  # killed by signal N: 128 + N
