"""`seqc place`: place one training step of an experiment's model on its devices.

Placement runs at compile time on numbers the spec states (`distribution.devices`), so it needs
no device and, when the vocabulary size is written in the spec, no data: the experiment is
resolved without data first and read through `open_session` only when a model param waits on
the data (a character tokenizer's vocabulary).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from seqc.spec.errors import UsageError

err = Console(stderr=True, highlight=False)
out = Console(highlight=False, soft_wrap=True)

ALGORITHMS = ("m_topo", "m_etf", "m_sct", "single", "manual")


def place_cmd(
    spec: Annotated[Path, typer.Argument(help="A .seq file.", show_default=False)],
    experiment: Annotated[
        str, typer.Option("-e", "--experiment", help="Registry name of an experiment.")
    ],
    algorithm: Annotated[
        str | None,
        typer.Option(
            "--algorithm",
            "-a",
            help="m_topo, m_etf, m_sct or single (default: the experiment's "
            "distribution.placement).",
        ),
    ] = None,
    json_file: Annotated[
        Path | None, typer.Option("--json", help="Write the plan as JSON to this file.")
    ] = None,
    gantt_file: Annotated[
        Path | None,
        typer.Option("--gantt", help="Draw a Gantt chart with memory per device to this PNG."),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a value: --set lm.model.layers=24 (repeatable)."),
    ] = None,
    cache_dir: Annotated[
        Path | None,
        typer.Option("--cache-dir", help="Tokenizer cache (default .cache/tokenizers)."),
    ] = None,
    fuse: Annotated[
        bool,
        typer.Option(help="Fuse single-reader chains into one node (Baechi's co-placement)."),
    ] = True,
    keep_activations: Annotated[
        bool,
        typer.Option(
            "--keep-activations",
            help="Count each activation as held until backward (a training step's real peak), "
            "not only until its readers ran.",
        ),
    ] = False,
) -> None:
    """Place a training step on the experiment's devices with a Baechi placer; prints memory
    and busy time per device and the step time against its lower bound."""
    from seqc.compiler.placement.checker import check
    from seqc.compiler.placement.from_graph import problem_from_graph
    from seqc.compiler.placement.report import gantt, plan_json, summary

    if algorithm is not None and algorithm not in ALGORITHMS:
        raise UsageError(
            f"unknown placement algorithm `{algorithm}`",
            code="unknown-algorithm",
            expected=", ".join(ALGORITHMS),
            found=algorithm,
        )
    resolved, task, graph = _lower(spec, experiment, set_ or [], cache_dir)
    dist = resolved.config["distribution"]
    placement = dist["placement"]
    kind = algorithm or placement.kind
    args = dict(placement.args) if algorithm is None or algorithm == placement.kind else {}
    problem = problem_from_graph(
        graph,
        dist["devices"],
        comm=dist["comm"],
        optimizer_slots=optimizer_slots(resolved.config["train"]["optimizer"]),
        batch_dims=batch_dims(resolved, task),
        fuse=fuse and kind != "manual",  # fusion may join layers a manual plan splits
        retain_activations=keep_activations,
    )
    err.print(
        f"{len(graph.ops)} ops -> {len(problem.nodes)} nodes on "
        f"{len(problem.devices)} devices (dims {problem.dims}, comm {problem.comm.model})",
        soft_wrap=True,
    )
    plan = run_placement(problem, kind, args)
    check(problem, plan)
    out.print(escape(summary(problem, plan)))
    if json_file is not None:
        json_file.write_text(json.dumps(plan_json(problem, plan), indent=1) + "\n")
        out.print(f"plan: {json_file}")
    if gantt_file is not None:
        out.print(f"gantt: {gantt(problem, plan, gantt_file)}")


def manual_devices(problem: Any, layers: dict[str, int]) -> list[int]:
    """Device per node from `manual(layers = {prefix: device})`: the longest prefix matching
    the node's first layer path; device 0 when none does."""
    n = len(problem.devices)
    for path, d in layers.items():
        if not 0 <= int(d) < n:
            raise UsageError(
                f"`manual` puts `{path}` on device {d}; there are {n}",
                code="bad-device",
                expected=f"a device index in 0..{n - 1}",
                found=str(d),
            )
    ordered = sorted(layers, key=len, reverse=True)
    out = []
    for paths in problem.layers:
        first = paths[0] if paths else ""
        match = next((p for p in ordered if first == p or first.startswith(p + ".")), None)
        out.append(int(layers[match]) if match is not None else 0)
    return out


def run_placement(problem: Any, kind: str, args: dict[str, Any]) -> Any:
    """Run one placement kind of the catalogue on a problem; the plan's `seconds` is set."""
    from seqc.compiler.placement import algorithms
    from seqc.compiler.placement.simulate import simulate

    t0 = time.perf_counter()
    if kind == "m_topo":
        plan = algorithms.m_topo(problem)
    elif kind == "m_etf":
        plan = algorithms.m_etf(problem)
    elif kind == "m_sct":
        plan = algorithms.m_sct(problem, threshold=float(args.get("threshold", 0.5)))
    elif kind == "single":
        d = int(args.get("device", 0))
        if not 0 <= d < len(problem.devices):
            raise UsageError(
                f"`distribution.placement = single({d})` names device {d}; there are "
                f"{len(problem.devices)}",
                code="bad-device",
                expected=f"a device index in 0..{len(problem.devices) - 1}",
                found=str(d),
            )
        plan = simulate(problem, [d] * len(problem.nodes), algorithm="single")
    elif kind == "manual":
        plan = simulate(
            problem, manual_devices(problem, args.get("layers", {})), algorithm="manual"
        )
    else:
        raise UsageError(
            f"unknown placement algorithm `{kind}`",
            code="unknown-algorithm",
            expected=", ".join(ALGORITHMS),
            found=kind,
        )
    plan.seconds = time.perf_counter() - t0
    return plan


def _lower(spec: Path, experiment: str, overrides: list[str], cache_dir: Path | None) -> Any:
    """The resolved experiment, its task and its lowered model; data is read only if needed."""
    from seqc.compiler.lower import lower_model
    from seqc.compiler.program import load_program
    from seqc.compiler.resolve import resolve
    from seqc.compiler.values import Symbol

    program = load_program(spec)
    resolved = resolve(program, experiment, overrides)
    if len(resolved.tasks) > 1:
        raise UsageError(
            f"experiment `{experiment}` trains {len(resolved.tasks)} tasks together; placement "
            "of multi-task models is not implemented yet",
            code="not-implemented",
        )
    task = resolved.tasks[0]
    if _has_symbol(resolved.models[task], Symbol):
        from seqc.run.session import open_session

        session = open_session(spec, experiment, overrides, cache_dir=cache_dir)
        return session.resolved, session.task, session.graph
    decl = program.layers[resolved.config[task]["model"].kind]
    return resolved, task, lower_model(decl, resolved.models[task], program.layers)


def _has_symbol(inst: Any, symbol: type) -> bool:
    stack = [inst]
    while stack:
        x = stack.pop()
        if isinstance(x, symbol):
            return True
        if isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, list | tuple):
            stack.extend(x)
        elif hasattr(x, "args") and hasattr(x, "children"):
            stack.extend(x.args.values())
            stack.extend(x.children)
    return False


def optimizer_slots(optimizer: Any) -> int:
    """State tensors per param: Adam-like 2, momentum and Adagrad 1, plain SGD 0."""
    kind = getattr(optimizer, "kind", str(optimizer))
    if kind in ("sgd",):
        return 1 if float(getattr(optimizer, "args", {}).get("momentum", 0.0) or 0.0) else 0
    if kind in ("adagrad", "adafactor"):  # adafactor's factored moments: about one slot
        return 1
    return 2


def batch_dims(resolved: Any, task: str) -> dict[str, int]:
    """B and T (and S) of the largest batch the experiment feeds: the longest bucket and its
    batch size, else `max_length` and `train.batch_size`."""
    from seqc.compiler.placement.from_graph import DEFAULT_DIMS

    inp = resolved.config[task]["input"]
    buckets = inp.get("buckets") if hasattr(inp, "get") else None
    batch = resolved.config["train"].get("batch_size")
    if buckets:
        length = max(int(k) for k in buckets)
        b = int(batch or buckets[length])
    else:
        length = int(inp.get("max_length") or DEFAULT_DIMS["T"])
        b = int(batch or DEFAULT_DIMS["B"])
    return {"B": b, "T": length, "S": length}
