"""`seqc show --graph`: what a model lowers to, and what it costs.

The per-layer table keeps `blocks.3` apart from `blocks.4`, and stops at `MAX_ROWS` rows with
one row that sums the rest: a table of 10,000 repeat copies took rich a minute to lay out, and
reads no better than its first rows. The graph itself is bounded by `MAX_GRAPH_OPS`. Text from
the spec (layer and kind names) is printed as written, never read as markup.

A multi-task experiment reports each task (its params named as in the joint model; with
`--passes`, what the passes did to the training graph that task's steps run), then the model's
params, each once, and the params each share gives several tasks (`multitask_report`).

Each report is plain data (`seqc.compiler.tables.Section`); the command line lays it out.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from seqc.compiler.compile import CompiledTask, compile_task
from seqc.compiler.cost import estimate
from seqc.compiler.graph import DTYPE_BYTES, Graph
from seqc.compiler.multitask import MultiTask
from seqc.compiler.tables import Section, Table
from seqc.resolve.experiment import ResolvedExperiment
from seqc.resolve.program import Program


def graph_report(
    program: Program,
    r: ResolvedExperiment,
    task: str,
    graph: Graph | None = None,
    prefix: str = "",
) -> Section:
    """One task's model: op, param and FLOP counts, and a row per top-level layer. `graph`: the
    task's forward already compiled (a multi-task model's, with its names), else compiled here;
    `prefix`: the part of its layer paths that names the task (`a.`), kept on each row."""
    model = r.config[task]["model"]
    if graph is None:
        graph = compile_task(program, r, task).graph
    buckets = r.config[task]["input"].get("buckets") or {}
    length = max(buckets) if buckets else r.config[task]["input"]["max_length"]
    audio = _audio_dim(graph)
    if audio is None:
        dims = {"B": 1, "T": int(length), "S": int(length)}
        sizes = f"T = S = {length}"
    else:  # buckets are seconds of audio; transcripts of a few tokens a second
        rate = _sample_rate(r.config[task]["input"])
        dims = {"B": 1, audio: int(float(length) * rate), "T": max(1, int(3 * float(length)))}
        sizes = f"{audio} = {dims[audio]:,} samples ({length} s), T = {dims['T']}"
    cost = estimate(graph, dims)
    kinds = Counter(op.kind for op in graph.ops)
    lines = [
        f"  ops: {cost.op_count} ({', '.join(f'{k} {n}' for k, n in kinds.most_common(8))}, ...)",
        f"  params: {len(graph.params)} tensors, {cost.param_count:,} values "
        f"({cost.param_bytes / 2**20:.1f} MiB)",
        f"  forward FLOPs per token: {cost.flops_per_token / 1e6:.2f} M "
        f"(training step ~3x: {3 * cost.flops_per_token / 1e6:.2f} M)",
        f"  activations per sequence: {cost.activation_bytes / 2**20:.1f} MiB",
    ]
    columns = ("layer", "ops", "params", "MFLOPs/token", "activations KiB")
    table = Table(columns, right=frozenset(columns[1:]))
    rows = list(_top_level(cost.per_layer, prefix).items())
    if len(rows) > MAX_ROWS:
        rest = rows[MAX_ROWS - 1 :]
        summed = {k: sum(lc[k] for _, lc in rest) for k in ("ops", "params", "flops", "act")}
        rows = [*rows[: MAX_ROWS - 1], (f"... {len(rest):,} more layers", summed)]
    for layer, lc in rows:
        table.rows.append(
            (
                layer,
                str(lc["ops"]),
                f"{lc['params']:,}",
                f"{lc['flops'] / cost.tokens / 1e6:.3f}",
                f"{lc['act'] / 1024:.0f}",
            )
        )
    rest = f": {model.kind}, lowered for B = 1, {sizes}"
    return Section(f"{task}.model", rest, lines, table)


def _audio_dim(graph: Graph) -> str | None:
    """The symbol of the samples axis of a model's `audio` input, if it has one."""
    vid = graph.inputs.get("audio")
    if vid is None:
        return None
    shape = graph.ops[vid].type.shape
    return shape[1] if len(shape) == 2 and isinstance(shape[1], str) else None


def _sample_rate(input_config: dict[str, Any]) -> int:
    reader = input_config.get("train")
    args = getattr(reader, "args", None) or {}
    return int(args.get("sample_rate", 16000))


def multitask_report(
    program: Program,
    r: ResolvedExperiment,
    multi: MultiTask,
    *,
    passes: bool = False,
) -> list[Section]:
    """Each task's report (with `passes`, and what the passes did to that task's training
    graph: a multi-task run steps each task's own graph, `seqc.backends.*.multitask`), then the
    whole model: its params counted once, and per share the tasks that read its params. The
    sum of the tasks' param counts less the model's is what the shares save."""
    sections = []
    for name, task in multi.tasks.items():
        sections.append(graph_report(program, r, name, task.graph, prefix=f"{name}."))
        if passes:
            sections.append(pass_report(program, r, name, task))
    params, owners = multi.params, multi.owners()
    values = sum(p.size for p in params.values())
    nbytes = sum(p.size * DTYPE_BYTES[p.type.dtype] for p in params.values())
    alone = sum(p.size * len(owners[n]) for n, p in params.items())
    rest = f": {len(multi.tasks)} tasks ({', '.join(multi.tasks)}), {len(multi.shares)} share(s)"
    line = (
        f"  params: {len(params)} tensors, {values:,} values ({nbytes / 2**20:.1f} MiB), each "
        f"once; the tasks alone: {sum(len(o) for o in owners.values())} tensors, "
        f"{alone:,} values"
    )
    table = None
    if multi.shares:
        table = Table(
            ("share", "tasks", "tensors", "params"), right=frozenset({"tensors", "params"})
        )
        for share, uses in multi.shares.items():
            mine = [p for n, p in params.items() if n == share or n.startswith(share + ".")]
            table.rows.append(
                (
                    share,
                    ", ".join(u.split(".", 1)[0] for u in uses),
                    str(len(mine)),
                    f"{sum(p.size for p in mine):,}",
                )
            )
    return [*sections, Section("model", rest, [line], table)]


MAX_ROWS = 40
"""Rows of the per-layer table; the last one sums the layers past it."""


def _top_level(per_layer: dict[str, Any], prefix: str = "") -> dict[str, dict[str, int]]:
    """Sum per-op costs up to the model's direct children (`blocks.3` stays separate), each
    path past `prefix` when it has it."""
    out: dict[str, dict[str, int]] = {}
    for path, lc in per_layer.items():
        head = prefix if prefix and path.startswith(prefix) else ""
        parts = path[len(head) :].split(".")
        key = head + (".".join(parts[:2]) if len(parts) > 1 and parts[1].isdigit() else parts[0])
        agg = out.setdefault(key, {"ops": 0, "params": 0, "flops": 0, "act": 0})
        agg["ops"] += lc.ops
        agg["params"] += lc.params
        agg["flops"] += lc.flops
        agg["act"] += lc.activation_bytes
    return out


def pass_report(
    program: Program,
    r: ResolvedExperiment,
    task: str,
    compiled: CompiledTask | None = None,
) -> Section:
    """What each of the experiment's passes (`compile { passes }`) did to `task`'s training
    graph: op counts and forward FLOPs before and after, and the op kinds it changed.
    `compiled`: the task already compiled (a multi-task model's), else compiled here."""
    from seqc.compiler.passes import DEFAULT_PASSES, LOSS_PASS, LOSS_PASS_DOC, PASSES

    if compiled is None:
        compiled = compile_task(program, r, task)
    ran = {rep.name: rep for rep in compiled.pass_reports}
    asked = r.config.get("compile", {}).get("passes", DEFAULT_PASSES)
    rest = (
        ": passes on the training graph (forward FLOPs at B = 1, T = S = 128; "
        f"{LOSS_PASS} counts the criterion's ops too)"
    )
    table = Table(("pass", "ops", "MFLOPs", "op kinds changed"), right=frozenset({"ops", "MFLOPs"}))
    docs = {LOSS_PASS: LOSS_PASS_DOC} | {n: p.doc for n, p in PASSES.items()}
    for name, doc in docs.items():
        rep = ran.get(name)
        if rep is None:
            if name in asked:  # fuse_loss, asked for, where it does not apply
                doc = "not applied: the model does not end in a Softmax scored by cross_entropy"
            table.rows.append((name, "off" if name not in asked else "-", "", doc))
            continue
        changed = [
            f"{kind} {rep.kinds_before[kind]}->{rep.kinds_after[kind]}"
            for kind in sorted(set(rep.kinds_before) | set(rep.kinds_after))
            if rep.kinds_before[kind] != rep.kinds_after[kind]
        ]
        table.rows.append(
            (
                name,
                f"{rep.ops_before} -> {rep.ops_after}",
                f"{rep.flops_before / 1e6:.2f} -> {rep.flops_after / 1e6:.2f}",
                ", ".join(changed) or "-",
            )
        )
    return Section(f"{task}.model", rest, table=table)
