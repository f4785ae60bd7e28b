"""Which process of a run this is: from `seqc train`'s flags, from `seqc launch`, or from the
cluster's own environment.

In order: the flags (`--coordinator HOST:PORT --num-processes N --process-id I`); the variables
`seqc launch` sets (`SEQC_COORDINATOR`, `SEQC_NUM_PROCESSES`, `SEQC_PROCESS_ID`); `TF_CONFIG`
(what Kubernetes' training operators set: the cluster by role, and this task's role and index);
SLURM's and Open MPI's task counts (JAX reads the rest of those itself). Nothing set: one
process.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from seqc.backends.api import Cluster
from seqc.spec.errors import UsageError

ENV = ("SEQC_COORDINATOR", "SEQC_NUM_PROCESSES", "SEQC_PROCESS_ID")


def _int(value: str, what: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise UsageError(
            f"{what} must be a whole number", code="bad-cluster", found=value
        ) from None


def cluster_from(
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    env: Mapping[str, str] | None = None,
) -> Cluster:
    env = os.environ if env is None else env
    if num_processes is None and "SEQC_NUM_PROCESSES" in env:
        num_processes = _int(env["SEQC_NUM_PROCESSES"], "SEQC_NUM_PROCESSES")
        process_id = _int(env.get("SEQC_PROCESS_ID", "0"), "SEQC_PROCESS_ID")
        coordinator = coordinator or env.get("SEQC_COORDINATOR")
    tf_config = env.get("TF_CONFIG")
    role, spec = "worker", {}
    if tf_config:
        try:
            parsed = json.loads(tf_config)
            spec = {k: list(v) for k, v in parsed["cluster"].items()}
            role, index = str(parsed["task"]["type"]), int(parsed["task"]["index"])
        except (ValueError, KeyError, TypeError) as e:
            raise UsageError(
                f"TF_CONFIG is not a cluster description ({type(e).__name__})",
                code="bad-cluster",
                hint='expected {"cluster": {"worker": [...], ...}, "task": {"type": ..., '
                '"index": ...}}',
            ) from None
        if num_processes is None:
            order = [r for r in ("chief", "worker", "ps") if r in spec]
            num_processes = sum(len(spec[r]) for r in order)
            process_id = sum(len(spec[r]) for r in order[: order.index(role)]) + index
    if num_processes is None:
        for name in ("SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"):
            if _int(env.get(name, "1"), name) > 1:
                rank = env.get("SLURM_PROCID", env.get("OMPI_COMM_WORLD_RANK", "0"))
                num_processes, process_id = _int(env[name], name), _int(rank, "rank")
                break
    n, i = num_processes or 1, process_id or 0
    if n < 1 or not 0 <= i < n:
        raise UsageError(
            f"process {i} of {n} does not exist",
            code="bad-cluster",
            expected=f"a process id in 0..{n - 1}",
            found=str(i),
        )
    if n > 1 and coordinator is not None and ":" not in coordinator:
        raise UsageError("--coordinator is HOST:PORT", code="bad-cluster", found=coordinator)
    return Cluster(process_id=i, num_processes=n, coordinator=coordinator, role=role, spec=spec)
