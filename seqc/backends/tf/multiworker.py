"""A TF run of several worker processes: `MultiWorkerMirroredStrategy` and the run's collectives.

The strategy must exist before TF computes anything (it configures the runtime's collective
ops and starts this process's gRPC server), which is why the backend creates it when the
process joins the run (`TfBackend.start`), before the data and the model. It reads the cluster
from the run's `Cluster` (what `TF_CONFIG` said), not from the environment again. On machines
without GPUs each worker is one replica on its CPU.

The loop's agreement (`any_process`, at every step) and barriers are one small all-reduce
across the workers, in one `tf.function` traced once: every worker issues collectives in the
same order (training steps, agreements, barriers), as collective ops require.
"""

from __future__ import annotations

import tensorflow as tf

from seqc.backends.api import Cluster
from seqc.spec.errors import DeviceError, UsageError


def join(cluster: Cluster) -> tf.distribute.MultiWorkerMirroredStrategy:
    """This worker's `MultiWorkerMirroredStrategy` over the cluster's workers (waits until
    every worker has joined)."""
    workers = list(cluster.spec.get("worker", []))
    if len(workers) != cluster.num_processes:
        raise UsageError(
            f"a TensorFlow run of {cluster.num_processes} processes needs TF_CONFIG to name "
            f"each of them as a worker (it names {len(workers)})",
            code="no-tf-config",
            expected=f"{cluster.num_processes} workers in TF_CONFIG",
            found=str(len(workers)),
            hint="start the run with seqc launch -n N -- train ..., or set TF_CONFIG on each "
            "process (--coordinator alone serves JAX)",
        )
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec({"worker": workers}),
        task_type="worker",
        task_id=cluster.process_id,
        rpc_layer="grpc",
    )
    try:
        return tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
    except RuntimeError as e:  # the runtime had started: collectives cannot be configured
        raise DeviceError(
            f"process {cluster.process_id} cannot join the TensorFlow workers: {e}",
            code="cannot-distribute",
            hint="join the run before TensorFlow computes anything (seqc train does)",
        ) from None


class Collectives:
    """The run's agreement and barriers as an all-reduce over every worker's replicas."""

    def __init__(self, strategy: tf.distribute.Strategy) -> None:
        self.strategy = strategy
        self._total = tf.function(self._total_impl, autograph=False)

    def _total_impl(self, value: tf.Tensor) -> tf.Tensor:
        def replica(value: tf.Tensor) -> tf.Tensor:
            # an identity on the replica's device: an all-reduce needs a placed input
            return tf.distribute.get_replica_context().all_reduce("sum", tf.identity(value))

        per_replica = self.strategy.run(replica, args=(value,))
        return self.strategy.experimental_local_results(per_replica)[0]

    def total(self, value: float) -> float:
        """`value` summed over every replica of the run (each process's replicas give it)."""
        return float(self._total(tf.constant(value, tf.float32)))

    def any(self, flag: bool) -> bool:
        return self.total(1.0 if flag else 0.0) > 0.0

    def barrier(self, name: str) -> None:
        """Every worker waits here until all have come (`name` is for the reader: the
        collectives' order, not the name, pairs them up)."""
        self.total(0.0)
