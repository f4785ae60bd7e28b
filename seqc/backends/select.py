"""One interface over the JAX and TF backends for the run commands (train, eval, decode).

Both models take the same calls (`init`, `train_step(state, batch)`, `eval_step(params,
batch)`, `logits(params, arrays)`); what differs is how they are built, how their state is
checkpointed, and how weights given as arrays become their params. This module holds those
differences, so `seqc.run` never imports a framework by name. Frameworks are imported lazily:
`seqc check` should not pay for loading TensorFlow.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from seqc.backends.weights import NAMES
from seqc.compiler.graph import Graph
from seqc.spec.errors import UsageError

BACKENDS = ("jax", "tf")
__all__ = ["BACKENDS", "NAMES", "check_backend", "checkpoints", "fetch", "make_model"]


def check_backend(name: str) -> str:
    if name not in BACKENDS:
        raise UsageError(
            f"unknown backend `{name}`",
            code="bad-backend",
            expected=" or ".join(BACKENDS),
            found=name,
        )
    return name


def make_model(
    backend: str, graph: Graph, task: dict[str, Any], train: dict[str, Any], **options: Any
) -> Any:
    """A `JaxModel` or a `TfModel`; TF takes `jit_compile` and `placement` options."""
    if check_backend(backend) == "jax":
        from seqc.backends.jax.train import JaxModel

        return JaxModel(graph, task, train)
    from seqc.backends.tf.train import TfModel

    return TfModel(graph, task, train, seed=int(train["seed"]), **options)


def checkpoints(backend: str, directory: Path) -> Any:
    """The backend's checkpoint store: `save(step, state)`, `latest()`, `restore(like)`."""
    if check_backend(backend) == "jax":
        from seqc.backends.jax.checkpoint import Checkpoints

        return Checkpoints(directory)
    from seqc.backends.tf.checkpoint import TfCheckpoints

    return TfCheckpoints(directory)


def with_params(backend: str, model: Any, params: dict[str, np.ndarray]) -> dict[str, Any]:
    """A fresh state of `model` whose params are these arrays (by layer path)."""
    if check_backend(backend) == "jax":
        import jax.numpy as jnp

        state = model.init(0)
        state["params"] = {k: jnp.asarray(v) for k, v in params.items()}
        return state
    model.init_from(params)
    return model.state


def numpy_params(params: dict[str, Any]) -> dict[str, np.ndarray]:
    """Params of either backend (jax arrays or tf variables) as numpy arrays."""
    return {k: np.asarray(v) for k, v in params.items()}


def fetch(tree: dict[str, Any]) -> dict[str, np.ndarray]:
    """Metrics of a step (device arrays or tensors) as numpy values; waits for the step."""
    return {k: np.asarray(v) for k, v in tree.items()}
