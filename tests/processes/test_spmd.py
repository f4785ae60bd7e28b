"""One JAX program on a mesh of devices: the same losses as on one device, with the params really
split; a sharded run checkpoints and resumes exactly; a mesh the devices or batches do not fit is
an error at the spec's line.

Several CPU devices need `--xla_force_host_platform_device_count` before JAX starts, so the
sharded work happens in a child process: one for the two tests that need eight devices (`CHILD`),
since each process costs seconds of importing JAX and setting it up before it trains anything.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_specs import LM_SPEC, lm_corpus
from typer.testing import CliRunner

from seqc.cli import app
from seqc.spec.parse_cache import ENV as PARSE_CACHE

SUPPORT = Path(__file__).resolve().parents[1] / "support"
ROOT = Path(__file__).resolve().parents[2]
FLAGS = {"XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=8"}

CHILD = r"""
import json, shutil, sys, tempfile
from dataclasses import dataclass
from pathlib import Path
import numpy as np
from typer.testing import CliRunner
from seqc.backends.jax.train import JaxModel
from seqc.cli import app
from seqc.compiler.compile import compile_task
from seqc.compiler.sharding import plan_sharding
from seqc.resolve.experiment import resolve
from seqc.resolve.program import load_program
from seqc.run.train.schedule import learning_rate

@dataclass
class Batch:
    arrays: dict

sys.path.insert(0, sys.argv[1])  # tests/support
from parity_lm import SPEC, VOCAB

# ---- the meshes (`test_meshes_train_like_one_device_with_params_split`)
spec = Path(tempfile.mkdtemp()) / "lm.seq"
# dropout on: every split of the batch must draw the one device's masks
spec.write_text(SPEC.format().replace("bias = false)", "bias = false, dropout = 0.1)"))
rng = np.random.default_rng(0)
data = []
for _ in range(10):
    seq = ((rng.integers(0, VOCAB, (8, 1)) + np.arange(13)[None]) % VOCAB).astype(np.int32)
    data.append(Batch({"inputs": seq[:, :-1], "targets": seq[:, 1:], "mask": seq[:, 1:] > 2}))
out = {}
for mesh in ("{data: 1}", "{data: 8}", "{data: 2, model: 4}", "{fsdp: 4, model: 2}"):
    program = load_program(spec)
    r = resolve(program, "tiny", [f"distribution.mesh={mesh}"], symbols={"tiny.vocab_size": VOCAB})
    task = compile_task(program, r, "lm")
    train = task.train
    model = JaxModel(task, train, plan_sharding(task.graph, r, "lm"))
    state, rate, losses = model.init(0), learning_rate(train), []
    exchanges = None
    if mesh == "{data: 8}":  # all-reduces in the compiled step (the test counts this one's)
        arrays = model.sharded.put_batch(data[0].arrays)
        hlo = model._train_step.lower(state, arrays, np.float32(0.1), model._keeps)
        hlo = hlo.compile().as_text()
        exchanges = hlo.count(" all-reduce(")
    for step, batch in enumerate(data):
        state, metrics = model.train_step(state, batch, rate(step))
        losses.append(float(metrics["loss"]))
    shards = {
        name: list(state["params"][name].addressable_shards[0].data.shape)
        for name in ("blocks.0.attn.q.w", "blocks.0.mlp.w2.w", "embed.table")
    }
    out[mesh] = {"losses": losses, "shards": shards, "all_reduces": exchanges}

# ---- a sharded run, and a copy of it resumed from its checkpoint at 2
# (`test_a_sharded_run_resumes_exactly`): `seqc train` commands in this process, the resume
# taking all it goes on from (checkpoint, data position, metrics) from the run directory
base, folder = json.loads(sys.argv[2]), Path(sys.argv[3])
mesh = ["--set", "distribution.mesh={data: 2, fsdp: 2, model: 2}", "--no-dev-eval"]
mesh += ["--set", "train.steps=4", "--set", "train.checkpoint_every=2"]

def train(run, *extra):
    args = ["train", *base, "--run-dir", str(folder / run), *mesh, *extra]
    result = CliRunner().invoke(app, args)
    return {"code": result.exit_code, "output": result.output[-3000:]}

runs = {"straight": train("a")}
shutil.copytree(folder / "a", folder / "b")
shutil.rmtree(folder / "b" / "checkpoints" / "4")  # as if it had stopped after 2
runs["resumed"] = train("b", "--resume")
print(json.dumps({"meshes": out, "runs": runs}))
"""


@pytest.fixture(scope="module")
def child(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    """What `CHILD` found, on eight CPU devices, and the folder of its runs."""
    folder = tmp_path_factory.mktemp("spmd")
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(SUPPORT), json.dumps(_spec(folder)), str(folder)],
        capture_output=True,
        text=True,
        timeout=600,
        env=os.environ | FLAGS | {PARSE_CACHE: str(folder / "parse-cache")},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), folder


def test_meshes_train_like_one_device_with_params_split(child: tuple[dict, Path]) -> None:
    out = child[0]["meshes"]
    base = out["{data: 1}"]["losses"]
    for mesh, got in out.items():
        for a, b in zip(base, got["losses"], strict=True):
            assert abs(a - b) <= 1e-5 * abs(a), (mesh, base, got["losses"])
    assert out["{data: 8}"]["shards"]["blocks.0.attn.q.w"] == [16, 16]  # replicated
    # data parallel sums every gradient in one exchange (`seqc.backends.jax.data_parallel`)
    assert out["{data: 8}"]["all_reduces"] == 1
    assert out["{data: 2, model: 4}"]["shards"] == {
        "blocks.0.attn.q.w": [16, 4],  # columns on model
        "blocks.0.mlp.w2.w": [8, 16],  # rows on model
        "embed.table": [5, 16],  # the vocabulary on model
    }
    assert out["{fsdp: 4, model: 2}"]["shards"]["blocks.0.attn.q.w"] == [4, 8]


def _spec(tmp_path: Path) -> list[str]:
    lm_corpus(tmp_path)
    common = (ROOT / "examples" / "common" / "transformer.seq").as_posix()
    spec = tmp_path / "lm.seq"
    spec.write_text(LM_SPEC.format(common=common))
    return [str(spec), "-e", "tiny", "--cache-dir", str(tmp_path / "cache"), "--no-progress"]


def _losses(run: Path) -> list[float]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [json.loads(x)["loss"] for x in lines if json.loads(x)["split"] == "train"]


def test_a_sharded_run_resumes_exactly(child: tuple[dict, Path]) -> None:
    """4 steps on a mesh of all three axes, and a copy of the run resumed from its checkpoint
    at 2 to 4 (`CHILD`): the same losses. Two steps after the checkpoint say what more would:
    a resume that lost the data position or the rng (dropout) shows it in its first loss, one
    that lost the optimizer's state in its second."""
    runs, folder = child[0]["runs"], child[1]
    for name in ("straight", "resumed"):
        assert runs[name]["code"] == 0, (name, runs[name]["output"])
    assert "resumed from step 2" in runs["resumed"]["output"]
    info = json.loads((folder / "a" / "run.json").read_text())
    assert info["mesh"] == {"data": 2, "fsdp": 2, "model": 2}  # it really ran sharded
    a, b = _losses(folder / "a"), _losses(folder / "b")
    assert len(a) == len(b) == 4
    for x, y in zip(a, b, strict=True):
        assert abs(x - y) <= 1e-6 * abs(x), (a, b)


def test_a_mesh_the_devices_or_batches_do_not_fit_is_located(tmp_path: Path) -> None:
    base = _spec(tmp_path)
    runner = CliRunner()
    run = ["--run-dir", str(tmp_path / "run")]
    result = runner.invoke(app, ["train", *base, *run, "--set", "distribution.mesh={data: 2}"])
    assert result.exit_code == 2, result.output
    assert "mesh-devices" in result.output and "needs 2 devices" in result.output
    result = runner.invoke(app, ["train", *base, *run, "--set", "distribution.mesh={data: 3}"])
    assert result.exit_code == 2 and "batch-not-divisible" in result.output
    assert not (tmp_path / "run").exists()
