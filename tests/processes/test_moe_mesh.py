"""Mixture of experts on an `expert` mesh axis, on four forced CPU devices: {expert: 2} and
{data: 2, expert: 2} give one device's losses, gradient norms and experts'
figures per step (1e-5), and every gradient of the first step (read from the step's own Adam
moment, `first_gradients`, rather than compiled again as a program of its own); each device holds
E / n experts' weights; a pure {data: 2} run (each replica its own rows, the experts' losses
averaged as the loss is) stays within 1e-3 and reports the figures; and `seqc train` on
{data: 2, expert: 2} writes each layer's dropped fraction and loads to metrics.jsonl.

Several CPU devices need `--xla_force_host_platform_device_count` before JAX starts, so the
work happens in one child process (`CHILD`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from child_processes import on_forced_devices
from tiny_specs import MOE_LM_SPEC

MESHES = ("{data: 1}", "{expert: 2}", "{data: 2, expert: 2}", "{data: 2}")

CHILD = r"""
import json, sys
from dataclasses import dataclass
from pathlib import Path
import numpy as np
import optax
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

folder = Path(sys.argv[1])
meshes = json.loads(sys.argv[2])
spec = folder / "lm.seq"
rng = np.random.default_rng(0)
data = []
for _ in range(3):
    seq = ((rng.integers(0, 20, (8, 1)) + np.arange(13)[None]) % 20).astype(np.int32)
    data.append(Batch({"inputs": seq[:, :-1], "targets": seq[:, 1:], "mask": seq[:, 1:] > 2}))

def first_gradients(state, norm, train):
    # the first step's gradient, unclipped, from Adam's first moment ((1 - b1) g, clipped):
    # the step's own, so no second program is compiled for it
    adam = [s for s in state["opt_state"] if isinstance(s, optax.ScaleByAdamState)][0]
    clip = np.float32(train.clip_norm)
    scale = clip / np.maximum(np.float32(norm), clip)
    b1 = np.float32(1.0 - train.optimizer.beta1)
    return {k: (np.asarray(v) / b1 / scale).tolist() for k, v in adam.mu.items()}

out = {}
for mesh in meshes:
    program = load_program(spec)
    r = resolve(program, "tiny", [f"distribution.mesh={mesh}"])
    task = compile_task(program, r, "lm")
    plan = plan_sharding(task.graph, r, "lm")
    model = JaxModel(task, task.train, None if plan.trivial else plan)
    state = model.init(0)
    rate, steps, collectives, grads = learning_rate(task.train), [], None, None
    if plan.trivial:
        for step, batch in enumerate(data):
            state, metrics = model.train_step(state, batch, rate(step))
            steps.append({k: np.asarray(v).tolist() for k, v in metrics.items()})
            if step == 0:
                grads = first_gradients(state, steps[0]["grad_norm"], task.train)
    else:  # compiled once, ahead of time: its text shows the collectives XLA made
        arrays = [model.sharded.put_batch(b.arrays) for b in data]
        lr = np.float32(rate(0))
        compiled = model._train_step.lower(state, arrays[0], lr, model._keeps).compile()
        text = compiled.as_text()
        collectives = {c: text.count(c + "(") for c in ("all-to-all", "all-reduce", "all-gather")}
        for step, a in enumerate(arrays):
            state, metrics = compiled(state, a, np.float32(rate(step)), model._keeps)
            steps.append({k: np.asarray(v).tolist() for k, v in metrics.items()})
            if step == 0:
                grads = first_gradients(state, steps[0]["grad_norm"], task.train)
    w1 = state["params"]["blocks.0.mlp.w1"]
    held = [list(w1.shape), list(w1.addressable_shards[0].data.shape)]
    out[mesh] = {"steps": steps, "grads": grads, "held": held, "collectives": collectives}

args = ["train", str(spec), "-e", "tiny", "--no-progress", "--no-dev-eval", "--cache-dir",
        str(folder / "cache"), "--set", "train.steps=4", "--set", "train.log_every=1",
        "--set", "distribution.mesh={data: 2, expert: 2}", "--run-dir", str(folder / "run"),
        "--set", "lm.decode=greedy(max_length = 2)"]  # the sample after training: short
result = CliRunner().invoke(app, args)
print(json.dumps({"meshes": out, "run": {"code": result.exit_code,
                                         "output": result.output[-3000:]}}))
"""


@pytest.fixture(scope="module")
def child(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    folder = tmp_path_factory.mktemp("moe-mesh")
    (folder / "lm.seq").write_text(MOE_LM_SPEC)
    words = ["abc", "bcd", "cde", "def", "efg", "fgh"]
    lines = [" ".join(words[(i + j) % 6] for j in range(3)) for i in range(200)]
    (folder / "train.txt").write_text("\n".join(lines) + "\n")
    return on_forced_devices(CHILD, folder, str(folder), json.dumps(MESHES)), folder


def test_expert_meshes_train_like_one_device(child: tuple[dict, Path]) -> None:
    out = child[0]["meshes"]
    base = out["{data: 1}"]["steps"]
    for mesh in ("{expert: 2}", "{data: 2, expert: 2}", "{data: 2}"):
        for step, (want, got) in enumerate(zip(base, out[mesh]["steps"], strict=True)):
            for key in ("loss", "grad_norm", *(k for k in want if k.startswith("moe."))):
                # on {data: 2} each replica balances its own rows' experts: the aux loss is a
                # product of means, so the replicas' average is near the whole batch's only
                tolerance = 1e-5 if mesh != "{data: 2}" else 5e-2 if "moe." in key else 1e-3
                a, b = np.asarray(want[key]), np.asarray(got[key])
                close = np.allclose(a, b, rtol=tolerance, atol=tolerance * 1e-2)
                assert close, (mesh, step, key, a, b)
    assert any(s["moe.blocks.0.mlp.dropped"] > 0 for s in base)  # capacity factor 1 drops
    for mesh in ("{expert: 2}", "{data: 2, expert: 2}"):  # every gradient of the first step
        grads = out[mesh]["grads"]
        assert set(grads) == set(out["{data: 1}"]["grads"]), mesh
        for name, g in out["{data: 1}"]["grads"].items():
            diff = np.abs(np.asarray(g) - np.asarray(grads[name])).max()
            assert diff <= 1e-5, (mesh, name, diff)


def test_each_device_holds_its_experts(child: tuple[dict, Path]) -> None:
    out = child[0]["meshes"]
    assert out["{data: 1}"]["held"] == [[4, 16, 32], [4, 16, 32]]
    assert out["{expert: 2}"]["held"][1] == [2, 16, 32]
    assert out["{data: 2, expert: 2}"]["held"][1] == [2, 16, 32]
    assert out["{data: 2}"]["held"][1] == [4, 16, 32]


def test_tokens_go_to_their_experts_by_all_to_all(child: tuple[dict, Path]) -> None:
    """The batch is split on the expert axis too (GShard): the dispatched slots are laid out
    by expert, which XLA turns into all-to-alls; without an expert axis, none."""
    out = child[0]["meshes"]
    for mesh in ("{expert: 2}", "{data: 2, expert: 2}"):
        assert out[mesh]["collectives"]["all-to-all"] > 0, (mesh, out[mesh]["collectives"])
    assert out["{data: 2}"]["collectives"]["all-to-all"] == 0


def test_a_run_logs_the_experts_figures(child: tuple[dict, Path]) -> None:
    run, folder = child[0]["run"], child[1]
    assert run["code"] == 0, run["output"]
    lines = [json.loads(x) for x in (folder / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in lines if x["split"] == "train"]
    assert len(train) == 4
    for record in train:
        for layer in ("blocks.0.mlp", "blocks.1.mlp"):
            assert 0.0 <= record[f"moe.{layer}.dropped"] < 1.0
            load = record[f"moe.{layer}.load"]
            assert len(load) == 4 and abs(sum(load) - 1.0) < 1e-4
            assert record[f"moe.{layer}.aux_loss"] > 0
    events = list((folder / "run" / "events").glob("*"))
    assert events  # TensorBoard: one chart per figure, one per expert's load
