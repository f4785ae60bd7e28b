"""What a training run writes about itself besides checkpoints: the record of `run.json`, and
the minutes a resumed run had already trained (so its dev curve goes on where it stopped).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from seqc.backends.api import Model, MultiTaskModel
from seqc.compiler.placement.plan import Placement
from seqc.compiler.sharding import ShardingPlan
from seqc.run.session import MultiTaskSession, Session
from seqc.run.train.stepper import MultiTaskSteps, TaskSteps


def run_info(
    session: Session | MultiTaskSession,
    steps: TaskSteps | MultiTaskSteps,
    model: Model | MultiTaskModel,
    backend: str,
    seed: int,
    placement: Placement | None,
    sharding: ShardingPlan | None,
    processes: int,
) -> dict[str, Any]:
    """What `run.json` records of a new run: the experiment and its task(s), the backend,
    seeds, data, params, and where it runs (placement, mesh, processes, strategy)."""
    units = steps.units
    first = next(iter(units.values())).session
    info: dict[str, Any] = {
        "experiment": session.resolved.name,
        "task": first.task,
        "backend": backend,
        "seed": seed,
        "data_seed": first.pipeline.seed,
        "params": sum(p.size for p in model_params(session).values()),
        "data": first.pipeline.summary(),
        "placement": None
        if placement is None
        else {"algorithm": placement.plan.algorithm, "devices": placement.used},
        "mesh": None if sharding is None else dict(sharding.mesh),
        "topology": {
            "backend": backend,
            "processes": processes,
            "mesh": None if sharding is None else dict(sharding.mesh),
            "strategy": model.strategy,
            "rows": _local_rows(first, next(iter(units.values())).model),
        },
    }
    if sharding is not None and sharding.pipeline is not None:
        plan = sharding.pipeline
        info["pipeline"] = {
            "schedule": plan.schedule,
            "microbatches": plan.microbatches,
            "stages": [list(s.units) for s in plan.stages],
            "bubble": plan.bubble,
        }
    if isinstance(steps, MultiTaskSteps):
        mix = steps.mix
        info["task"] = None
        info["tasks"] = {
            t: {
                "input": u.session.pipeline.name,
                "data_seed": u.session.pipeline.seed,
                "data": u.session.pipeline.summary(),
                "params": sum(p.size for p in u.session.graph.params.values()),
                "weight": mix.weights[t],
                "lr_scale": mix.lr_scale[t],
            }
            for t, u in units.items()
        }
        info["mix"] = {"by": mix.by, "weights": mix.weights, "lr_scale": mix.lr_scale}
        info["shared"] = {
            name: users for name, users in session.multi.owners().items() if len(users) > 1
        }
    return info


def model_params(session: Session | MultiTaskSession) -> dict[str, Any]:
    """The model's params by name (every task's, a shared one once)."""
    if isinstance(session, MultiTaskSession):
        return session.multi.params
    return dict(session.graph.params)


def minutes_before(metrics: Path, step: int) -> float:
    """The training minutes the run had logged by `step` (its checkpoint's record, else its
    last dev record up to there), so that a resumed run's dev curve goes on from where it
    stopped rather than from zero, counting the minutes up to the checkpoint it resumes from."""
    minutes = 0.0
    if not metrics.exists():
        return minutes
    for line in metrics.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("split") in ("dev", "checkpoint") and int(record.get("step", 0)) <= step:
            minutes = max(minutes, float(record.get("minutes", 0.0)))
    return minutes


def loader_state_at(metrics: Path, step: int) -> dict[str, dict[str, Any]] | None:
    """The data loaders' state recorded with the checkpoint of `step` (each task's Grain
    iterator state), or None for a run whose checkpoints did not record one."""
    if not metrics.exists():
        return None
    found = None
    for line in metrics.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("split") == "checkpoint" and record.get("step") == step:
            loader = record.get("loader")
            found = loader if isinstance(loader, dict) else found
    return found


def _local_rows(session: Session, model: Model) -> dict[str, int] | None:
    """The rows [lo, hi) of the first training bucket's batches that the process writing the
    record reads (`Model.local_rows`); None where it reads them all."""
    rows = session.pipeline.buckets[0].batch_size
    local = model.local_rows(rows)
    return None if local is None else {"lo": local[0], "hi": local[1], "of": rows}
