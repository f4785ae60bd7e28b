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
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from child_processes import children, no_strays  # noqa: F401 (an autouse fixture)
from fork_server import Forked, ForkServer, forks_fixture  # noqa: F401 (the `forks` fixture)
from tiny_specs import LM_SPEC, lm_corpus
from typer.testing import CliRunner

from seqc.cli import app
from seqc.run.processes.launch import members

SUPPORT = Path(__file__).resolve().parents[1] / "support"
ROOT = Path(__file__).resolve().parents[2]
TF = ["--backend", "tf"]
MESH2 = ["--set", "distribution.mesh={data: 2}"]


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
