"""`seqc check`: every declaration of a program, used or not, and every experiment.

Checking unused declarations too is deliberate: a layer nobody instantiates yet is still a
layer someone will, and its error belongs to the line that wrote it, today.

An experiment is checked for what a training run would refuse on the spec alone
(`seqc.compiler.run_checks`: the mix, the mesh against the devices listed, what is not
implemented yet), by the same functions `seqc train` calls; the language server runs this same
function, so the editor shows those errors too. What needs the model lowered (the shares'
shapes, the sharding plan and its memory per device) is checked where the model lowers without
data and the run would compute it, and where it can refuse something (`_check_sharding`). Other
experiments are not lowered, so a program of many experiments stays as quick to check as it is
to resolve.
"""

from __future__ import annotations

import math

from seqc.compiler.origins import where
from seqc.compiler.run_checks import check_run
from seqc.compiler.sharding import mesh_of
from seqc.resolve.experiment import ResolvedExperiment, Resolver, resolve
from seqc.resolve.layers.check import check_layers
from seqc.resolve.program import Program
from seqc.spec.parser import gc_paused


def check_program(
    program: Program, experiment: str | None = None, overrides: list[str] | None = None
) -> list[ResolvedExperiment]:
    """Check all layers, inputs and tasks, and resolve one experiment (or all of them).

    The garbage collector is paused, as for a parse: what is built here stays alive until the
    check ends, and the collector's passes over a large program's IR cost a quarter of it.
    """
    with gc_paused():
        check_layers(program)
        resolver = Resolver(program)
        for name in program.inputs:
            resolver.resolve_input(None, name, [])
        for name in program.tasks:
            resolver.resolve_task(name, [])
        names = [experiment] if experiment is not None else list(program.experiments)
        resolved = [resolve(program, n, overrides) for n in names]
        for r in resolved:
            check_run(r)
            _check_shares(program, r)
            _check_sharding(program, r)
        if experiment is None:
            from seqc.resolve.sweep import resolve_sweep

            for name in program.sweeps:
                resolve_sweep(program, name)
        return resolved


def _check_shares(program: Program, resolved: ResolvedExperiment) -> None:
    """A share's uses hold the same weights: known only once the tasks' models are lowered
    (`seqc.compiler.multitask`), which `check` does for an experiment with shares when every
    size is in the spec (a size that waits on the data is checked when a run reads it)."""
    if not resolved.config.get("share"):
        return
    from seqc.compiler.compile import data_symbols
    from seqc.compiler.multitask import compile_tasks

    if not any(data_symbols(resolved, t) for t in resolved.tasks):
        compile_tasks(program, resolved)


def _check_sharding(program: Program, resolved: ResolvedExperiment) -> None:
    """What a run over a mesh of several devices checks first: each batch's rows split over
    the data axes (the buckets' sizes, when the spec gives them), and the sharding plan
    (`seqc.compiler.sharding`: the rules, the splits, the memory per device), when the spec
    states every size. Only for a one-task experiment: a multi-task model on a mesh is refused
    before, by `check_run`.

    The plan needs the model lowered, and a fresh process pays more for importing the lowering
    (numpy with it: about 0.1 s) than for lowering a model (milliseconds), so it is computed
    only where it can refuse something: a mesh that splits params (an `fsdp` or `model` axis),
    rules of `distribution.shard`, or devices whose memory the plan must fit. A mesh of `data`
    alone copies every param whole, which no plan refuses.
    """
    mesh = mesh_of(resolved)
    if len(resolved.tasks) != 1 or math.prod(mesh.values()) == 1:
        return
    from seqc.compiler.sharding import ShardingPlan, check_batches, device_memory

    task = resolved.tasks[0]
    splits = any(mesh.get(axis, 1) > 1 for axis in ("fsdp", "expert", "model", "stage"))
    rules = resolved.config["distribution"].get("shard")
    if splits or rules or device_memory(resolved) is not None:
        from seqc.compiler.compile import compile_task, data_symbols
        from seqc.compiler.pipeline.plan import pipeline_for, wants_pipeline
        from seqc.compiler.sharding import plan_sharding

        if not data_symbols(resolved, task):
            compiled = compile_task(program, resolved, task)
            plan = plan_sharding(compiled.graph, resolved, task)
            if wants_pipeline(resolved):
                pipeline_for(compiled, resolved, task, plan.mesh)
    buckets = resolved.config[task]["input"].get("buckets")
    if buckets:  # else the pipeline's default batch size: the run checks it
        at = where(resolved, f"{task}.input.buckets", f"{task}.input")
        check_batches(ShardingPlan(mesh), buckets.values(), at)
