"""TF against JAX, in numbers: the figures the parity tests bound, measured.

- forward: the largest normwise relative error of the TF interpreter's outputs against JAX's,
  over every built-in layer kind and every example model (the cases of
  `tests/backends/test_tf_parity.py`);
- optimizer step: the largest normwise relative parameter difference after one training step
  from the same params, over every optimizer case (`tests/backends/test_tf_train_parity.py`);
- loss curve: the largest relative difference of the losses of 50 steps of a tiny LM.

Reuses the tests' cases and helpers, so it measures exactly what they check. Run
`python bench/parity.py`; the last lines are `name: value` pairs.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "tests" / "support", ROOT / "tests" / "backends"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import numpy as np  # noqa: E402
import test_tf_parity as forward_cases  # noqa: E402
import test_tf_train_parity as train_cases  # noqa: E402
from lowering_helpers import compile_spec, params_of  # noqa: E402

from seqc.compiler.config import TrainConfig  # noqa: E402
from seqc.resolve.experiment import resolve  # noqa: E402
from seqc.resolve.program import load_program  # noqa: E402
from seqc.run.train.schedule import learning_rate  # noqa: E402


def forward_error() -> float:
    worst = 0.0
    for make in forward_cases.LAYERS.values():
        graph = make()
        inputs = forward_cases.make_inputs(graph)
        worst = max(worst, forward_cases.parity_error(graph, params_of(graph), inputs))
    for spec, experiment, input_name in forward_cases.EXAMPLES:
        symbols = {f"{input_name}.vocab_size": forward_cases.VOCAB}
        graph = compile_spec(ROOT / "examples" / spec, experiment, symbols=symbols).graph
        inputs = forward_cases.make_inputs(graph, seed=1)
        worst = max(worst, forward_cases.parity_error(graph, params_of(graph), inputs))
    return worst


def training_errors() -> tuple[float, float]:
    """(worst parameter error after one step over the optimizers, worst loss difference over
    50 steps of adam with a schedule)."""
    folder = Path(tempfile.mkdtemp())
    spec = folder / "lm.seq"
    spec.write_text(train_cases.SPEC.format())
    symbols = {"tiny.vocab_size": train_cases.VOCAB}
    compiled = compile_spec(spec, "tiny", symbols=symbols)
    base = dict(resolve(load_program(spec), "tiny", symbols=symbols).config["train"])
    step_worst = 0.0
    for opt in train_cases.OPTIMIZERS.values():
        train = TrainConfig.of(base | {"optimizer": opt, "steps": 10, "clip_norm": 0.5})
        jm, state, tm = train_cases.models(compiled, train)
        batch = train_cases.batches(1, seed=1)[0]
        rate = learning_rate(train)
        state, _ = jm.train_step(state, batch, rate(0))
        tm.train_step(tm.state, batch, rate(0))
        step_worst = max(step_worst, train_cases.param_error(state["params"], tm.numpy_params()))
    jax_curve, tf_curve, *_ = train_cases.curves(compiled, base)
    a, b = np.asarray(jax_curve, np.float64), np.asarray(tf_curve, np.float64)
    return step_worst, float(np.max(np.abs(a - b) / np.abs(a)))


def main() -> None:
    fwd = forward_error()
    step, curve = training_errors()
    print(f"forward_max_rel_err: {fwd:.3g}")
    print(f"optimizer_step_max_param_rel_err: {step:.3g}")
    print(f"loss_curve_50_steps_max_rel_err: {curve:.3g}")


if __name__ == "__main__":
    main()
