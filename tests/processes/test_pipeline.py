"""GPipe on the JAX mesh (`seqc.backends.jax.pipeline`), on four forced CPU devices: losses
and gradient norms (and every gradient of the first step) equal the one-device step's for
{stage: 4}, {stage: 2, data: 2}, {stage: 2, fsdp: 2} (each stage rematerialised, the default)
and {stage: 2} (without); each device holds only its stage's params; a pipelined run
checkpoints, and its checkpoint resumes exactly on another stage count.

The gradients are read from the training step itself (Adam's first moment after one step,
unclipped: `first_gradients`), not from a second program compiled for them: a pipelined
program takes seconds to trace and compile.

Several CPU devices need `--xla_force_host_platform_device_count` before JAX starts, so the
work happens in one child process (`CHILD`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from child_processes import on_forced_devices
from tiny_specs import PIPELINE_LM_SPEC

SUPPORT = Path(__file__).resolve().parents[1] / "support"

CHILD = r"""
import json, shutil, sys
from dataclasses import dataclass
from pathlib import Path
import numpy as np
import optax
from typer.testing import CliRunner
from seqc.backends.jax.pipeline import PipelinedModel
from seqc.backends.jax.staged import portable
from seqc.backends.jax.train import JaxModel
from seqc.cli import app
from seqc.compiler.compile import compile_task
from seqc.compiler.pipeline.plan import pipeline_for
from seqc.compiler.sharding import plan_sharding
from seqc.resolve.experiment import resolve
from seqc.resolve.program import load_program
from seqc.run.train.schedule import learning_rate

@dataclass
class Batch:
    arrays: dict

folder = Path(sys.argv[1])
spec = folder / "lm.seq"
rng = np.random.default_rng(0)
data = []
for _ in range(3):
    seq = ((rng.integers(0, 20, (8, 1)) + np.arange(13)[None]) % 20).astype(np.int32)
    data.append(Batch({"inputs": seq[:, :-1], "targets": seq[:, 1:], "mask": seq[:, 1:] > 2}))

def by_name(tree):  # params by name on the host, as a checkpoint holds them
    return {k: np.asarray(v) for k, v in portable(tree, host=True).items()}

def first_gradients(state, norm, train):
    # the first step's gradient, unclipped, from Adam's first moment ((1 - b1) g, clipped):
    # the step's own, so no second program is compiled for it
    adam = [s for s in state["opt_state"] if isinstance(s, optax.ScaleByAdamState)][0]
    clip = np.float32(train.clip_norm)
    scale = clip / np.maximum(np.float32(norm), clip)
    mu, b1 = by_name(adam.mu), np.float32(1.0 - train.optimizer.beta1)
    return {k: (v / b1 / scale).tolist() for k, v in mu.items()}

out = {}
# {stage: 2} alone runs without rematerialisation: every mesh path, and both kinds of stage
for mesh, m in (("{data: 1}", "0"), ("{stage: 4}", "2"), ("{stage: 2, data: 2}", "2"),
                ("{stage: 2, fsdp: 2}", "2"), ("{stage: 2}", "4, remat = false")):
    program = load_program(spec)
    sets = [f"distribution.mesh={mesh}"]
    sets += [f"distribution.pipeline=gpipe({m})"] if m != "0" else []
    r = resolve(program, "tiny", sets)
    task = compile_task(program, r, "lm")
    if m != "0":
        plan = plan_sharding(task.graph, r, "lm")
        plan.pipeline = pipeline_for(task, r, "lm", plan.mesh)
        model = PipelinedModel(task, task.train, plan)
    else:
        model = JaxModel(task, task.train, None)
    state = model.init(0)
    rate, losses, norms, grads = learning_rate(task.train), [], [], None
    for step, batch in enumerate(data):
        state, metrics = model.train_step(state, batch, rate(step))
        losses.append(float(metrics["loss"]))
        norms.append(float(metrics["grad_norm"]))
        if step == 0:
            grads = first_gradients(state, norms[0], task.train)
    held = None
    if m != "0":
        packed = state["params"].packed
        held = {
            "global": list(packed.shape),
            "shard": list(packed.addressable_shards[0].data.shape),
            "rows": sorted({x.index[0].indices(len(packed))[:2] for x in packed.global_shards}),
            "stages": [list(s.units) for s in plan.pipeline.stages],
            "shared": list(state["params"].layout.shared),
        }
    out[mesh] = {"losses": losses, "norms": norms, "grads": grads, "held": held}

# a pipelined run, and a copy resumed from its checkpoint at 3 on four stages instead of two
base = [str(spec), "-e", "tiny", "--no-progress", "--no-dev-eval"]
base += ["--cache-dir", str(folder / "cache"), "--set", "train.steps=6"]
base += ["--set", "lm.decode=greedy(max_length = 2)"]  # the sample after training: short
def train(run, mesh, m, *extra):
    args = ["train", *base, "--run-dir", str(folder / run), "--set", f"distribution.mesh={mesh}"]
    args += ["--set", f"distribution.pipeline=gpipe({m})", "--set", "train.checkpoint_every=3"]
    result = CliRunner().invoke(app, [*args, *extra])
    return {"code": result.exit_code, "output": result.output[-3000:]}
runs = {"straight": train("a", "{stage: 2, data: 2}", 2)}
shutil.copytree(folder / "a", folder / "b")
shutil.rmtree(folder / "b" / "checkpoints" / "6")
runs["resumed"] = train("b", "{stage: 4}", 2, "--resume")
print(json.dumps({"meshes": out, "runs": runs}))
"""


@pytest.fixture(scope="module")
def child(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    folder = tmp_path_factory.mktemp("pipeline")
    (folder / "lm.seq").write_text(PIPELINE_LM_SPEC)
    words = ["abc", "bcd", "cde", "def", "efg", "fgh"]
    lines = [" ".join(words[(i + j) % 6] for j in range(3)) for i in range(200)]
    (folder / "train.txt").write_text("\n".join(lines) + "\n")
    return on_forced_devices(CHILD, folder, str(folder)), folder


def test_pipelines_train_like_one_device(child: tuple[dict, Path]) -> None:
    out = child[0]["meshes"]
    base = out["{data: 1}"]
    for mesh, got in out.items():
        for key in ("losses", "norms"):  # each step's loss and its gradient's norm
            for a, b in zip(base[key], got[key], strict=True):
                assert abs(a - b) <= 1e-5 * abs(a), (mesh, key, base[key], got[key])
        # and every gradient of the first step (`first_gradients` in `CHILD`)
        assert set(got["grads"]) == set(base["grads"]), mesh
        for name, g in base["grads"].items():
            diff = abs(_flat(g) - _flat(got["grads"][name])).max()
            assert diff <= 1e-5, (mesh, name, diff)


def _flat(x: list) -> object:
    import numpy as np

    return np.asarray(x, dtype=np.float64).ravel()


def test_each_device_holds_its_stage_only(child: tuple[dict, Path]) -> None:
    out = child[0]["meshes"]
    two, four = out["{stage: 2}"]["held"], out["{stage: 4}"]["held"]
    width = two["global"][1]
    assert two["global"][0] == 2 and two["shard"] == [1, width]
    assert four["global"][0] == 4 and four["shard"] == [1, four["global"][1]]
    assert four["global"][1] < width  # a quarter of the layers each, not half
    assert four["rows"] == [[0, 1], [1, 2], [2, 3], [3, 4]]  # one stage's row per device
    fsdp = out["{stage: 2, fsdp: 2}"]["held"]
    assert fsdp["shard"] == [1, fsdp["global"][1] // 2]  # each row split again over fsdp
    assert "embed.table" in two["shared"]  # tied to the loss's output layer on the last stage
    assert two["stages"][0][0] == "embed" and two["stages"][-1][-1] == "norm"


def test_a_pipelined_checkpoint_resumes_on_another_stage_count(child: tuple[dict, Path]) -> None:
    runs, folder = child[0]["runs"], child[1]
    for name in ("straight", "resumed"):
        assert runs[name]["code"] == 0, (name, runs[name]["output"])
    assert "resumed from step 3" in runs["resumed"]["output"]
    a, b = _losses(folder / "a"), _losses(folder / "b")
    assert len(a) == len(b) == 6
    for x, y in zip(a[3:], b[3:], strict=True):
        assert abs(x - y) <= 1e-5 * abs(x), (a, b)


def _losses(run: Path) -> list[float]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [json.loads(x)["loss"] for x in lines if json.loads(x)["split"] == "train"]
