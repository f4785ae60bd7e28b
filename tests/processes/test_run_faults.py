"""Faults met from outside a run, each a clear error and no lost work (issue 32).

A full device at a checkpoint (a small tmpfs, mounted when the tests run as root) stops the
run with `no-space`, the checkpoint before it intact and nothing of the failed one left, on
both backends, and the run resumes once there is room; a run of several processes needs a
mesh of their devices, said at the mesh's line before anything is written; with a process
gone no save is begun, and a killed run's half-written checkpoint is swept by the next;
libraries' log lines and warnings stay out of a command's output; a refused warm start writes
nothing; the NaN stop's hint says what to do whether or not a checkpoint was written.

That a process that dies leaves the survivor to say `process-lost` and end at once, with no
half-written checkpoint, is checked on a real group in `test_multiprocess.py`
(`test_a_dead_process_leaves_the_survivor_to_say_so_and_end_at_once`), whose group is killed
that way anyway: a group of its own here cost about 15 CPU-s of processes starting.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from child_processes import no_strays  # noqa: F401 (an autouse fixture)
from tiny_specs import LM_SPEC, lm_corpus
from typer.testing import CliRunner

from seqc.backends import disk
from seqc.backends.api import Cluster, NoSpace
from seqc.cli import app
from seqc.run.session import open_session
from seqc.run.train.loop import Loop, train
from seqc.spec.errors import CheckError

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
NOISE = ("Traceback", "internal error", "Event loop is closed", "ERROR:absl", "RESOURCE_EXHAUSTED")


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    lm_corpus(tmp_path)
    common = (ROOT / "examples" / "common" / "transformer.seq").as_posix()
    path = tmp_path / "lm.seq"
    path.write_text(LM_SPEC.format(common=common))
    return path


def _train_args(spec: Path, run: Path, *sets: str) -> list[str]:
    out = ["train", str(spec), "-e", "tiny", "--run-dir", str(run)]
    out += ["--cache-dir", str(spec.parent / "cache")]
    for s in sets:
        out += ["--set", s]
    return out


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` at `path`: a device that fills up. Needs root (skipped otherwise)."""
    if os.geteuid() != 0:
        pytest.skip("a full device is a small tmpfs, which only root can mount")
    path.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _resize(path: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(path)], check=True)


# ---------------------------------------------------------------------- a full device


def _jax_state() -> dict:
    rng = np.random.default_rng(0)
    weights = {f"w{i}": rng.standard_normal((128, 128)).astype(np.float32) for i in range(4)}
    return {"params": weights, "step": np.int32(1)}  # 256 KiB, little for zstd to squeeze


def test_a_jax_checkpoint_the_device_has_no_room_for_is_refused_unbegun(tmp_path: Path) -> None:
    from seqc.backends.jax.checkpoint import Checkpoints

    with tmpfs(tmp_path / "small", "64k") as small:
        store = Checkpoints(small / "checkpoints", keep=3)
        try:
            with pytest.raises(NoSpace) as e:
                store.save(1, _jax_state())
        finally:
            store.close()
        assert (e.value.step, e.value.device) == (1, small)
        assert e.value.needed is not None and e.value.free < e.value.needed
        assert os.listdir(small / "checkpoints") == []  # not a byte of it written


def test_orbaxs_own_full_device_error_is_no_space_said_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The device fills while orbax writes (the room check passed): its error, its threads'
    log lines and its closed event loops' tracebacks become one `NoSpace`, and its temporary
    folder goes."""
    from seqc.backends.jax.checkpoint import Checkpoints

    monkeypatch.setattr(disk, "free_bytes", lambda path: 1 << 40)  # the check sees room
    with tmpfs(tmp_path / "small", "64k") as small:
        store = Checkpoints(small / "checkpoints", keep=3)
        try:
            with pytest.raises(NoSpace) as e:
                store.save(1, _jax_state())
        finally:
            store.close()
        assert e.value.step == 1 and e.value.device == small
        assert os.listdir(small / "checkpoints") == []  # its temporary folder removed
    time.sleep(0.5)  # TensorStore's late callbacks, if any got through
    captured = capfd.readouterr()
    for noise in NOISE:
        assert noise not in captured.err + captured.out


def test_tensorflows_full_device_error_is_no_space(tmp_path: Path) -> None:
    import tensorflow as tf

    from seqc.backends.tf.checkpoint import TfCheckpoints

    rng = np.random.default_rng(0)
    w = tf.Variable(rng.standard_normal((256, 256)).astype(np.float32))
    slot = tf.Variable(np.zeros((256, 256), np.float32))
    opt = SimpleNamespace(count=tf.Variable(0), slots={"w": slot})
    state = {"params": {"w": w}, "step": tf.Variable(1), "seed": tf.Variable(0), "opt": opt}
    with tmpfs(tmp_path / "small", "64k") as small:
        store = TfCheckpoints(small / "checkpoints", keep=3)
        with pytest.raises(NoSpace) as e:
            store.save(1, state)
        assert e.value.step == 1 and e.value.device == small
        assert os.listdir(small / "checkpoints") == []  # ckpt-1_temp and its files removed
        assert store.latest() is None


def test_a_full_device_at_a_checkpoint_stops_the_run_and_it_resumes_with_room(
    spec: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Checkpoint 2 fits, 4 does not: the run stops with `no-space` naming the device, the
    intact checkpoint and the command that goes on; with room, that command finishes it."""
    sets = ["train.steps=6", "train.checkpoint_every=2", "train.log_every=20"]
    with tmpfs(tmp_path / "small", "400k") as small:
        run = small / "run"
        result = runner.invoke(app, _train_args(spec, run, *sets))  # with the progress bar
        assert result.exit_code == 2, result.output
        out = result.output + "".join(capfd.readouterr())
        # the whole output on failure (it failed once in a loaded suite, not since, and pytest
        # shortens a long string)
        assert f"[no-space]: no space left on {small} writing checkpoint 4" in out, out
        assert "checkpoint 2 is intact" in out, out
        assert f"free space on {small}, then run: seqc train {spec}" in out, out
        assert out.rstrip().endswith("--resume")
        assert "loss nan" not in out  # the bar shows the loss it saved with (log_every 20)
        for noise in NOISE:
            assert noise not in out
        assert sorted(os.listdir(run / "checkpoints")) == ["2"]
        _resize(small, "4m")
        result = runner.invoke(app, [*_train_args(spec, run, *sets), "--no-progress", "--resume"])
        assert result.exit_code == 0, result.output
        assert "resumed from step 2" in result.output
        assert sorted(os.listdir(run / "checkpoints")) == ["2", "4", "6"]


# ---------------------------------------------------------------------- several processes


def test_several_processes_need_a_mesh_of_their_devices(spec: Path, tmp_path: Path) -> None:
    """Two processes over the default mesh {data: 1} would each train alone, and fail at their
    collective checkpoint after training: refused at the mesh, before anything is written."""
    session = open_session(spec, "tiny", ["train.steps=2"], cache_dir=tmp_path / "cache")
    run = tmp_path / "run"
    with pytest.raises(CheckError) as e:
        train(session, run, progress=False, cluster=Cluster(process_id=0, num_processes=2))
    assert e.value.code == "mesh-devices"
    assert "a run of 2 processes" in e.value.message and "{data: 1}" in e.value.message
    assert e.value.hint is not None and '--set "distribution.mesh={data: 2}"' in e.value.hint
    assert not run.exists()


def test_a_save_is_not_begun_when_a_process_is_gone() -> None:
    """Every process agrees before a checkpoint: with one gone, the collective that agrees
    fails at once, where the save would wait for it and leave a half-written step."""

    class Gone(Exception):
        pass

    def agree(flag: bool) -> bool:
        raise Gone("a collective with the others failed")

    saved: list[int] = []
    store = SimpleNamespace(latest=lambda: 10, save=lambda step, state: saved.append(step))
    loop = SimpleNamespace(checkpoints=store, agree=agree, flush=lambda done: None)
    with pytest.raises(Gone):
        Loop.save(loop, 20, {})  # type: ignore[arg-type]
    assert saved == []


def test_a_killed_runs_half_written_checkpoint_is_swept(tmp_path: Path) -> None:
    from seqc.backends.jax.checkpoint import Checkpoints

    folder = tmp_path / "checkpoints"
    half = folder / "100.orbax-checkpoint-tmp"
    (half / "default").mkdir(parents=True)
    (half / "default" / "part").write_bytes(b"x" * 100)
    store = Checkpoints(folder, keep=3)
    try:
        store.save(1, _jax_state())  # orbax finishes its sweep before the first save
        assert sorted(os.listdir(folder)) == ["1"]
    finally:
        store.close()


# ---------------------------------------------------------------------- what a run prints


LIBRARIES_LOG = """
import logging, warnings
import click, typer
from seqc.cli import app
from seqc.cli.logs import quiet_native_logs

undo = quiet_native_logs()  # as `seqc` (main) runs a command without --debug
group = typer.main.get_command(app)
group.get_command(click.Context(group), "average")  # a heavy command: the backends' libraries
from absl import logging as absl_logging

absl_logging.warning("absl: a library's warning")
absl_logging.error("absl: a library's error")
logging.getLogger("tensorboardX.x2num").warning("NaN or Inf found in input tensor.")
warnings.warn("a library's UserWarning")
undo()
"""


def test_libraries_log_lines_and_warnings_stay_out_of_a_commands_output() -> None:
    """absl's (orbax, TF's SavedModel code), tensorboardX's and Python warnings go through
    Python's logging straight to the real stderr, past the native log filter; errors pass."""
    done = subprocess.run(
        [sys.executable, "-c", LIBRARIES_LOG], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "a library's warning" not in done.stderr
    assert "NaN or Inf" not in done.stderr and "UserWarning" not in done.stderr
    assert "ERROR:absl:absl: a library's error" in done.stderr


def test_a_refused_warm_start_writes_nothing(spec: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    missing = tmp_path / "nowhere"
    result = runner.invoke(
        app, _train_args(spec, run, f'train.init_from=checkpoint("{missing}")', "train.steps=1")
    )
    assert result.exit_code == 2 and "no-checkpoint" in result.output, result.output
    assert not run.exists()  # not the folder, its lock, nor an empty checkpoints/


@pytest.mark.parametrize("every", [1, 5])
def test_the_nan_stops_hint_says_what_to_do_with_or_without_a_checkpoint(
    spec: Path, tmp_path: Path, every: int
) -> None:
    """With a checkpoint (written at step 1 here), a new run from its weights: a resume keeps
    the settings that diverged. Without one, the same --run-dir starts anew."""
    spec.write_text(spec.read_text().replace("peak = 1e-2", "peak = 1e30"))
    run = tmp_path / "run"
    sets = ["train.steps=8", f"train.checkpoint_every={every}"]
    result = runner.invoke(app, [*_train_args(spec, run, *sets), "--no-progress"])
    assert result.exit_code == 2 and "loss-not-finite" in result.output, result.output
    hint = result.output.split("hint:")[1]
    if every == 1:
        assert "the last good checkpoint is step 1" in result.output
        assert f'train.init_from=checkpoint("{run}", step = 1)' in " ".join(hint.split())
        assert "--resume" not in hint
    else:
        assert "no checkpoint was written before it" in result.output
        assert "nothing to resume" in hint and "resume from" not in hint
