"""The TensorFlow backend behind the contract of `seqc.backends.api`.

TF runs a placement plan: each op of the forward graph is pinned with `tf.device` to the plan's
device (GPUs where the process has enough, else logical CPUs; `seqc.backends.tf.devices`), and
TF moves tensors between them. TensorFlow loads on first use.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from seqc.backends.api import CheckpointStore, Cluster, Model, Placement, StepFunctions, Weights
from seqc.compiler.compile import CompiledTask
from seqc.compiler.graph import Graph
from seqc.compiler.incremental import StepProgram
from seqc.compiler.sharding import ShardingPlan
from seqc.spec.errors import DeviceError


class TfBackend:
    name = "tf"
    title = "TensorFlow"
    places_ops = True
    trains_async = True

    def __init__(self) -> None:
        self._compiled: dict[int, tuple[Graph, Any]] = {}

    def model(
        self,
        task: CompiledTask,
        train: Mapping[str, Any],
        *,
        placement: Placement | None = None,
        sharding: ShardingPlan | None = None,
        jit_compile: bool = False,
    ) -> Model:
        if sharding is not None and not sharding.trivial:
            raise DeviceError(
                "the TensorFlow backend does not run a sharded mesh yet",
                span=sharding.span,
                code="cannot-shard",
                hint="train with --backend jax, or set distribution.mesh = {data: 1}",
            )
        named = None
        if placement:
            from seqc.backends.tf.devices import names

            devices = names(max(placement.values()) + 1)
            named = {op: devices[d] for op, d in placement.items()}
        from seqc.backends.tf.train import TfModel

        return TfModel(
            task, train, seed=int(train["seed"]), jit_compile=jit_compile, placement=named
        )

    def start(self, cluster: Cluster) -> None:
        if cluster.several:
            raise DeviceError(
                "the TensorFlow backend does not run several processes yet",
                code="cannot-distribute",
                hint="train with --backend jax",
            )

    def any_process(self, flag: bool) -> bool:
        return flag

    def barrier(self, name: str) -> None:
        return None

    def checkpoints(self, directory: Path, keep: int = 3) -> CheckpointStore:
        from seqc.backends.tf.checkpoint import TfCheckpoints

        return TfCheckpoints(directory, keep)

    def wrote(self, directory: Path) -> bool:
        """TF writes a `checkpoint` state file and `ckpt-N.index` files."""
        return directory.is_dir() and (
            (directory / "checkpoint").is_file() or any(directory.glob("*.index"))
        )

    def read_weights(self, directory: Path, step: int | None = None) -> Weights:
        from seqc.backends.tf.checkpoint import read_weights

        return read_weights(directory, step)

    def write_weights(self, weights: Weights, directory: Path) -> None:
        from seqc.backends.tf.checkpoint import write_weights

        write_weights(weights, directory)

    def run(
        self, graph: Graph, params: Mapping[str, np.ndarray], inputs: Mapping[str, np.ndarray]
    ) -> list[np.ndarray]:
        import tensorflow as tf

        from seqc.backends.tf.ops import run_graph

        key = id(graph)
        if key not in self._compiled:
            fn = tf.function(lambda p, x: run_graph(graph, p, x), reduce_retracing=True)
            self._compiled[key] = (graph, fn)
        fn = self._compiled[key][1]
        feeds = {k: tf.convert_to_tensor(v) for k, v in inputs.items()}
        weights = {k: tf.convert_to_tensor(v) for k, v in params.items()}
        return [np.asarray(v) for v in fn(weights, feeds)]

    def step_functions(
        self, program: StepProgram, params: Mapping[str, np.ndarray]
    ) -> StepFunctions:
        from seqc.backends.tf.step import TfStepFunctions

        return TfStepFunctions(program, dict(params))


BACKEND = TfBackend()
