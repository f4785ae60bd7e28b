"""Training and evaluation steps of a lowered model on JAX, each one `jax.jit`-compiled program.

The state is a plain pytree (params, optimizer state, step, rng) so that checkpoints hold exactly
what a resumed run needs to continue bit for bit.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from seqc.backends.inputs import LABELS, input_fields
from seqc.backends.jax.init import init_params
from seqc.backends.jax.interpret import run_graph
from seqc.backends.jax.loss import task_loss
from seqc.backends.jax.ops import Ctx
from seqc.backends.jax.optim import optimizer
from seqc.compiler.graph import Graph
from seqc.compiler.values import CallValue


class JaxModel:
    """A task's model, loss and optimizer, compiled for training and evaluation."""

    backend = "jax"

    def __init__(self, graph: Graph, task: dict[str, Any], train: dict[str, Any]) -> None:
        self.graph = graph
        self.fields = input_fields(graph)
        self.loss: CallValue = task["loss"]
        self.train_config = train
        self.tx = optimizer(train, clip=False)  # clipped in the step, from the norm it logs
        self.clip_norm = float(train.get("clip_norm", 0.0))
        self.compute_dtype = jnp.bfloat16 if train["compute_dtype"] == "bfloat16" else jnp.float32
        self._train_step = jax.jit(self._train_impl, donate_argnums=(0,), static_argnums=(2,))
        self._eval_step = jax.jit(self._eval_impl, static_argnums=(2,))
        self._logits = jax.jit(self._logits_impl)

    # ---------------------------------------------------------------- state
    def init(self, seed: int) -> dict[str, Any]:
        params = init_params(self.graph, seed)
        return {
            "params": params,
            "opt_state": self.tx.init(params),
            "step": jnp.zeros((), jnp.int32),
            "rng": jax.random.PRNGKey(seed + 1),
        }

    def inputs(self, arrays: dict[str, Any]) -> dict[str, Any]:
        return {name: arrays[f] for name, f in self.fields.items()}

    def forward(
        self, params: dict, arrays: dict, rng: jax.Array | None, training: bool
    ) -> jax.Array:
        ctx = Ctx(rng=rng, training=training, compute_dtype=self.compute_dtype)
        return run_graph(self.graph, params, self.inputs(arrays), ctx)[0]

    # ---------------------------------------------------------------- steps
    def _objective(self, params: dict, arrays: dict, rng: jax.Array, task: str) -> tuple:
        logits = self.forward(params, arrays, rng, training=True)
        labels, mask = LABELS[task]
        out = task_loss(self.loss, logits, arrays[labels], arrays[mask], accuracy=False)
        return out["loss"], out

    def _train_impl(self, state: dict, arrays: dict, task: str) -> tuple[dict, dict]:
        rng, step_rng = jax.random.split(state["rng"])
        grad_fn = jax.value_and_grad(self._objective, has_aux=True)
        (_, metrics), grads = grad_fn(state["params"], arrays, step_rng, task)
        norm = optax.tree.norm(grads)
        if self.clip_norm > 0.0:  # as optax.clip_by_global_norm, without a second norm pass
            scale = self.clip_norm / jnp.maximum(norm, self.clip_norm)
            grads = jax.tree.map(lambda g: g * scale.astype(g.dtype), grads)
        updates, opt_state = self.tx.update(grads, state["opt_state"], state["params"])
        params = jax.tree.map(lambda p, u: p + u, state["params"], updates)
        metrics = dict(metrics)
        metrics["grad_norm"] = norm
        new = {"params": params, "opt_state": opt_state, "step": state["step"] + 1, "rng": rng}
        return new, metrics

    def _eval_impl(self, params: dict, arrays: dict, task: str) -> dict:
        logits = self.forward(params, arrays, None, training=False)
        labels, mask = LABELS[task]
        return task_loss(self.loss, logits, arrays[labels], arrays[mask])

    def _logits_impl(self, params: dict, arrays: dict) -> jax.Array:
        return self.forward(params, arrays, None, training=False)

    def train_step(self, state: dict, batch: Any) -> tuple[dict, dict]:
        return self._train_step(state, dict(batch.arrays), batch.task)

    def eval_step(self, params: dict, batch: Any) -> dict:
        return self._eval_step(params, dict(batch.arrays), batch.task)

    def logits(self, params: dict, arrays: dict[str, np.ndarray]) -> jax.Array:
        return self._logits(params, arrays)
