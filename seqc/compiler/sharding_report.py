"""`seqc show --sharding`: each param's partition spec and bytes per device, and the total per
device against the device memory the spec states."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from seqc.compiler.compile import compile_task
from seqc.compiler.sharding import plan_sharding
from seqc.resolve.experiment import ResolvedExperiment
from seqc.resolve.program import Program
from seqc.spec.types import parse_size


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"


def print_sharding_report(
    console: Console, program: Program, r: ResolvedExperiment, task: str
) -> None:
    plan = plan_sharding(compile_task(program, r, task).graph, r, task)
    mesh = ", ".join(f"{a}: {n}" for a, n in plan.mesh.items())
    console.print(
        Text.assemble((f"{task}.model", "bold"), f" on mesh {{{mesh}}}: {plan.devices} device(s)")
    )
    table = Table(show_header=True, box=None, padding=(0, 2))
    for col in ("param", "shape", "spec", "per device", "bytes/device", "from"):
        table.add_column(col, justify="right" if col == "bytes/device" else "left")
    for p in plan.params.values():
        spec = "[" + ", ".join(a or "none" for a in p.spec) + "]"
        shard = "x".join(str(d) for d in plan.shard_shape(p.name)) or "scalar"
        shape = "x".join(str(d) for d in p.shape) or "scalar"
        table.add_row(p.name, shape, spec, shard, _size(p.device_bytes(plan.mesh)), p.origin)
    console.print(table)
    total = plan.device_bytes()
    whole = sum(p.device_bytes({a: 1 for a in plan.mesh}) for p in plan.params.values())
    devices = r.config["distribution"]["devices"] or []
    limit = min((parse_size(str(d.args["memory"])) or 0 for d in devices), default=None)
    # params, gradients and the optimizer's moments (Adam: two) are split alike
    line = (
        f"params per device: {_size(total)} of {_size(whole)}; with gradients and Adam's "
        f"moments about {_size(4 * total)}"
    )
    if limit is not None:
        line += f", against {_size(limit)} of device memory ({4 * total / limit:.1%})"
    console.print(line)
