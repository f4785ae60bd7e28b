"""The processes of an asynchronous TF run: parameter servers and workers serve, the chief drives.

`distribution { sync = "async" }` with a cluster whose `TF_CONFIG` names parameter servers
(`seqc launch -n N --ps K`, or a cluster's own environment) runs TF's `ParameterServerStrategy`:

- a parameter server (`ps`) holds the variables, a worker computes steps; both are plain
  `tf.distribute.Server`s that run whatever the chief sends them, so they run no seqc code
  after `serve` (no data, no model) and serve until the run ends: a SIGTERM or SIGINT stops
  one with code 0 once the chief is gone (the chief's last checkpoint reads their variables);
- the chief connects to them (`connect`) and keeps the strategy and its `ClusterCoordinator`
  on the backend: the model (`seqc.backends.tf.ps_model`) creates its variables under the
  strategy's scope, so they live on the servers, and schedules each training step on a free
  worker.

Variables larger than `MIN_SHARD_BYTES` are split along their first axis over the servers
(`MinSizePartitioner`); the model reads them whole and assigns whole updates, which a
`ShardedVariable` slices, and checkpoints save each shard as a slice of the whole variable, so
a checkpoint reads back whole (`seqc eval`, `seqc convert`, `read_weights`).

A parameter server that fails ends the run: the variables it held are gone. `lost` turns TF's
report of that into an error that says so; a worker that fails is TF's to survive (the
coordinator runs its steps on the others).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NoReturn

from seqc.backends.api import Cluster
from seqc.spec.errors import DeviceError, UsageError

MIN_SHARD_BYTES = 256 << 10
"""A variable is split over the parameter servers in shards of at least this size: smaller
ones stay whole (one server each, round-robin), where a split would cost more RPCs than it
spreads load."""

STOP_WAIT_S = 120.0
"""How long a server asked to stop waits for the chief to finish its last checkpoint."""

_PS_TASK = re.compile(r"/job:ps/replica:\d+/task:(\d+)")


def serve(cluster: Cluster) -> NoReturn:
    """Serve as this process's `ps` or `worker` task until stopped: TF runs the chief's ops
    here. SIGTERM or SIGINT stops it with code 0 once the chief is gone (see `_until_stopped`)."""
    import tensorflow as tf

    asked: list[float] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: asked.append(time.monotonic()))
    signal.signal(signal.SIGINT, lambda signum, frame: asked.append(time.monotonic()))
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=resolver.task_type,
        task_index=resolver.task_id,
        protocol=resolver.rpc_layer or "grpc",
        start=True,
    )
    address = cluster.spec[cluster.role][resolver.task_id]
    print(f"{cluster.role} {resolver.task_id}: serving at {address}", file=sys.stderr, flush=True)
    chief = (cluster.spec.get("chief") or [None])[0]
    _until_stopped(asked, chief)
    del server
    os._exit(0)  # no interpreter teardown: TF's server threads would hold it up


def _until_stopped(asked: list[float], chief: str | None) -> None:
    """Return once a signal asked this server to stop and the chief is gone (or `STOP_WAIT_S`
    after the signal). A signal that stops the whole group (Ctrl-C, a preempted machine)
    reaches the chief and the servers at once, and the chief's last checkpoint reads the
    variables on the servers: they must outlive it. The launcher's signal after the chief's
    exit, or a cluster's, then stops them at once. Sleeping in Python (not `server.join()`)
    lets the signal handlers run."""
    while not asked or (time.monotonic() - asked[0] < STOP_WAIT_S and _listening(chief)):
        time.sleep(0.2)


def _listening(address: str | None) -> bool:
    """Whether a process still listens at `host:port` (the chief's gRPC server, while it lives)."""
    if address is None:
        return False
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=1.0):
            return True
    except (OSError, ValueError):
        return False


@dataclass
class Link:
    """The chief's hold on the servers: the strategy, its coordinator, and how many of each.

    `restores` counts checkpoint restores, so a model knows its variables were overwritten
    behind its back (its step counter and its local copy of the params are stale)."""

    strategy: Any
    coordinator: Any
    workers: int
    servers: int
    restores: int = 0

    def join(self) -> None:
        """Wait for every scheduled step (the variables are then a step boundary)."""
        with translated():
            self.coordinator.join()


def connect(cluster: Cluster) -> Link:
    """Connect the chief to the cluster `TF_CONFIG` describes (waits for its servers)."""
    workers, servers = len(cluster.spec.get("worker", [])), len(cluster.spec.get("ps", []))
    if workers < 1 or servers < 1 or cluster.role != "chief":
        raise UsageError(
            f"an asynchronous TF run needs a chief, workers and parameter servers; this "
            f"cluster has {workers} worker(s) and {servers} server(s), and this process is a "
            f"`{cluster.role}`",
            code="bad-cluster",
            hint="start it with seqc launch -n 2 --ps 1 -- train ..., or give TF_CONFIG a "
            "chief, one or more workers and one or more ps",
        )
    import tensorflow as tf

    partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=MIN_SHARD_BYTES, max_shards=servers
    )
    strategy = tf.distribute.ParameterServerStrategy(
        tf.distribute.cluster_resolver.TFConfigClusterResolver(), variable_partitioner=partitioner
    )
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    return Link(strategy, coordinator, workers, servers)


def start(cluster: Cluster) -> Link:
    """This process's part in an asynchronous run: a server serves here until the run ends
    (never returns); the chief gets its `Link`."""
    if cluster.role in ("ps", "worker"):
        serve(cluster)
    return connect(cluster)


def lost(error: BaseException) -> DeviceError | None:
    """The error to show for TF's report that a parameter server failed, or None when `error`
    is something else (a worker's failure is retried by the coordinator and never gets
    here; a bug in a step is TF's own error)."""
    import tensorflow as tf

    if not isinstance(error, tf.errors.OpError):
        return None
    found = _PS_TASK.search(str(error))
    # a server killed mid-call reaches the chief as any of these, depending on where the call
    # was when its connection broke
    broken = (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError)
    unreachable = isinstance(error, (*broken, tf.errors.DeadlineExceededError))
    task = found.group(1) if found is not None else None
    if task is None and unreachable:  # a dropped connection that names no task: which is gone?
        task = _silent_server()
    if task is None or not (unreachable or "PS" in type(error).__name__):
        return None
    return DeviceError(
        f"parameter server {task} of the run was lost ({_reason(error)}); the "
        "variables it held are gone, so asynchronous training stops here",
        code="parameter-server-lost",
        hint="once the server is back, start the whole group again with --resume: it goes on "
        "from the last checkpoint",
    )


def _silent_server(timeout_s: float = 1.0) -> str | None:
    """The index of the first parameter server of `TF_CONFIG` that refuses a connection, or
    None. Why: when a server dies while the chief is mid-call, TF may report only the broken
    connection ("Connection reset by peer"), with no task name; a worker's failure never gets
    here (the coordinator retries it), so the server that no longer answers is the one lost."""
    try:
        servers = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {}).get("ps", [])
    except (json.JSONDecodeError, AttributeError):
        return None
    for i, address in enumerate(servers):
        host, _, port = str(address).rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=timeout_s):
                pass
        except (OSError, ValueError):
            return str(i)
    return None


def _reason(error: BaseException) -> str:
    """The line of TF's report that says what happened (it leads with "Graph execution
    error:" and node names)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    said = next((line for line in lines if "UNAVAILABLE" in line.upper()), None)
    said = said or (lines[0] if lines else type(error).__name__)
    return re.sub(r"^\(\d+\)\s*", "", said)[:300]


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Within it, TF's report of a lost parameter server becomes `lost`'s error, and a
    worker's failure to read the training records `records.unreadable`'s."""
    try:
        yield
    except Exception as e:
        from seqc.backends.tf.records import unreadable

        clear = lost(e) or unreadable(e)
        if clear is None:
            raise
        raise clear from None
