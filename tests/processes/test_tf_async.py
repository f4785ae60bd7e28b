"""Asynchronous training with parameter servers on TF (`distribution.sync = "async"`).

`seqc launch -n 2 --ps 1` trains a model whose variables live on a parameter server while two
workers compute the steps the chief schedules; the chief alone writes the run directory, and its
checkpoint evaluates in a plain single-process `seqc eval`. A worker killed mid-run costs nothing
but its share of the work (shown on that same launched run). Variables split over several
servers checkpoint as whole tensors, one step in flight at a time is the synchronous run
exactly, and a resumed async run continues it exactly. A parameter server killed mid-run ends
the run with an error that says so. Asking for async where it cannot run is an error at the
spec's line.

Every process runs on 127.0.0.1 on free ports under a timeout, its output in a file, and the
test kills whatever it started however it ends. `seqc launch` starts its group as a user's would;
the processes the tests start themselves (the groups they signal and kill, the one-process
cluster) are forked from one process that has imported TensorFlow (`ForkServer`), so that each
runs its seqc command or script without importing it again (about 6 CPU-s a process).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from child_processes import children
from fork_server import Forked, ForkServer, forks_fixture  # noqa: F401 (the `forks` fixture)
from tiny_specs import LM_SPEC, lm_corpus
from typer.testing import CliRunner

from seqc.backends.weights import read_weights
from seqc.cli import app
from seqc.run.processes.launch import members

ROOT = Path(__file__).resolve().parents[2]
ASYNC = ["--backend", "tf", "--set", "distribution.sync=async"]
runner = CliRunner()


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tf_async")
    lm_corpus(folder)
    common = (ROOT / "examples" / "common" / "transformer.seq").as_posix()
    (folder / "lm.seq").write_text(LM_SPEC.format(common=common))
    return folder


def _train(folder: Path, run: Path, *extra: str) -> list[str]:
    spec, cache = str(folder / "lm.seq"), str(folder / "cache")
    return ["train", spec, "-e", "tiny", "--cache-dir", cache, "--no-progress",
            "--run-dir", str(run), *ASYNC, *extra]  # fmt: skip


def _records(run: Path, split: str) -> list[dict]:
    path = run / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [r for r in map(json.loads, lines) if r["split"] == split]


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


class Group:
    """A chief, workers and parameter servers started by the test as `seqc launch --ps` does
    (its `members`: the same TF_CONFIG), so that it can kill any one of them."""

    def __init__(
        self, command: list[str], logs: Path, forks: ForkServer, workers: int, servers: int = 1
    ):
        self.procs: dict[str, Forked] = {}
        self.logs = logs
        for m in members(workers, servers):
            name = f"{m.role}{m.index}"
            self.procs[name] = forks.start(["seqc", *command], logs / f"{name}.log", m.env)

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")

    def wait_chief(self, timeout: float) -> int:
        try:
            return self.procs["chief0"].wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"the chief did not finish:\n{self.log('chief0')[-3000:]}"
            ) from None

    def close(self) -> None:
        _kill([p.pid for p in self.procs.values() if p.poll() is None])
        for p in self.procs.values():
            p.wait(timeout=30)


@contextlib.contextmanager
def group(command: list[str], logs: Path, forks: ForkServer, workers: int) -> Iterator[Group]:
    g = Group(command, logs, forks, workers)
    try:
        yield g
    finally:
        g.close()


def _wait_for_steps(
    chief: subprocess.Popen | Forked, log: Path, run: Path, steps: int, timeout: float = 120
) -> None:
    """Until the run has logged `steps` steps; `chief` (the process that writes them, or the
    launcher that runs it) must not end before, `log` is its output."""
    deadline = time.monotonic() + timeout
    while len(_records(run, "train")) < steps:
        if chief.poll() is not None or time.monotonic() > deadline:
            text = log.read_text(errors="replace")[-3000:]
            raise AssertionError(f"no step {steps} in time:\n{text}")
        time.sleep(0.1)


def test_launch_trains_async_through_a_killed_worker_and_its_checkpoint_evaluates(
    folder: Path, tmp_path: Path
) -> None:
    """One launched run shows both (at the cost of one group): the launcher's group trains to
    the end and evaluates, and a worker killed mid-run costs only its share of the work. Every
    step runs once; a step that finished on the killed worker before the chief read its metrics
    has none (its update was applied): the chief says so and goes on with the other worker."""
    run = folder / "launched"
    # several steps in flight; 60 steps, so that the loss's fall is well past the noise of
    # single batches (at 30 it was about the 20% asked, and one run in a few fell short)
    steps = ["--set", "train.steps=60", "--set", "train.log_every=5"]
    command = [sys.executable, "-m", "seqc.cli", "launch", "-n", "2", "--ps", "1", "--grace", "5"]
    log = tmp_path / "launch.log"
    with open(log, "w") as sink:
        proc = subprocess.Popen(
            [*command, "--", *_train(folder, run, *steps)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_for_steps(proc, log, run, 15, timeout=150)
        before = [r["step"] for r in _records(run, "train")]
        worker = re.search(r"rank 1 \(pid (\d+)\)", log.read_text())  # worker 0
        assert worker is not None, log.read_text()[-3000:]
        os.kill(int(worker.group(1)), signal.SIGKILL)
        proc.wait(timeout=150)
    finally:  # whatever happened: the launcher's processes (each in its own session), then it
        _kill([*children(proc.pid), proc.pid])
        proc.wait(timeout=30)
    out = log.read_text(errors="replace")
    assert proc.returncode == 0, out[-3000:]
    pids = [int(p) for p in re.findall(r"\(pid (\d+)\)", out)]
    assert len(pids) == 4  # chief, 2 workers, 1 server, all ended with the run
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()
    assert "rank 1 ended (exit -9); the chief goes on with the others" in out
    assert "[chief 0] dev perplexity after 60 steps" in out

    assert before == list(range(1, len(before) + 1))  # no metrics lost before the kill
    steps_logged = [r["step"] for r in _records(run, "train")]
    assert steps_logged == sorted(set(steps_logged)) and steps_logged[-1] == 60  # each step once
    lost = set(range(1, 61)) - set(steps_logged)
    assert all(f"note: step {s}'s metrics were lost" in out for s in lost)
    assert len(lost) <= 5, lost
    losses = [r["loss"] for r in _records(run, "train")]
    assert np.mean(losses[-5:]) < 0.8 * np.mean(losses[:3])
    info = json.loads((run / "run.json").read_text())
    assert info["topology"]["strategy"] == "parameter_server"
    assert info["topology"]["processes"] == 4 and info["backend"] == "tf"
    weights = read_weights(run / "checkpoints")
    assert weights.step == 60 and weights.full_state
    assert all(np.isfinite(v).all() for v in weights.params.values())

    dev = _records(run, "dev")[-1]
    cache = str(folder / "cache")
    args = ["eval", str(folder / "lm.seq"), "-e", "tiny", "--cache-dir", cache, "--backend", "tf"]
    result = runner.invoke(app, [*args, "--run-dir", str(run)])
    assert result.exit_code == 0, result.output
    assert f"dev_perplexity: {dev['perplexity']:.4f}" in result.output


def test_sigterm_to_the_group_stops_the_chief_with_a_checkpoint(
    folder: Path, tmp_path: Path, forks: ForkServer
) -> None:
    """SIGTERM reaches every process at once (as `seqc launch` forwards it): the servers wait
    for the chief, which saves a checkpoint of their variables at the step it stops at. (One
    worker: a second would only add a process to start.)"""
    run = tmp_path / "run"
    sets = ["--set", "train.steps=400", "--set", "train.log_every=5"]
    with group(_train(folder, run, *sets, "--no-dev-eval"), tmp_path, forks, workers=1) as g:
        _wait_for_steps(g.procs["chief0"], tmp_path / "chief0.log", run, 10)
        for p in g.procs.values():
            p.send_signal(signal.SIGTERM)
        code = g.wait_chief(timeout=90)
        assert code == 128 + signal.SIGTERM, g.log("chief0")[-3000:]
        for name, p in g.procs.items():
            assert p.wait(timeout=30) == (0 if name != "chief0" else code), g.log(name)[-2000:]
    weights = read_weights(run / "checkpoints")
    assert 10 <= weights.step < 400 and weights.full_state
    assert _records(run, "train")[-1]["step"] == weights.step
    assert "--resume" in g.log("chief0")


def test_a_lost_parameter_server_ends_the_run_clearly(
    folder: Path, tmp_path: Path, forks: ForkServer
) -> None:
    run = tmp_path / "run"
    sets = ["--set", "train.steps=400", "--set", "train.log_every=5"]
    with group(_train(folder, run, *sets, "--no-dev-eval"), tmp_path, forks, workers=1) as g:
        _wait_for_steps(g.procs["chief0"], tmp_path / "chief0.log", run, 10)
        g.procs["ps0"].send_signal(signal.SIGKILL)
        code = g.wait_chief(timeout=90)
    log = g.log("chief0")
    assert code == 2, log[-3000:]
    assert "[parameter-server-lost]: parameter server 0 of the run was lost" in log
    assert "Traceback" not in log
    assert "--resume" in log  # what to do next


CHILD = """
import json, os, socket, sys
from pathlib import Path

folder, out = Path(sys.argv[1]), Path(sys.argv[2])
from seqc.run.session import open_session
from seqc.run.train.loop import train

def session(*sets):
    return open_session(folder / "lm.seq", "tiny", list(sets), cache_dir=folder / "cache")

# 1. The synchronous single-process TF run, before this process joins a cluster.
sync = train(session(), out / "sync", progress=False, backend="tf", eval_after=False)
np.savez(out / "sync.npz", **sync.model.numpy_params())  # local: unreadable once joined

# 2. An in-process cluster: 2 workers and 2 parameter servers serving here, this the chief.
sockets = [socket.socket() for _ in range(5)]
for s in sockets:
    s.bind(("127.0.0.1", 0))
addresses = [f"127.0.0.1:{s.getsockname()[1]}" for s in sockets]
for s in sockets:
    s.close()
spec = {"chief": addresses[:1], "worker": addresses[1:3], "ps": addresses[3:]}
os.environ["TF_CONFIG"] = json.dumps({"cluster": spec, "task": {"type": "chief", "index": 0}})
import tensorflow as tf
servers = [tf.distribute.Server(tf.train.ClusterSpec(spec), job_name=job, task_index=i,
           protocol="grpc") for job in ("worker", "ps") for i in range(2)]
from seqc.backends import registry
from seqc.backends.api import Cluster
from seqc.backends.tf import ps
ps.MIN_SHARD_BYTES = 1024  # split the tiny model's matrices over both servers
cluster = Cluster(0, 5, None, "chief", spec)
registry.backend("tf").start(cluster)
kinds = {}

def run_async(run, *sets, resume=False):
    result = train(session("distribution.sync=async", *sets), out / run, progress=False,
                   backend="tf", cluster=cluster, resume=resume, eval_after=False)
    kinds.update({k: type(v).__name__ for k, v in result.model.params.items()})
    return result

first = run_async("resumed", "train.steps=10")
resumed = run_async("resumed", resume=True)
np.savez(out / "resumed.npz", **resumed.model.numpy_params())
(out / "result.json").write_text(json.dumps({
    "sync": [h["loss"] for h in sync.history],
    "async": [h["loss"] for h in first.history + resumed.history],
    "kinds": kinds,
}))
sys.stdout.flush()
os._exit(0)  # the in-process servers would hold the interpreter's exit
"""


def test_one_step_in_flight_is_the_sync_run_and_resumes_exactly(
    folder: Path, tmp_path: Path, forks: ForkServer
) -> None:
    """In one process (an in-process cluster: two workers, two servers), with a metric logged
    per step so that one step is in flight at a time: the same data, dropout and updates as the
    synchronous run, to float32 roundoff, through an async run to step 10 resumed from its
    checkpoint to step 20 (one run shows both: a resume that lost or redid anything would leave
    the synchronous curve and params); a checkpoint holds whole tensors however the variables
    were split. (No dev evaluation: no dev figure is checked here.)"""
    script = tmp_path / "child.py"
    script.write_text("import numpy as np\n" + textwrap.dedent(CHILD))
    log = tmp_path / "child.log"
    child = forks.start([str(script), str(folder), str(tmp_path)], log)
    try:
        code = child.wait(timeout=180)
    finally:
        _kill([child.pid] if child.poll() is None else [])
    assert code == 0, log.read_text(errors="replace")[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert "ShardedVariable" in result["kinds"].values()  # a matrix split over the servers
    assert len(result["sync"]) == 20
    np.testing.assert_allclose(result["async"], result["sync"], rtol=1e-5)
    curve = [r["loss"] for r in _records(tmp_path / "resumed", "train")]
    np.testing.assert_allclose(curve, result["sync"], rtol=1e-5)

    resumed = dict(np.load(tmp_path / "resumed.npz"))
    weights = read_weights(tmp_path / "resumed" / "checkpoints")
    assert weights.step == 20 and weights.full_state
    for name, value in resumed.items():
        np.testing.assert_array_equal(weights.params[name], value, err_msg=name)
    sync = dict(np.load(tmp_path / "sync.npz"))
    assert sync.keys() == resumed.keys()
    for name, value in sync.items():
        np.testing.assert_allclose(resumed[name], value, atol=1e-6, err_msg=name)


@pytest.mark.parametrize(
    ("backend", "code"), [("jax", "cannot-train-async"), ("tf", "no-parameter-servers")]
)
def test_async_where_it_cannot_run_is_an_error_at_the_spec_line(
    folder: Path, tmp_path: Path, backend: str, code: str
) -> None:
    """Async on JAX (no parameter servers there) and async in one process (none started)."""
    text = (folder / "lm.seq").read_text().rstrip()
    spec = folder / "lm_async.seq"  # the experiment itself says async, so the error has a line
    spec.write_text(text[: text.rfind("}")] + '  distribution {\n    sync = "async"\n  }\n}\n')
    line = spec.read_text().splitlines().index('    sync = "async"') + 1
    cache = str(folder / "cache")
    args = ["train", str(spec), "-e", "tiny", "--cache-dir", cache, "--backend", backend]
    result = runner.invoke(app, [*args, "--no-progress", "--run-dir", str(tmp_path / "run")])
    assert result.exit_code == 2, result.output
    assert f"lm_async.seq:{line}:5: check error [{code}]" in result.output
    assert "hint:" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_metrics_on_a_lost_worker_are_skipped_and_a_lost_server_stops() -> None:
    """A finished step's metrics live on the worker that ran it: when it dies before the chief
    reads them they are lost (`MetricsLost`, and the loop logs nothing for that step), while a
    lost parameter server is the run's end, said plainly."""
    import tensorflow as tf

    from seqc.backends.api import MetricsLost
    from seqc.backends.tf.ps_model import Metric
    from seqc.run.train.loop import fetched_metrics
    from seqc.spec.errors import DeviceError

    class Remote:
        def __init__(self, error: Exception | None) -> None:
            self.error = error

        def fetch(self) -> np.ndarray:
            if self.error is not None:
                raise self.error
            return np.asarray([1.5, 2.0, 3.0, 0.5], np.float32)

    worker = "/job:worker/replica:0/task:0/device:CPU:0 recvmsg:Connection reset by peer"
    server = "/job:ps/replica:0/task:1/device:CPU:0 failed to connect to all addresses"
    assert float(Metric(Remote(None), 0)) == 1.5
    with pytest.raises(MetricsLost):
        np.asarray(Metric(Remote(tf.errors.UnavailableError(None, None, worker)), 0))
    assert (
        fetched_metrics({"loss": Metric(Remote(tf.errors.CancelledError(None, None, worker)), 0)})
        is None
    )
    with pytest.raises(DeviceError) as e:
        np.asarray(Metric(Remote(tf.errors.UnavailableError(None, None, server)), 0))
    assert e.value.code == "parameter-server-lost" and "parameter server 1" in str(e.value)


def test_a_server_gone_mid_call_is_said_as_a_lost_server_not_a_lost_peer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A parameter server killed while the chief is mid-call can reach it as a cancelled call
    or a reset connection that names no task (the suite under load saw `[process-lost]: a
    collective ... failed (recvmsg:Connection reset by peer)`): the server that no longer
    answers is named, before the failure is taken for a lost peer process."""
    import socket

    import tensorflow as tf

    from seqc.backends import registry
    from seqc.backends.api import Cluster
    from seqc.run.train.failures import collective
    from seqc.spec.errors import DeviceError

    with socket.socket() as s:  # a port nothing listens on: the dead server's
        s.bind(("127.0.0.1", 0))
        gone = f"127.0.0.1:{s.getsockname()[1]}"
    spec = {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": [gone]}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": spec}))
    engine = registry.backend("tf")
    monkeypatch.setattr(engine, "_ps", object())  # as `start` leaves the chief of an async run
    cluster = Cluster(0, 3, None, "chief", spec)
    for error in (tf.errors.CancelledError, tf.errors.UnavailableError):

        def step(error: type = error) -> None:
            raise error(None, None, "recvmsg:Connection reset by peer")

        with pytest.raises(DeviceError) as e:
            collective(engine, cluster, step)
        assert e.value.code == "parameter-server-lost", error
        assert "parameter server 0 of the run was lost" in str(e.value)
