"""Synchronous data parallelism on TensorFlow (`tf.distribute`): a mesh `{data: N}` trains as one
device does, to float32 roundoff.

In one process, `MirroredStrategy` over two logical CPUs follows the single device's loss curve
(with a padded batch whose halves hold different token counts, and under a per-sequence
reduction, which is what the replicas' loss weights are for) and JAX's within the parity
tolerance. Across processes (two workers started as `seqc launch -n 2` starts them, then
`seqc launch -n 2 -- train ... --resume --backend tf`), `MultiWorkerMirroredStrategy` logs the
losses of one process with the same global batch, and the group resumes from its checkpoint to
the same curve. `fsdp` and `model` axes, which split params, are an error at the mesh's line; so
is a mesh that is not the workers' count.

Logical CPUs and the workers' collectives must be set up before TF computes anything, so every
run on more than one device happens in a child process, under a timeout; the test kills whatever
it started. The one-device reference runs in the test's own process. The children the test
starts itself (the one with two logical CPUs, the first group) are forked from one process that
has imported TensorFlow (`ForkServer`), so that each runs without importing it again (about 6
CPU-s a process); `seqc launch` starts its group as a user's would.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from child_processes import children, no_strays  # noqa: F401 (an autouse fixture)
from tiny_specs import LM_SPEC, lm_corpus
from typer.testing import CliRunner

from seqc.cli import app
from seqc.run.processes.launch import members

SUPPORT = Path(__file__).resolve().parents[1] / "support"
ROOT = Path(__file__).resolve().parents[2]
TF = ["--backend", "tf"]
MESH2 = ["--set", "distribution.mesh={data: 2}"]

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


@pytest.fixture(scope="module")
def forks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkServer]:
    server = ForkServer(tmp_path_factory.mktemp("forks") / "fork_server.log")
    try:
        yield server
    finally:
        server.close()


def _run_forked(
    forks: ForkServer,
    argvs: list[list[str]],
    logs: list[Path],
    envs: list[dict[str, str]],
    timeout: float,
) -> list[int]:
    """The exit codes of processes forked together and waited for; those still running after
    `timeout` (or when the test fails) are killed."""
    procs = [forks.start(argv, log, env) for argv, log, env in zip(argvs, logs, envs, strict=True)]
    try:
        return [p.wait(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            p.send_signal(signal.SIGKILL)
            p.wait(timeout=30)


MIRRORED = r"""
import json, sys, tempfile
from pathlib import Path
import numpy as np
sys.path.insert(0, sys.argv[1])
from parity_lm import SPEC, VOCAB, batches
from seqc.backends.api import fetch
from seqc.backends.jax.backend import JaxBackend
from seqc.backends.tf.backend import TfBackend
from seqc.compiler.compile import compile_task
from seqc.compiler.sharding import plan_sharding
from seqc.resolve.experiment import resolve
from seqc.resolve.program import load_program
from seqc.run.train.schedule import learning_rate
from seqc.spec.errors import DeviceError

spec = Path(tempfile.mkdtemp()) / "lm.seq"
spec.write_text(SPEC.format())
data = batches(10)  # rows 0-1 hold 21 real tokens, rows 2-3 hold 17

def curve(engine, mesh, steps, *sets):
    program = load_program(spec)
    overrides = [f"distribution.mesh={mesh}", *sets]
    r = resolve(program, "tiny", overrides, symbols={"tiny.vocab_size": VOCAB})
    task = compile_task(program, r, "lm")
    train = task.train
    model = engine.model(task, train, sharding=plan_sharding(task.graph, r, "lm"))
    state, rate, losses = model.init(0), learning_rate(train), []
    for step, batch in enumerate(data[:steps]):
        state, metrics = model.train_step(state, batch, rate(step))
        m = fetch(metrics)
        losses.append([float(m["loss"]), float(m["grad_norm"]), float(m["tokens"])])
    copies = len(getattr(state["params"]["embed.table"], "values", [None]))
    return {"curve": losses, "strategy": model.strategy, "copies": copies}

tf, out = TfBackend(), {}
out["mirrored"] = curve(tf, "{data: 2}", 10)  # first: it splits the CPU before TF starts
out["single"] = curve(tf, "{data: 1}", 10)
out["jax"] = curve(JaxBackend(), "{data: 1}", 10)
per_sequence = 'lm.loss=cross_entropy(label_smoothing = 0.1, reduction = "sequence")'
try:
    out["mirrored_seq"] = curve(tf, "{data: 2}", 4, per_sequence)
    out["single_seq"] = curve(tf, "{data: 1}", 4, per_sequence)
except Exception as e:
    out["mirrored_seq"] = {"error": str(e)[-600:]}
try:
    curve(tf, "{data: 4}", 1)
except DeviceError as e:
    out["too_late"] = [e.code, e.message]
Path(sys.argv[2]).write_text(json.dumps(out))
"""


def _relative(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) / abs(y) for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def mirrored(forks: ForkServer, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The curves of `MIRRORED`'s runs, from one child process (TF's CPU split in two)."""
    folder = tmp_path_factory.mktemp("mirrored")
    script, out, log = folder / "mirrored.py", folder / "out.json", folder / "mirrored.log"
    script.write_text(MIRRORED)
    [code] = _run_forked(forks, [[str(script), str(SUPPORT), str(out)]], [log], [{}], 300)
    assert code == 0, log.read_text(errors="replace")[-3000:]
    return json.loads(out.read_text())


def _same_curves(got: list[list[float]], want: list[list[float]]) -> None:
    for column, what in enumerate(("loss", "grad_norm", "tokens")):
        a, b = [row[column] for row in got], [row[column] for row in want]
        assert _relative(a, b) <= 1e-5, (what, a, b)


def test_mirrored_on_two_cpus_trains_as_one_device(mirrored: dict) -> None:
    assert (mirrored["mirrored"]["strategy"], mirrored["mirrored"]["copies"]) == ("mirrored", 2)
    assert mirrored["single"]["strategy"] == "single"
    _same_curves(mirrored["mirrored"]["curve"], mirrored["single"]["curve"])
    tf_losses = [row[0] for row in mirrored["mirrored"]["curve"]]
    assert _relative(tf_losses, [row[0] for row in mirrored["jax"]["curve"]]) <= 1e-2
    code, message = mirrored["too_late"]  # TF runs: its CPU cannot be split into 4 any more
    assert code == "mesh-devices" and "needs 4 devices" in message


def test_mirrored_weights_replicas_by_their_sequences(mirrored: dict) -> None:
    """Under `reduction = "sequence"` a replica's loss is a mean over its non-empty sequences."""
    assert "error" not in mirrored["mirrored_seq"], mirrored["mirrored_seq"]["error"]
    _same_curves(mirrored["mirrored_seq"]["curve"], mirrored["single_seq"]["curve"])


# ---------------------------------------------------------------------------- several processes


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tests' tiny LM without dropout (a replica's masks are not one device's) and without
    a dev set (its evaluation would only slow every run down)."""
    folder = tmp_path_factory.mktemp("tf_sync")
    lm_corpus(folder)
    common = (ROOT / "examples" / "common" / "transformer.seq").as_posix()
    spec = LM_SPEC.format(common=common)
    for line, instead in (("dropout = 0.1", "dropout = 0.0"), ('  dev = text("dev.txt")\n', "")):
        assert line in spec
        spec = spec.replace(line, instead)
    (folder / "lm.seq").write_text(spec)
    return folder


def _train(folder: Path, run: str, *extra: str) -> list[str]:
    spec, cache = str(folder / "lm.seq"), str(folder / "cache")
    return ["train", spec, "-e", "tiny", "--cache-dir", cache, "--no-progress",
            "--run-dir", str(folder / run), *TF, *extra]  # fmt: skip


def _launch(args: list[str], n: int = 2, timeout: float = 240) -> tuple[int, str]:
    """`seqc launch -n N -- ARGS` to its end; the launcher and its processes are killed
    whatever happens."""
    command = [sys.executable, "-m", "seqc.cli", "launch", "-n", str(n), "--grace", "5", "--"]
    proc = subprocess.Popen(
        [*command, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        for pid in [*children(proc.pid), proc.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=30)
    return proc.returncode, out


def _losses(run: Path) -> list[float]:
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in records if r["split"] == "train"]


@pytest.fixture(scope="module")
def reference(folder: Path) -> list[float]:
    """The losses of 20 steps on one device (in this process: one device needs no setup)."""
    one = CliRunner().invoke(app, _train(folder, "one"))
    assert one.exit_code == 0, one.output[-3000:]
    return _losses(folder / "one")


def test_two_workers_train_as_one_process_and_resume(
    folder: Path, reference: list[float], forks: ForkServer
) -> None:
    """Two workers to step 10 (forked, with the environment `seqc launch -n 2` gives them),
    then resumed by `seqc launch -n 2` to step 20: the losses of one process with the same
    global batch (8 rows, 4 a worker) all along."""
    group = members(2, 0)
    argv = ["seqc", *_train(folder, "two", *MESH2, "--set", "train.steps=10")]
    logs = [folder / f"two_rank{m.rank}.log" for m in group]
    codes = _run_forked(forks, [argv] * 2, logs, [m.env for m in group], 240)
    first, second = (log.read_text(errors="replace") for log in logs)
    assert codes == [0, 0], (first[-3000:], second[-3000:])
    assert "backend: tf, 2 processes" in first
    assert (first.count("sample: "), second.count("sample: ")) == (1, 0)  # process 0 reports
    two = _losses(folder / "two")
    assert len(reference) == 20 and len(two) == 10
    assert _relative(two, reference[:10]) <= 1e-5, (two, reference)
    topology = json.loads((folder / "two" / "run.json").read_text())["topology"]
    assert topology == {
        "backend": "tf",
        "processes": 2,
        "mesh": {"data": 2},
        "strategy": "multi_worker_mirrored",
        "rows": {"lo": 0, "hi": 4, "of": 8},  # worker 0 reads the first half of each batch
    }
    code, out = _launch(_train(folder, "two", *MESH2, "--resume"))
    assert code == 0, out[-3000:]
    assert "rank 1 (pid" in out and "backend: tf, 2 processes" in out
    assert "[rank 0] resumed from step 10" in out and "[rank 1] resumed from step 10" in out
    assert out.count("sample: ") == 1  # process 0 alone reports
    resumed = _losses(folder / "two")
    assert len(resumed) == 20
    assert _relative(resumed, reference) <= 1e-5, (resumed, reference)
    # one writer: the checkpoints of steps 10 and 20 with their checksums, nothing else
    names = sorted(p.name for p in (folder / "two" / "checkpoints").iterdir())
    assert [n for n in names if n.endswith(".sha256")] == ["ckpt-10.sha256", "ckpt-20.sha256"]


def test_workers_need_a_mesh_over_them(folder: Path) -> None:
    code, out = _launch(_train(folder, "unmeshed", "--set", "train.steps=2"))
    assert code == 2, out[-3000:]
    assert "mesh-devices" in out and "a run of 2 processes trains one model" in out
    assert "the mesh {data: 1} spans 1 device" in out
    assert "Traceback" not in out
    assert not (folder / "unmeshed" / "checkpoints").exists()


@pytest.mark.parametrize("mesh", ["{data: 1, model: 2}", "{fsdp: 2}"])
def test_params_split_over_a_mesh_are_an_error_on_tf(folder: Path, mesh: str) -> None:
    head = "experiment tiny {\n  tasks = [lm]\n"
    text = (folder / "lm.seq").read_text()
    assert head in text
    split = text.replace(head, f"{head}  distribution {{\n    mesh = {mesh}\n  }}\n")
    (folder / "split.seq").write_text(split)
    line = split.splitlines().index(f"    mesh = {mesh}") + 1
    args = _train(folder, "split")
    args[1] = str(folder / "split.seq")
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "cannot-shard" in result.output and "data parallel only" in result.output
    assert "--backend jax" in result.output
    assert f"split.seq:{line}:" in result.output  # at the mesh's line
    assert not (folder / "split").exists()
