"""`seqc place` as a library: place one training step of an experiment's model on its devices.

Placement runs at compile time on numbers the spec states (`distribution.devices`), so it needs
no device and, when the vocabulary size is written in the spec, no data: the experiment is
resolved without data first and read only when a model param waits on the data (a character
tokenizer's vocabulary). The plan comes from `seqc.compiler.placement.plan`, as `seqc train`'s.

A multi-task experiment is placed whole: one training step of every task, the shared layers'
params held once (`place_multitask`); `--task` places one task's graph, with the multi-task names.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from seqc.run.report import PlainReporter, Reporter

if TYPE_CHECKING:
    from seqc.compiler.graph import Graph
    from seqc.compiler.placement.plan import Placement
    from seqc.resolve.experiment import ResolvedExperiment


GANTT_FORMATS = (".png", ".svg", ".pdf")
"""What `--gantt` draws: matplotlib picks the format by the suffix."""


def place_experiment(
    spec: Path,
    experiment: str,
    algorithm: str | None = None,
    json_file: Path | None = None,
    gantt_file: Path | None = None,
    overrides: list[str] | None = None,
    cache_dir: Path | None = None,
    fuse: bool = True,
    keep_activations: bool = False,
    task: str | None = None,
    profile: Path | None = None,
    reporter: Reporter | None = None,
) -> None:
    """Place a training step on the experiment's devices with a Baechi placer; reports memory
    and busy time per device and the step time against its lower bound. `json_file`: the plan
    as JSON; `gantt_file`: its Gantt chart; `profile`: op times `seqc profile` measured, in
    place of the estimates."""
    from seqc.compiler.placement.plan import place, place_multitask
    from seqc.compiler.placement.report import gantt, plan_json, summary, tasks_summary
    from seqc.data.targets import output_file
    from seqc.resolve.experiment import resolve
    from seqc.resolve.program import load_program
    from seqc.run.session import compile_experiment, compile_multitask, several_tasks

    reporter = reporter or PlainReporter()
    set_ = overrides or []
    # the files this command writes, checked before it plans: not after the work is done
    if json_file is not None:
        output_file(json_file, "--json")
    if gantt_file is not None:
        output_file(gantt_file, "--gantt", GANTT_FORMATS)
    multi = None
    joint = task is None and several_tasks(resolve(load_program(spec), experiment, set_))
    if joint and profile is not None:
        from seqc.spec.errors import UsageError

        raise UsageError(
            "--profile places one task's graph: add --task T (and profile that task)",
            code="bad-flags",
        )
    measured = None
    if joint:
        resolved, multi = compile_multitask(spec, experiment, set_, cache_dir)
        placed = place_multitask(
            multi, resolved, algorithm, fuse=fuse, keep_activations=keep_activations
        )
        n_ops = sum(len(t.graph.ops) for t in multi.tasks.values())
        what = f"{n_ops} ops of {len(multi.tasks)} tasks ({', '.join(multi.tasks)})"
        dims = ", ".join(f"{seg.task} {dict(seg.dims)}" for seg in placed.problem.segments)
    else:
        resolved, compiled = compile_experiment(spec, experiment, set_, cache_dir, task)
        if profile is not None:
            from seqc.compiler.placement.plan import batch_dims
            from seqc.run.devices.profile import profile_command, read_profile

            def remake(backend: str) -> str:
                return profile_command(spec, experiment, profile, set_, task, backend)

            dims = batch_dims(resolved, compiled.name)
            measured = read_profile(profile, compiled.graph, dims, remake)
        placed = place(
            compiled.graph,
            resolved,
            compiled.name,
            algorithm,
            fuse=fuse,
            keep_activations=keep_activations,
            measured=measured,
        )
        what, dims = f"{len(compiled.graph.ops)} ops", str(placed.problem.dims)
    problem, plan = placed.problem, placed.plan
    reporter.info(
        f"{what} -> {len(problem.nodes)} nodes on "
        f"{len(problem.devices)} devices (dims {dims}, comm {problem.comm.model})"
    )
    reporter.result(summary(problem, plan))
    if measured is not None:
        reporter.result(
            compared_with_estimate(
                compiled.graph, resolved, compiled.name, placed, algorithm, fuse, keep_activations
            )
        )
    if multi is not None:
        reporter.result(tasks_summary(problem, plan, multi))
    if json_file is not None:
        json_file.write_text(json.dumps(plan_json(problem, plan), indent=1) + "\n")
        reporter.result(f"plan: {json_file}")
    if gantt_file is not None:
        reporter.result(f"gantt: {gantt(problem, plan, gantt_file)}")


def compared_with_estimate(
    graph: Graph,
    resolved: ResolvedExperiment,
    task: str,
    placed: Placement,
    algorithm: str | None,
    fuse: bool,
    keep_activations: bool,
) -> str:
    """The same algorithm's plan from the estimated costs, replayed with the measured ones: how
    much the measurement changed the placement's step (the measured costs are the truth both
    plans are timed by)."""
    from seqc.compiler.placement.plan import place, replay

    estimated = place(
        graph, resolved, task, algorithm, fuse=fuse, keep_activations=keep_activations
    )
    again = replay(placed.problem, estimated.devices)
    moved = _moved(again.device, placed.plan.device, [d.memory for d in placed.problem.devices])
    # both replayed by one simulator, so the ratio is the placements', not the placers' orders
    mine = replay(placed.problem, placed.devices).makespan
    return (
        f"from the estimated costs, {placed.plan.algorithm} makes a plan that takes "
        f"{again.makespan / 1e3:.2f} ms with the measured ones (it expected "
        f"{estimated.plan.makespan / 1e3:.2f} ms); this plan, replayed alike, {mine / 1e3:.2f} ms "
        f"(x{again.makespan / mine if mine else 1.0:.2f}) and puts {moved} of "
        f"{len(again.device)} nodes elsewhere"
    )


def _moved(first: list[int], second: list[int], memory: list[int]) -> int:
    """Nodes the two placements put apart, up to a renaming of devices that are alike (of one
    memory size): two plans that swap two identical devices put every node where the other
    does. Devices are matched greedily, by the nodes they share."""
    shared: dict[tuple[int, int], int] = {}
    for a, b in zip(first, second, strict=True):
        shared[a, b] = shared.get((a, b), 0) + 1
    rename: dict[int, int] = {}
    for (a, b), _ in sorted(shared.items(), key=lambda kv: -kv[1]):
        if a not in rename and b not in rename.values() and memory[a] == memory[b]:
            rename[a] = b
    return sum(rename.get(a, -1) != b for a, b in zip(first, second, strict=True))
