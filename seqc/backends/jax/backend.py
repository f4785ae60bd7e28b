"""The JAX backend behind the contract of `seqc.backends.api`.

JAX compiles a whole training step into one XLA program, so it does not run a placement plan
op by op (`places_ops` is False); the run commands refuse such a plan at the spec's placement
line and point at the TF backend. It runs a sharding plan: the one program on a mesh of devices
(`seqc.backends.jax.mesh`). Frameworks load on first use.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from seqc.backends.api import (
    CheckpointStore,
    Cluster,
    Model,
    MultiTaskModel,
    Placement,
    StepFunctions,
    Weights,
)
from seqc.compiler.compile import CompiledTask
from seqc.compiler.config import TrainConfig
from seqc.compiler.graph import Graph
from seqc.compiler.incremental import StepProgram
from seqc.compiler.multitask import MultiTask
from seqc.compiler.sharding import ShardingPlan, check_devices
from seqc.spec.errors import DeviceError, SeqcError


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
        train: TrainConfig,
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
        if sharding is not None and sharding.pipeline is not None:
            from seqc.backends.jax.pipeline import PipelinedModel

            return PipelinedModel(task, train, sharding)
        return JaxModel(task, train, sharding)

    def multitask_model(
        self,
        multi: MultiTask,
        train: TrainConfig,
        weights: Mapping[str, float],
        *,
        jit_compile: bool = False,
    ) -> MultiTaskModel:
        from seqc.backends.jax.multitask import JaxMultiTaskModel

        return JaxMultiTaskModel(multi, train, weights)

    def start(self, cluster: Cluster) -> None:
        """`jax.distributed.initialize` for a run of several processes: with the launcher's or
        the flags' coordinator, else from the cluster's environment (SLURM, Open MPI), as JAX
        detects it. On CPU, collectives across processes go over gloo, which announces the
        connections it makes on the process's stdout ("[Gloo] Rank 0 is connected to 1 peer
        ranks..."), where a command's results go and no log filter looks: a first collective,
        here, makes them with native stdout pointed at stderr (`seqc.cli` keeps that note out
        of the output)."""
        if not cluster.several:
            return
        import jax

        from seqc.backends.jax.mesh import barrier

        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        if cluster.coordinator is not None:
            jax.distributed.initialize(
                cluster.coordinator, cluster.num_processes, cluster.process_id
            )
        else:
            jax.distributed.initialize()
        if jax.default_backend() == "cpu":
            with _native_stdout_to_stderr():
                barrier("seqc-connected")

    def any_process(self, flag: bool) -> bool:
        from seqc.backends.jax.mesh import any_process

        return any_process(flag)

    def barrier(self, name: str) -> None:
        from seqc.backends.jax.mesh import barrier

        barrier(name)

    def lost_server(self, error: BaseException) -> SeqcError | None:
        return None  # no servers: a JAX run's state lives in its own processes

    def collective_failure(self, error: BaseException) -> bool:
        import jax

        from seqc.backends.jax.mesh import lost_peer

        return jax.process_count() > 1 and lost_peer(error)

    def leave(self) -> None:
        """End this process as soon as Python begins to shut down, with the CLI's status for a
        seqc error (2), once Python's streams are flushed. Two waits on the dead process come
        after that point: the interpreter joins orbax's save threads, which may be waiting for
        its part of a checkpoint; then JAX's exit handler (`jax.distributed.shutdown`) waits at
        a barrier for every process (about 100 s, its heartbeat timeout, before it aborts with
        a native stack trace). `threading._register_atexit` runs before both (what
        `concurrent.futures` uses to stop its workers); `atexit` where it is missing."""
        import atexit
        import threading

        register = getattr(threading, "_register_atexit", atexit.register)
        register(_exit_now, 2)

    def checkpoints(self, directory: Path, keep: int) -> CheckpointStore:
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

        from seqc.backends.jax.context import Ctx
        from seqc.backends.jax.ops import run_graph
        from seqc.backends.timing import median_seconds

        feeds = {k: jax.device_put(v) for k, v in inputs.items()}
        rng = jax.random.PRNGKey(0)  # training mode: a dropout draws its mask, as in a step
        floats = {k for k, v in inputs.items() if np.issubdtype(v.dtype, np.floating)}

        def forward(x: dict) -> jax.Array:
            return run_graph(graph, {}, x, Ctx(rng=rng, training=True))[0]

        out_dtype = graph.ops[graph.outputs[0]].type.dtype
        if not floats or not out_dtype.startswith(("float", "bfloat")):
            fwd = jax.jit(forward)
            return median_seconds(lambda: jax.block_until_ready(fwd(feeds)), reps), 0.0
        wrt = {k: v for k, v in feeds.items() if k in floats}
        rest = {k: v for k, v in feeds.items() if k not in floats}

        # Each half timed on its own. The forward runs as a step runs it, under `jax.vjp`,
        # keeping the residuals its backward reads; the backward applies that pullback (a
        # pytree of the residuals) in a program of its own. A difference of two medians (the
        # pair against the forward alone) would be noise, or below zero, for a small op.
        @jax.jit
        def forward_keeping_residuals(wrt: dict, rest: dict) -> tuple:
            return jax.vjp(lambda w: forward({**rest, **w}), wrt)

        fwd_s = median_seconds(
            lambda: jax.block_until_ready(forward_keeping_residuals(wrt, rest)), reps
        )
        y, pullback = forward_keeping_residuals(wrt, rest)
        # a random cotangent, given as an argument: with ones (the gradient of a sum) XLA
        # simplifies a product's backward to a reduction; a step's gradients are not constants
        cot = jax.random.normal(jax.random.PRNGKey(1), y.shape, jnp.float32).astype(y.dtype)
        backward = jax.jit(lambda pull, c: pull(c))
        return fwd_s, median_seconds(lambda: jax.block_until_ready(backward(pullback, cot)), reps)

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


@contextlib.contextmanager
def _native_stdout_to_stderr() -> Iterator[None]:
    """File descriptor 1 on stderr for a while (Python's own prints are flushed before)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _exit_now(status: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(status)


BACKEND = JaxBackend()
