"""A JAX run of several processes (`seqc launch`, `jax.distributed` over localhost): it trains as
one process with the same global batch; a process that dies stops the group (the survivor says
`process-lost` and ends by itself at once, with no half-written checkpoint), SIGTERM stops every
process at one step with one checkpoint, and the group resumes from the last checkpoint to the
parameters of an uninterrupted run; it resumes on another process count too (two to one here;
`test_spmd` reshards across meshes).

Every group runs on 127.0.0.1 with ports the launcher picks, under a timeout, and the test kills
whatever it started if anything goes wrong.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from child_processes import children, no_strays  # noqa: F401 (an autouse fixture)
from shared_runs import LmRuns
from tiny_specs import LM_SPEC, lm_corpus
from typer.testing import CliRunner

from seqc.backends.weights import read_weights
from seqc.cli import app
from seqc.run.processes.cluster import cluster_from
from seqc.run.processes.launch import NOTICE_S
from seqc.spec.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
MESH2 = ["--set", "distribution.mesh={data: 2}"]
EVERY = 20
"""Steps between checkpoints: the stopped run is killed mid-way between the first two (no save
under way) and asked to stop right after the second."""
LONG_STEPS = 60
LONG = ["--set", f"train.steps={LONG_STEPS}", "--set", f"train.checkpoint_every={EVERY}"]
"""Long enough to stop it twice, with checkpoints to resume from, and no longer: every step is
trained by four groups and the in-process resume (about 18 ms of CPU a step for a group of two).
At 30 steps apart, measured in three runs on a loaded machine (a load of 10 on two cores): the
kill, sent once step 40 was logged, landed by step 45, short of the save at 60; SIGTERM, sent as
checkpoint 60 appeared, stopped the group at step 60 or 61, short of the end at 90. At 20 the
kill (sent at step 26) has 14 steps to land before the save at 40, and SIGTERM 20 before the
end."""
NO_EVAL = ["--no-dev-eval"]
"""No dev evaluation around a run whose dev figures are not what the test checks."""


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("multiprocess")
    lm_corpus(folder)
    common = (ROOT / "examples" / "common" / "transformer.seq").as_posix()
    (folder / "lm.seq").write_text(LM_SPEC.format(common=common))
    return folder


def _train(folder: Path, run: str, *extra: str) -> list[str]:
    spec = str(folder / "lm.seq")
    cache = str(folder / "cache")
    return ["train", spec, "-e", "tiny", "--cache-dir", cache, "--no-progress",
            "--run-dir", str(folder / run), *extra]  # fmt: skip


def _launch(args: list[str], n: int = 2, *, grace: float = 5.0) -> subprocess.Popen:
    command = [sys.executable, "-m", "seqc.cli", "launch", "-n", str(n), "--grace", str(grace)]
    return subprocess.Popen(
        [*command, "--", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _finish(proc: subprocess.Popen, timeout: float = 240) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        _kill_group(proc)
    return proc.returncode, out


def _kill_group(proc: subprocess.Popen) -> None:
    """The launcher and its processes (each in its own session), whatever state they are in."""
    for pid in [*children(proc.pid), proc.pid]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _rank(launcher: int, rank: int) -> int:
    for pid in children(launcher):
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        if f"SEQC_PROCESS_ID={rank}".encode() in env:
            return pid
    raise AssertionError(f"no rank {rank} under the launcher")


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            code, out = _finish(proc, 5)
            raise AssertionError(f"{path} never appeared (exit {code}):\n{out[-3000:]}")
        time.sleep(0.05)


def _wait_for_step(run: Path, step: int, proc: subprocess.Popen, timeout: float = 180) -> None:
    """Until the run has logged `step` (rank 0 writes a line per step)."""
    deadline = time.monotonic() + timeout
    while not _logged(run, step):
        if proc.poll() is not None or time.monotonic() > deadline:
            code, out = _finish(proc, 5)
            raise AssertionError(f"step {step} was never logged (exit {code}):\n{out[-3000:]}")
        time.sleep(0.02)


def _logged(run: Path, step: int) -> bool:
    metrics = run / "metrics.jsonl"
    if not metrics.exists():
        return False
    for line in metrics.read_text().splitlines():
        with contextlib.suppress(ValueError):
            if json.loads(line).get("step", 0) >= step:
                return True
    return False


def _wait_for_lock(run: Path, proc: subprocess.Popen, timeout: float = 180) -> None:
    """Until the group's rank 0 owns the run directory (the lock's owner writes its pid into the
    lock file; the file itself outlives an earlier group's)."""
    deadline = time.monotonic() + timeout
    owner = None
    while True:
        with contextlib.suppress(AssertionError, OSError):  # not started, or just ended
            owner = owner or _rank(proc.pid, 0)
        with contextlib.suppress(OSError):
            if owner and (run / ".lock").read_text().strip() == str(owner):
                return
        if proc.poll() is not None or time.monotonic() > deadline:
            code, out = _finish(proc, 5)
            raise AssertionError(f"rank 0 never took the lock (exit {code}):\n{out[-3000:]}")
        time.sleep(0.05)


def _losses(run: Path) -> list[float]:
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in records if r["split"] == "train"]


def _final_params(run: Path) -> dict[str, np.ndarray]:
    weights = read_weights(run / "checkpoints")
    assert weights.step == LONG_STEPS
    return weights.params


@pytest.fixture(scope="module")
def straight(folder: Path) -> Path:
    """The uninterrupted 2-process run the stopped ones must end equal to."""
    code, out = _finish(_launch(_train(folder, "straight", *MESH2, *LONG, *NO_EVAL)))
    assert code == 0, out[-3000:]
    return folder / "straight"


@pytest.fixture(scope="module")
def one(folder: Path, lm_runs: LmRuns) -> list[float]:
    """The losses of 20 steps of one process on one device: the session's run of this spec."""
    return _losses(lm_runs.copy(folder / "one"))


def test_two_processes_train_as_one(folder: Path, straight: Path, one: list[float]) -> None:
    """The first 20 steps of the 2-process run are one process's (the schedule and the data
    order do not depend on the run's length)."""
    two = _losses(straight)
    assert len(one) == 20 and len(two) == LONG_STEPS
    for x, y in zip(one, two[:20], strict=True):
        assert abs(x - y) <= 1e-5 * abs(x), (one, two[:20])
    topology = json.loads((straight / "run.json").read_text())["topology"]
    assert topology == {
        "backend": "jax",
        "processes": 2,
        "mesh": {"data": 2},
        "strategy": "spmd",
        "rows": {"lo": 0, "hi": 4, "of": 8},  # process 0 reads the first half of each batch
    }


@dataclass(frozen=True)
class Ended:
    """How a group ended: its exit code and output, the seconds from the kill to its end, and
    the temporary (half-written) checkpoint folders it left."""

    code: int
    out: str
    took: float
    temporary: list[str]


@pytest.fixture(scope="module")
def killed(folder: Path) -> Ended:
    """The run `test_a_stopped_group_resumes_exactly_and_on_another_process_count` resumes,
    stopped the first way a group ends early: rank 1 killed mid-way between checkpoints EVERY
    and 2 * EVERY, so no save is under way and the checkpoint at EVERY is the last."""
    run = folder / "preempted"
    proc = _launch(_train(folder, "preempted", *MESH2, *LONG, *NO_EVAL))
    _wait_for(run / "checkpoints" / str(EVERY), proc)
    _wait_for_step(run, EVERY + EVERY // 3, proc)
    rank1 = _rank(proc.pid, 1)
    killed = time.monotonic()
    os.kill(rank1, signal.SIGKILL)
    code, out = _finish(proc, 120)
    took = time.monotonic() - killed
    temporary = [p.name for p in (run / "checkpoints").iterdir() if "tmp" in p.name]
    return Ended(code, out, took, temporary)


def test_a_dead_process_leaves_the_survivor_to_say_so_and_end_at_once(killed: Ended) -> None:
    """rank 1 killed mid-run: rank 0 says `process-lost` and ends by itself at once (it used
    to wait at JAX's exit for the dead process, until the launcher killed it), with no
    temporary checkpoint folder left, and no gloo note or traceback in the output."""
    out = killed.out
    assert killed.code == 128 + signal.SIGKILL, out[-3000:]
    assert "backend: jax, 2 processes" in out
    assert "rank 1 was killed by SIGKILL; its last lines:" in out
    assert "[rank 0] " in out and "[process-lost]" in out, out[-3000:]  # rank 0 says why
    for noise in ("Traceback", "internal error", "[Gloo]"):
        assert noise not in out, out[-3000:]
    # ended by itself: the launcher never had to stop it (it waits NOTICE_S before it does)
    assert killed.took < NOTICE_S, (killed.took, out[-3000:])
    assert killed.temporary == []


def test_a_stopped_group_resumes_exactly_and_on_another_process_count(
    folder: Path, straight: Path, killed: Ended
) -> None:
    """One run stopped both ways a group ends early, and resumed after each: a process dies
    (`killed`: rank 1 after the checkpoint at EVERY), then SIGTERM (after the checkpoint at
    2 * EVERY); the group ends at the parameters of the uninterrupted run. A copy of it as
    SIGTERM left it is resumed by one process: the checkpoint is resharded on restore, and the
    losses are the uninterrupted run's (one process's, `test_two_processes_train_as_one`)
    throughout, to the reduction order. One run for the three: each group costs seconds of
    processes starting."""
    assert killed.code == 128 + signal.SIGKILL, killed.out[-3000:]
    run = folder / "preempted"
    proc = _launch(_train(folder, "preempted", *MESH2, *LONG, *NO_EVAL, "--resume"))
    try:
        # the lock covers the group: another run may not write to its directory meanwhile
        # (checked while the group restores and traces, so the stop below is not delayed)
        _wait_for_lock(run, proc)
        other = CliRunner().invoke(app, _train(folder, "preempted", *MESH2, *LONG, *NO_EVAL))
        assert other.exit_code == 2 and "run-locked" in other.output, other.output
        _wait_for(run / "checkpoints" / str(2 * EVERY), proc)
    except BaseException:
        _kill_group(proc)
        raise
    proc.send_signal(signal.SIGTERM)
    code, out = _finish(proc, 120)
    assert code == 128 + signal.SIGTERM, out[-3000:]
    assert int(out.split("resumed from step ")[1].split()[0]) >= EVERY
    assert "[rank 1] SIGTERM: stopping" in out and "[rank 0] SIGTERM: stopping" in out
    assert "stopped by SIGTERM: every process was asked to checkpoint and stop" in out
    assert "resume with: seqc launch -n 2 -- train" in out
    stopped = int(out.split("stopped by SIGTERM at step ")[1].split(":")[0])
    steps = sorted(int(p.name) for p in (run / "checkpoints").iterdir())
    assert steps[-1] == stopped  # one checkpoint, at the step every process stopped after

    # another process count: one process on one device needs no setup, so this process
    shutil.copytree(run, folder / "mixed")
    single = CliRunner().invoke(app, [*_train(folder, "mixed", *LONG, *NO_EVAL), "--resume"])
    assert single.exit_code == 0, single.output[-3000:]
    assert f"resumed from step {stopped}" in single.output
    two, mixed = _losses(straight), _losses(folder / "mixed")
    assert len(mixed) == LONG_STEPS
    for x, y in zip(two, mixed, strict=True):
        assert abs(x - y) <= 1e-5 * abs(x), (two, mixed)

    # the group again, evaluating on dev after: process 0 alone reports it
    code, out = _finish(_launch(_train(folder, "preempted", *MESH2, *LONG, "--resume")))
    assert code == 0, out[-3000:]
    assert f"resumed from step {stopped}" in out
    assert out.count("dev perplexity after") == 1, out[-3000:]
    a, b = _final_params(straight), _final_params(run)
    for name in a:
        np.testing.assert_allclose(b[name], a[name], rtol=1e-6, atol=1e-7, err_msg=name)


def test_a_process_finds_its_place_in_the_cluster() -> None:
    assert cluster_from(env={}).num_processes == 1
    flags = cluster_from("10.0.0.1:1234", 4, 3, env={})
    assert (flags.process_id, flags.num_processes, flags.coordinator) == (3, 4, "10.0.0.1:1234")
    env = {"SEQC_COORDINATOR": "h:1", "SEQC_NUM_PROCESSES": "2", "SEQC_PROCESS_ID": "1"}
    assert cluster_from(env=env).process_id == 1 and not cluster_from(env=env).primary
    tf_config = {
        "cluster": {"chief": ["a:1"], "worker": ["b:1", "c:1"], "ps": ["d:1"]},
        "task": {"type": "worker", "index": 1},
    }
    worker = cluster_from(env={"TF_CONFIG": json.dumps(tf_config)})
    assert (worker.process_id, worker.num_processes, worker.role) == (2, 4, "worker")
    assert not worker.primary
    tf_config["task"] = {"type": "chief", "index": 0}
    assert cluster_from(env={"TF_CONFIG": json.dumps(tf_config)}).primary
    slurm = cluster_from(env={"SLURM_NTASKS": "8", "SLURM_PROCID": "5"})
    assert (slurm.process_id, slurm.num_processes, slurm.coordinator) == (5, 8, None)
    for bad in ({"TF_CONFIG": "{"}, {"SEQC_NUM_PROCESSES": "two"}):
        with pytest.raises(UsageError, match=r"TF_CONFIG|whole number"):
            cluster_from(env=bad)
    with pytest.raises(UsageError, match="process 4 of 4 does not exist"):
        cluster_from("h:1", 4, 4, env={})
    with pytest.raises(UsageError, match="HOST:PORT"):
        cluster_from("nohost", 2, 0, env={})


def test_launch_needs_a_command() -> None:
    result = CliRunner().invoke(app, ["launch", "-n", "2"])
    assert result.exit_code == 2 and "missing-command" in result.output
