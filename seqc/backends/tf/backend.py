"""The TensorFlow backend behind the contract of `seqc.backends.api`.

TF runs a placement plan: each op of the forward graph is pinned with `tf.device` to the plan's
device (GPUs where the process has enough, else logical CPUs; `seqc.backends.tf.devices`), and
TF moves tensors between them. A data-parallel mesh trains on a mirrored strategy, in one
process or across worker processes (`seqc.backends.tf.mirrored`). TensorFlow loads on first use.
"""

from __future__ import annotations

from collections.abc import Mapping
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
from seqc.compiler.sharding import ShardingPlan
from seqc.spec.errors import DeviceError, SeqcError


class TfBackend:
    name = "tf"
    title = "TensorFlow"
    places_ops = True
    trains_async = True

    def __init__(self) -> None:
        self._compiled: dict[int, tuple[Graph, Any]] = {}
        self._ps: Any = None
        """The chief's link to the parameter servers of an asynchronous run (`ps.Link`)."""
        self._workers: Any = None
        """This worker's `MultiWorkerMirroredStrategy` in a synchronous run of several
        processes (`multiworker.join`), and its collectives (`multiworker.Collectives`)."""
        self._collectives: Any = None
        self._cluster = Cluster()

    def multitask_model(
        self,
        multi: MultiTask,
        train: TrainConfig,
        weights: Mapping[str, float],
        *,
        jit_compile: bool = False,
    ) -> MultiTaskModel:
        from seqc.backends.tf.multitask import TfMultiTaskModel

        return TfMultiTaskModel(multi, train, weights, train.seed, jit_compile=jit_compile)

    def model(
        self,
        task: CompiledTask,
        train: TrainConfig,
        *,
        placement: Placement | None = None,
        sharding: ShardingPlan | None = None,
        jit_compile: bool = False,
    ) -> Model:
        if sharding is not None and sharding.pipeline is not None:
            raise DeviceError(
                "pipeline parallelism is implemented on the JAX backend; on TF, spreading a "
                "model over devices is placement",
                span=sharding.pipeline.span,
                code="pipeline-backend",
                hint="train with --backend jax, or on TF use distribution.placement (m_etf, "
                "m_sct, manual) with distribution.devices",
            )
        mesh = sharding is not None and not sharding.trivial
        if self._ps is None and (self._workers is not None or mesh):
            from seqc.backends.tf.mirrored import mirrored_model  # synchronous data parallel

            processes = self._cluster.num_processes
            return mirrored_model(
                task, train, sharding, self._workers, processes=processes, jit_compile=jit_compile
            )
        if sharding is not None and not sharding.trivial:
            raise DeviceError(
                "the TensorFlow backend does not run a sharded mesh yet",
                span=sharding.span,
                code="cannot-shard",
                hint="train with --backend jax, or set distribution.mesh = {data: 1}",
            )
        if self._ps is not None:
            from seqc.backends.tf.ps_model import ps_model

            return ps_model(task, train, self._ps, placed=bool(placement), jit_compile=jit_compile)
        named = None
        if placement:
            from seqc.backends.tf.devices import names

            devices = names(max(placement.values()) + 1)
            named = {op: devices[d] for op, d in placement.items()}
        from seqc.backends.tf.train import TfModel

        return TfModel(task, train, seed=train.seed, jit_compile=jit_compile, placement=named)

    def start(self, cluster: Cluster) -> None:
        if "ps" in cluster.spec:  # asynchronous: servers serve here for good, the chief connects
            from seqc.backends.tf.ps import start

            self._ps = start(cluster)
            return
        self._cluster = cluster
        if cluster.several:  # synchronous: every process a worker of one mirrored model
            from seqc.backends.tf.multiworker import Collectives, join

            self._workers = join(cluster)
            self._collectives = Collectives(self._workers)

    def any_process(self, flag: bool) -> bool:
        return flag if self._collectives is None else self._collectives.any(flag)

    def barrier(self, name: str) -> None:
        if self._collectives is not None:
            self._collectives.barrier(name)

    def lost_server(self, error: BaseException) -> SeqcError | None:
        if self._ps is None:
            return None
        from seqc.backends.tf.ps import lost

        return lost(error)

    def collective_failure(self, error: BaseException) -> bool:
        import tensorflow as tf

        lost = (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError)
        return isinstance(error, (*lost, tf.errors.DeadlineExceededError))

    def leave(self) -> None:
        """Nothing is skipped: TF registers no exit step that waits for the other processes
        (JAX's does; `seqc.backends.jax.backend`)."""

    def checkpoints(self, directory: Path, keep: int) -> CheckpointStore:
        if self._ps is not None:
            from seqc.backends.tf.ps_model import PsCheckpoints

            return PsCheckpoints(directory, keep, self._ps)
        from seqc.backends.tf.checkpoint import TfCheckpoints

        # In a multi-worker run every worker saves; the primary alone into `directory`.
        return TfCheckpoints(directory, keep, writer=self._cluster.primary)

    def wrote(self, directory: Path) -> bool:
        """TF writes a `checkpoint` state file and `ckpt-N.index` files."""
        return directory.is_dir() and (
            (directory / "checkpoint").is_file() or any(directory.glob("*.index"))
        )

    def steps(self, directory: Path) -> list[int]:
        from seqc.backends.tf.checkpoint import steps

        return steps(directory)

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
            fn = tf.function(
                lambda p, x: run_graph(graph, p, x), autograph=False, reduce_retracing=True
            )
            self._compiled[key] = (graph, fn)
        fn = self._compiled[key][1]
        feeds = {k: tf.convert_to_tensor(v) for k, v in inputs.items()}
        weights = {k: tf.convert_to_tensor(v) for k, v in params.items()}
        return [np.asarray(v) for v in fn(weights, feeds)]

    def profile_op(
        self, graph: Graph, inputs: Mapping[str, np.ndarray], reps: int
    ) -> tuple[float, float]:
        import tensorflow as tf

        from seqc.backends.tf.context import Ctx
        from seqc.backends.tf.ops import run_graph
        from seqc.backends.timing import fastest_pair, median_seconds

        feeds = {k: tf.convert_to_tensor(v) for k, v in inputs.items()}
        floats = [k for k, v in inputs.items() if np.issubdtype(v.dtype, np.floating)]
        seed = tf.constant([0, 1], tf.int64)  # training mode: a dropout draws its mask

        def run(x: dict) -> tf.Tensor:
            return run_graph(graph, {}, x, Ctx(rng=seed, training=True))[0]

        fwd = tf.function(run, autograph=False, jit_compile=True)
        fwd_s = median_seconds(lambda: fwd(feeds).numpy(), reps)
        out_dtype = graph.ops[graph.outputs[0]].type.dtype
        if not floats or not out_dtype.startswith(("float", "bfloat")):
            return fwd_s, 0.0

        # a random cotangent, given as an argument, and the output returned beside the
        # gradients: with ones (the gradient of a sum) XLA simplifies a product's backward to
        # a reduction, and gradients alone let it drop the forward; a step computes both
        out = fwd(feeds)
        cotangent = tf.random.stateless_normal(out.shape, seed=[1, 2], dtype=out.dtype)

        @tf.function(autograph=False, jit_compile=True)
        def both(x: dict, cot: tf.Tensor) -> list:
            with tf.GradientTape() as tape:
                watched = [x[k] for k in floats]
                tape.watch(watched)
                y = run(x)
            return [y, *tape.gradient(y, watched, output_gradients=cot)]

        # the backward is what the pair costs beyond the forward (TensorFlow has no pullback
        # to time by itself): both timed in alternation, the fastest of each
        fwd_best, both_best = fastest_pair(
            lambda: fwd(feeds).numpy(), lambda: _fetched(both(feeds, cotangent)), reps
        )
        return fwd_s, max(0.0, both_best - fwd_best)

    def step_functions(
        self, program: StepProgram, params: Mapping[str, np.ndarray]
    ) -> StepFunctions:
        from seqc.backends.tf.step import TfStepFunctions

        return TfStepFunctions(program, dict(params))


BACKEND = TfBackend()


def _fetched(values: list[Any]) -> list[np.ndarray]:
    """Every value on the host, so a timer waits for all of them. A gather's gradient with
    respect to its table is `tf.IndexedSlices` (the rows it read and their values), which has no
    `.numpy()`: its parts are fetched as they are, not scattered into a dense table that a
    training step never builds either."""
    import tensorflow as tf

    fetched = []
    for value in values:
        if isinstance(value, tf.IndexedSlices):
            fetched += [value.values.numpy(), value.indices.numpy()]
        elif value is not None:
            fetched.append(value.numpy())
    return fetched
