"""The JAX backend behind the contract of `seqc.backends.api`.

JAX compiles a whole training step into one XLA program, so it does not run a placement plan
op by op (`places_ops` is False); the run commands refuse such a plan at the spec's placement
line and point at the TF backend. It runs a sharding plan: the one program on a mesh of devices
(`seqc.backends.jax.mesh`). Frameworks load on first use.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from seqc.backends.api import (
    CheckpointStore,
    Cluster,
    JointModel,
    Model,
    Placement,
    StepFunctions,
    Weights,
)
from seqc.compiler.compile import CompiledTask
from seqc.compiler.graph import Graph
from seqc.compiler.incremental import StepProgram
from seqc.compiler.multitask import MultiTask
from seqc.compiler.sharding import ShardingPlan, check_devices
from seqc.spec.errors import DeviceError


class JaxBackend:
    name = "jax"
    title = "JAX"
    places_ops = False
    trains_async = False

    def __init__(self) -> None:
        self._compiled: dict[int, tuple[Graph, Any]] = {}
        self._steps: dict[int, Any] = {}

    def model(
        self,
        task: CompiledTask,
        train: Mapping[str, Any],
        *,
        placement: Placement | None = None,
        sharding: ShardingPlan | None = None,
        jit_compile: bool = False,
    ) -> Model:
        import jax

        from seqc.backends.jax.train import JaxModel

        if placement and len(set(placement.values())) > 1:
            raise DeviceError(
                "the JAX backend runs a step as one program on one device; it cannot run a "
                "placement plan over several",
                code="cannot-place",
                hint="train with --backend tf",
            )
        if sharding is not None and not sharding.trivial:
            where = f"this run's {jax.process_count()} JAX process(es)"
            check_devices(sharding, jax.device_count(), where)
        return JaxModel(task, train, sharding)

    def joint_model(
        self,
        multi: MultiTask,
        train: Mapping[str, Any],
        weights: Mapping[str, float],
        *,
        jit_compile: bool = False,
    ) -> JointModel:
        from seqc.backends.jax.multitask import JaxJointModel

        return JaxJointModel(multi, train, weights)

    def start(self, cluster: Cluster) -> None:
        """`jax.distributed.initialize` for a run of several processes: with the launcher's or
        the flags' coordinator, else from the cluster's environment (SLURM, Open MPI), as JAX
        detects it. On CPU, collectives across processes go over gloo."""
        if not cluster.several:
            return
        import jax

        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        if cluster.coordinator is not None:
            jax.distributed.initialize(
                cluster.coordinator, cluster.num_processes, cluster.process_id
            )
        else:
            jax.distributed.initialize()

    def any_process(self, flag: bool) -> bool:
        import jax

        if jax.process_count() == 1:
            return flag
        from jax.experimental import multihost_utils

        from seqc.backends.jax.mesh import CollectiveFailed

        try:
            return bool(np.max(multihost_utils.process_allgather(np.int32(flag))))
        except Exception as e:  # jax raises a ValueError here for a lost peer
            raise CollectiveFailed(str(e)) from e

    def barrier(self, name: str) -> None:
        from seqc.backends.jax.mesh import barrier

        barrier(name)

    def collective_failure(self, error: BaseException) -> bool:
        import jax

        from seqc.backends.jax.mesh import CollectiveFailed

        failed = (CollectiveFailed, jax.errors.JaxRuntimeError)
        return jax.process_count() > 1 and isinstance(error, failed)

    def checkpoints(self, directory: Path, keep: int = 3) -> CheckpointStore:
        from seqc.backends.jax.checkpoint import Checkpoints

        return Checkpoints(directory, keep)

    def wrote(self, directory: Path) -> bool:
        return directory.is_dir() and any(
            p.is_dir() and p.name.isdigit() for p in directory.iterdir()
        )

    def steps(self, directory: Path) -> list[int]:
        from seqc.backends.jax.checkpoint import steps

        return steps(directory)

    def read_weights(self, directory: Path, step: int | None = None) -> Weights:
        from seqc.backends.jax.checkpoint import read_weights

        return read_weights(directory, step)

    def write_weights(self, weights: Weights, directory: Path) -> None:
        from seqc.backends.jax.checkpoint import write_weights

        write_weights(weights, directory)

    def run(
        self, graph: Graph, params: Mapping[str, np.ndarray], inputs: Mapping[str, np.ndarray]
    ) -> list[np.ndarray]:
        import jax

        from seqc.backends.jax.ops import run_graph

        key = id(graph)
        if key not in self._compiled:
            self._compiled[key] = (graph, jax.jit(lambda p, x: run_graph(graph, p, x)))
        fn = self._compiled[key][1]
        return [np.asarray(v) for v in fn(dict(params), dict(inputs))]

    def profile_op(
        self, graph: Graph, inputs: Mapping[str, np.ndarray], reps: int
    ) -> tuple[float, float]:
        import jax
        import jax.numpy as jnp

        from seqc.backends.jax.ops import Ctx, run_graph
        from seqc.backends.timing import median_seconds

        feeds = {k: jax.device_put(v) for k, v in inputs.items()}
        rng = jax.random.PRNGKey(0)  # training mode: a dropout draws its mask, as in a step
        floats = {k for k, v in inputs.items() if np.issubdtype(v.dtype, np.floating)}

        def forward(x: dict) -> jax.Array:
            return run_graph(graph, {}, x, Ctx(rng=rng, training=True))[0]

        fwd = jax.jit(forward)
        fwd_s = median_seconds(lambda: jax.block_until_ready(fwd(feeds)), reps)
        out_dtype = graph.ops[graph.outputs[0]].type.dtype
        if not floats or not out_dtype.startswith(("float", "bfloat")):
            return fwd_s, 0.0
        wrt = {k: v for k, v in feeds.items() if k in floats}
        rest = {k: v for k, v in feeds.items() if k not in floats}
        out = fwd(feeds)
        # a random cotangent, given as an argument: with ones (the gradient of a sum) XLA
        # simplifies a product's backward to a reduction, and a gradient alone lets it drop
        # the forward; a step computes both, on gradients that are not constants
        cotangent = jax.random.normal(jax.random.PRNGKey(1), out.shape, jnp.float32)

        @jax.jit
        def both(wrt: dict, rest: dict, cot: jax.Array) -> tuple:
            y, vjp = jax.vjp(lambda w: forward({**rest, **w}), wrt)
            return y, vjp(cot.astype(y.dtype))

        both_s = median_seconds(lambda: jax.block_until_ready(both(wrt, rest, cotangent)), reps)
        return fwd_s, max(0.0, both_s - fwd_s)

    def step_functions(
        self, program: StepProgram, params: Mapping[str, np.ndarray]
    ) -> StepFunctions:
        from seqc.backends.jax.step import JaxStepFunctions

        # the same program again (each evaluation during training decodes with new weights):
        # its jitted functions again, so they compile once per shape for the whole run
        known = self._steps.get(id(program))
        if known is not None and known.program is program:
            return known.with_params(dict(params))
        fns = JaxStepFunctions(program, dict(params))
        self._steps[id(program)] = fns
        return fns


BACKEND = JaxBackend()
