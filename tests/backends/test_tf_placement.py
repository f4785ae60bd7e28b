"""The TF emitter with a placement: each op pinned with `tf.device` on two logical CPUs.

Logical devices must be configured before TF starts, so the check runs in a fresh process. It
trains the same tiny LM from the same params with and without a placement (the Transformer
block and the output layer on CPU:1, the rest on CPU:0) and compares the losses; it also reads
the devices of the traced training graph, so a placement that was silently ignored fails. Then
the same with a plan from the placement pass (m-ETF on two memory-limited devices).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SUPPORT = Path(__file__).resolve().parents[1] / "support"

SCRIPT = r"""
import json, sys, tempfile
from pathlib import Path
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
sys.path.insert(0, sys.argv[1])
import numpy as np
from lowering_helpers import compile_spec, params_of
from parity_lm import SPEC, VOCAB, batches
from seqc.backends.tf.backend import BACKEND
from collections import Counter
from seqc.compiler.config import TrainConfig
from seqc.compiler.placement.from_graph import problem_from_graph
from seqc.compiler.placement.plan import op_devices, run_placement
from seqc.resolve.experiment import resolve
from seqc.resolve.program import load_program
from seqc.run.train.schedule import learning_rate
from seqc.spec.errors import DeviceError

spec = Path(tempfile.mkdtemp()) / "lm.seq"
spec.write_text(SPEC.format())
compiled = compile_spec(spec, "tiny", symbols={"tiny.vocab_size": VOCAB})
graph = compiled.graph
resolved = resolve(load_program(spec), "tiny", symbols={"tiny.vocab_size": VOCAB})
# manual placement by layer path, unfused so every op keeps its own layer
dims = {"B": 4, "T": 12}
by_layer = problem_from_graph(graph, [{"memory": 1 << 40}] * 2, batch_dims=dims, fuse=False)
manual = run_placement(by_layer, "manual", {"layers": {"blocks": 1, "out": 1}})
by_layer_plan = op_devices(by_layer, manual)
params = params_of(graph)
cfg = TrainConfig.of(resolved.config["train"])
rate = learning_rate(cfg)
losses = {}
devices = {}
for name, placement in (("single", None), ("placed", by_layer_plan)):
    model = BACKEND.model(compiled, cfg, placement=placement)
    model.init_from(params)
    curve = []
    for step, batch in enumerate(batches(5)):
        _, metrics = model.train_step(model.state, batch, rate(step))
        curve.append(float(metrics["loss"]))
    losses[name] = curve
    fn = model.compiled_step.get_concrete_function(model.batch_tensors(batch), tf.constant(0.1))
    found = {}
    for op in fn.graph.get_operations():
        if op.device:
            key = op.device.rsplit("/", 1)[-1].replace("device:", "")
            found[key] = found.get(key, 0) + 1
    devices[name] = found
# A plan from the placement pass (m-ETF, unfused, two devices of a memory that forces a
# split) applied with tf.device: the same losses again.
from seqc.compiler.placement.algorithms import m_etf
from seqc.compiler.placement.checker import check

dims = {"B": 4, "T": 12}
problem = problem_from_graph(
    graph, [{"memory": 1 << 40}] * 2, "parallel", batch_dims=dims, fuse=False
)
need = sum(n.persistent for n in problem.nodes)
problem = problem_from_graph(
    graph, [{"memory": int(0.7 * need) + (1 << 20)}] * 2, "parallel", batch_dims=dims, fuse=False
)
plan = m_etf(problem)
check(problem, plan)
model = BACKEND.model(compiled, cfg, placement=op_devices(problem, plan))
model.init_from(params)
losses["planned"] = [
    float(model.train_step(model.state, b, rate(s))[1]["loss"]) for s, b in enumerate(batches(5))
]
planned_devices = sorted(set(plan.device))
try:
    BACKEND.model(compiled, cfg, placement={0: 7}).init(0)
    bad = "no error"
except DeviceError as e:
    bad = str(e)
print(json.dumps({"losses": losses, "devices": devices, "plan": Counter(by_layer_plan.values()),
                  "bad": bad, "planned_devices": planned_devices}))
"""


def test_placed_program_trains_with_the_same_loss_on_two_cpus() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(SUPPORT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    single, placed = out["losses"]["single"], out["losses"]["placed"]
    assert len(single) == 5
    for a, b in zip(single, placed, strict=True):
        assert abs(a - b) <= 1e-6 * abs(a), (single, placed)
    assert out["plan"]["1"] > 20 and out["plan"]["0"] > 5
    assert out["devices"]["placed"].get("CPU:1", 0) > 20  # pinned in the traced graph
    assert out["devices"]["placed"].get("CPU:0", 0) > 5
    assert "CPU:1" not in out["devices"]["single"]
    assert "CPU:7" in out["bad"] and "/device:CPU:1" in out["bad"]
    assert out["planned_devices"] == [0, 1]  # the memory limit made m-ETF use both
    for a, b in zip(single, out["losses"]["planned"], strict=True):
        assert abs(a - b) <= 1e-6 * abs(a), (single, out["losses"]["planned"])
