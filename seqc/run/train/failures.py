"""How a training run fails when it must: a loss that is no longer finite, a checkpoint its
device has no room for, a collective whose peer process is gone. Each error says what is intact
and what to do next, so a user never loses the steps a checkpoint holds.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from seqc.backends.api import Backend, Cluster, NoSpace
from seqc.resolve.experiment import ResolvedExperiment
from seqc.spec.errors import DeviceError, FileError, SeqcError


class LossNotFinite(SeqcError):
    """The training loss became NaN or infinite."""

    phase = "train"


class CheckpointNoSpace(FileError):
    """A checkpoint its device had no room for: the run stopped there, the checkpoints before
    it intact (`last`, the newest; None when there is none)."""

    device: Path | None = None
    last: int | None = None


def loss_not_finite(
    step: int,
    loss: float,
    task: str,
    *,
    last: int | None,
    run: Path,
    checkpoints: Path,
    resolved: ResolvedExperiment,
    several: bool,
) -> LossNotFinite:
    """The run's error for a loss that stopped being finite at `step`: where the last good
    checkpoint is (`last`), and how to go on from it."""
    where = (
        f"the last good checkpoint is step {last} in {checkpoints}"
        if last is not None
        else "no checkpoint was written before it"
    )
    of = f" of task `{task}`" if several else ""
    fix = "lower the learning rate, set train.clip_norm, or check the data"
    if last is None:
        then = (
            "then train again: no checkpoint was written, so there is nothing to resume and "
            "the same --run-dir starts anew"
        )
    else:  # a resume must keep the optimizer's settings, and would meet the same batches
        source = json.dumps(str(run))
        then = (
            "then start a new run (another --run-dir), from scratch or from the last good "
            f"weights: --set 'train.init_from=checkpoint({source}, step = {last})' (a "
            "resume keeps the settings that diverged)"
        )
    return LossNotFinite(
        f"the training loss{of} became {loss} at step {step}; {where}",
        span=resolved.span("train.optimizer") or resolved.span("train"),
        path=str(run),
        code="loss-not-finite",
        hint=f"{fix}; {then}",
    )


def checkpoint_no_space(e: NoSpace, last: int | None) -> CheckpointNoSpace:
    """The run's error for a checkpoint its device had no room for: what is intact, and
    what to do, given the newest checkpoint `last` (`seqc.cli.train` adds the command that
    continues the run)."""
    room = f"{size_text(e.free)} free" + (
        f", about {size_text(e.needed)} needed" if e.needed else ""
    )
    if last is None:
        intact = "no checkpoint was written before it"
    elif last == e.step:
        intact = f"checkpoint {last} was written, without its checksums (it reads as it is)"
    else:
        intact = f"checkpoint {last} is intact"
    error = CheckpointNoSpace(
        f"no space left on {e.device} writing checkpoint {e.step} ({room}); {intact}",
        path=str(e.directory),
        code="no-space",
        hint=f"free space on {e.device}, then "
        + ("continue the run with --resume" if last is not None else "train again"),
    )
    error.device, error.last = e.device, last
    return error


def collective(engine: Backend, cluster: Cluster, fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)`, with a collective that failed in a run of several processes (another one
    died: the launcher or the cluster names which) said as such, with what to do; a lost
    parameter server said as that."""
    try:
        return fn(*args)
    except Exception as e:
        server = engine.lost_server(e) if cluster.several else None
        if server is not None:  # the state's server, not a peer: say which, not "a collective"
            raise server from None
        if not cluster.several or not engine.collective_failure(e):
            raise
        lines = [x.strip() for x in str(e).splitlines() if x.strip()] or [type(e).__name__]
        cause = lines[0] if not lines[0].endswith(":") else lines[-1]  # TF: "...error:" first
        engine.leave()  # its exit must not wait for the process that is gone
        raise DeviceError(
            f"process {cluster.process_id}: a collective with the run's other processes failed "
            f"({cause[:300]})",
            code="process-lost",
            hint="another process stopped or is unreachable; once the cause is fixed, resume "
            "the whole group from the last checkpoint with --resume",
        ) from None


def size_text(n: float) -> str:
    """Bytes for a message: `4.5 MiB`."""
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
