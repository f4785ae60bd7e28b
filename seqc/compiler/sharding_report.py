"""`seqc show --sharding`: each param's partition spec and bytes per device, and the total per
device against the device memory the spec states.

What a run over the mesh would refuse, it refuses too, at the same line: a mesh larger than the
devices listed (before the table: there is no plan to show), and a share per device larger
than a device's memory (after the table, so the bytes that do not fit are on the screen). On a
mesh of one device, which a run does not plan, that is a warning."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from seqc.compiler.compile import compile_task
from seqc.compiler.placement.plan import optimizer_slots
from seqc.compiler.run_checks import check_mesh_devices
from seqc.compiler.sharding import check_memory, device_memory, plan_sharding, show_bytes
from seqc.resolve.experiment import ResolvedExperiment
from seqc.resolve.program import Program


def print_sharding_report(
    console: Console, program: Program, r: ResolvedExperiment, task: str
) -> None:
    check_mesh_devices(r)
    plan = plan_sharding(compile_task(program, r, task).graph, r, task, memory=False)
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
        table.add_row(p.name, shape, spec, shard, show_bytes(p.device_bytes(plan.mesh)), p.origin)
    console.print(table)
    total = plan.device_bytes()
    whole = sum(p.device_bytes({a: 1 for a in plan.mesh}) for p in plan.params.values())
    limit = device_memory(r)
    slots = optimizer_slots(r.config["train"]["optimizer"])
    kept = plan.training_bytes(slots)
    line = (
        f"params per device: {show_bytes(total)} of {show_bytes(whole)}; with gradients and the "
        f"optimizer's {slots} tensor(s) per param about {show_bytes(kept)}"
    )
    if limit is not None:
        line += f", against {show_bytes(limit)} of device memory ({kept / limit:.1%})"
    console.print(line)
    if limit is not None and kept > limit and plan.trivial:
        console.print(
            f"warning: {show_bytes(kept)} do not fit the {show_bytes(limit)} of one device; a "
            "placement (distribution.placement) or a mesh (distribution.mesh) spreads them",
            soft_wrap=True,
        )
    check_memory(plan, r)
