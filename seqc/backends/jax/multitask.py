"""The tasks of a multi-task experiment on JAX over one set of params (`api.MultiTaskModel`).

Each task keeps its own `JaxModel` (its jitted steps over the params it reads). Stepping one task
(`mix_by = "sample"` or `"round_robin"`), the joint state lends that task's model a state made of
the task's params and its own optimizer state, and takes the updated ones back: the task's step
is the single-task step, exactly, and params it does not read are not touched. Stepping the
weighted sum (`"sum"`), one jitted program runs every task's forward and criterion on its own
batch and updates all params with one optimizer state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from seqc.backends.jax.optim import direction
from seqc.backends.jax.train import JaxModel
from seqc.compiler.config import TrainConfig
from seqc.compiler.init import init_params
from seqc.compiler.multitask import MultiTask


class JaxMultiTaskModel:
    backend = "jax"
    strategy = "single"

    def __init__(self, multi: MultiTask, train: TrainConfig, weights: Mapping[str, float]) -> None:
        self.multi = multi
        self.models = {t: JaxModel(task, train) for t, task in multi.tasks.items()}
        self.names = {t: multi.reads(t) for t in multi.tasks}
        self.weights = {t: float(weights[t]) for t in multi.tasks}
        self.sum = train.mix_by == "sum"
        self.clip_norm = train.clip_norm
        self.tx: Any = direction(train) if self.sum else None
        self._sum_step = jax.jit(self._sum_impl, donate_argnums=(0,)) if self.sum else None

    # ---------------------------------------------------------------- state
    def init(self, seed: int, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {}
        for task in self.multi.tasks.values():
            params.update(init_params(task.graph, seed))
        return self._state(params | dict(given or {}), seed)

    def with_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return self._state(params, 0)

    def _state(self, params: Mapping[str, Any], seed: int) -> dict[str, Any]:
        arrays = {k: jnp.asarray(v) for k, v in params.items()}
        if self.sum:
            opt: Any = self.tx.init(arrays)
        else:
            opt = {t: m.tx.init(self.task_params(t, arrays)) for t, m in self.models.items()}
        return {
            "params": arrays,
            "opt_state": opt,
            "step": jnp.zeros((), jnp.int32),
            "rng": jax.random.PRNGKey(seed + 1),
        }

    def task_params(self, task: str, params: Mapping[str, Any]) -> dict[str, Any]:
        return {k: params[k] for k in self.names[task]}

    def view(self, task: str) -> JaxModel:
        return self.models[task]

    # ---------------------------------------------------------------- steps
    def train_step(
        self, state: dict[str, Any], batches: Mapping[str, Any], lr: Mapping[str, float]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        if self.sum:
            arrays = {t: dict(b.arrays) for t, b in batches.items()}
            assert self._sum_step is not None
            return self._sum_step(state, arrays, np.float32(lr[next(iter(lr))]))
        ((task, batch),) = batches.items()
        sub = {
            "params": self.task_params(task, state["params"]),
            "opt_state": state["opt_state"][task],
            "step": state["step"],
            "rng": state["rng"],
        }
        new, metrics = self.models[task].train_step(sub, batch, lr[task])
        opt = dict(state["opt_state"])
        opt[task] = new["opt_state"]
        joint = {
            "params": dict(state["params"]) | new["params"],
            "opt_state": opt,
            "step": new["step"],
            "rng": new["rng"],
        }
        return joint, {task: metrics}

    def _sum_impl(self, state: dict, arrays: dict, lr: jax.Array) -> tuple[dict, dict]:
        rng, step_rng = jax.random.split(state["rng"])
        keys = jax.random.split(step_rng, len(self.models))

        def total(params: dict) -> tuple[jax.Array, dict]:
            loss, out = jnp.zeros((), jnp.float32), {}
            for (t, model), key in zip(self.models.items(), keys, strict=True):
                value, metrics = model.objective(params, arrays[t], key)
                loss = loss + self.weights[t] * value
                out[t] = metrics
            return loss, out

        (_, metrics), grads = jax.value_and_grad(total, has_aux=True)(state["params"])
        norm = optax.tree.norm(grads)
        if self.clip_norm > 0.0:
            scale = self.clip_norm / jnp.maximum(norm, self.clip_norm)
            grads = jax.tree.map(lambda g: g * scale.astype(g.dtype), grads)
        updates, opt_state = self.tx.update(grads, state["opt_state"], state["params"])
        params = jax.tree.map(
            lambda p, u: p + jnp.asarray(-lr, u.dtype) * u, state["params"], updates
        )
        out = {t: dict(m) | {"grad_norm": norm} for t, m in metrics.items()}
        new = {"params": params, "opt_state": opt_state, "step": state["step"] + 1, "rng": rng}
        return new, out
