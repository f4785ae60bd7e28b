"""The front end's commands: `seqc check`, `fmt`, `list`, `show`, `layers`, `schema`, `lsp`.

They read a spec and print what it says; none trains or loads a framework. `check` and `fmt`
run on every save in an editor, so this module imports nothing heavy: each command imports
what it needs when it runs (`tests/frontend/test_cli_lazy.py` keeps numpy, JAX and TensorFlow out of
`seqc check`).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from seqc.cli.console import err, out, plain_table, print_section, styled
from seqc.cli.guard import guarded
from seqc.cli.options import FileArg, OptionalExpOpt, SetOpt, SweepOpt

if TYPE_CHECKING:  # the IR (pydantic) and rich's trees load only when a command needs them
    from rich.tree import Tree


@guarded
def check(file: FileArg, experiment: OptionalExpOpt = None, set_: SetOpt = None) -> None:
    """Parse, resolve and type-check a spec (all experiments, or one with -e)."""
    from seqc.compiler.check_cache import check_file

    shown = _printable_path(file)
    if set_ and experiment is None:
        from seqc.spec.errors import UsageError

        raise UsageError("--set needs -e EXPERIMENT", code="bad-override", path=str(file))
    # an unchanged program that passed before is answered from its verdict, unimported
    summary = check_file(file, experiment, set_ or [])
    sweeps = f", {summary.sweeps} sweep(s)" if summary.sweeps else ""
    out.print(
        styled(
            ("ok", "green"),
            f" {shown}: {summary.files} file(s), "
            f"{summary.layers} layer(s), {summary.tasks} task(s), "
            f"{summary.experiments} experiment(s){sweeps} checked",
        )
    )


@guarded
def fmt(
    file: FileArg,
    check_: Annotated[
        bool, typer.Option("--check", help="Exit 1 if the file is not formatted; change nothing.")
    ] = False,
    write: Annotated[bool, typer.Option("--write", help="Rewrite the file in place.")] = False,
) -> None:
    """Print the canonical form of a spec (comments kept)."""
    from seqc.spec.files import read_spec
    from seqc.spec.parser import parse_file
    from seqc.spec.printer import format_spec

    shown = _printable_path(file)
    if check_ and write:
        from seqc.spec.errors import UsageError

        raise UsageError("use one of --check and --write", code="bad-flags")
    spec = parse_file(file)
    text = format_spec(spec)
    original = read_spec(file, keep_bom=True)  # bounded, as the parse's read
    if check_:
        if text != original:
            err.print(f"would reformat {shown}")
            raise typer.Exit(1)
        out.print(f"{shown} is formatted")
    elif write:
        if text != original:
            _atomic_write(file, text)
            out.print(f"reformatted {shown}")
    else:
        sys.stdout.write(text)


def _load(file: Path) -> Any:
    """The program of a spec and its imports (`seqc.resolve.program.load_program`)."""
    from seqc.resolve.program import load_program

    return load_program(file)


def _printable_path(file: Path) -> str:
    """A file name as `check` and `fmt` print it: a name is user text too (`printable`)."""
    from seqc.spec.printable import printable

    return printable(str(file))


def _atomic_write(path: Path, text: str) -> None:
    """Write via a temporary file and a rename, so an interrupted write never loses the spec.
    A symbolic link is written through: its target gets the text and the link stays a link
    (renaming over the link itself would replace it with a copy and leave the target as it
    was)."""
    path = path.resolve()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@guarded
def list_(file: FileArg) -> None:
    """List the experiments and sweeps of a spec and its imports (the registry)."""
    program = _load(file)
    from rich.table import Table

    if not program.experiments:
        out.print(f"{file}: no experiments")
    else:
        table = Table(title=f"experiments in {file}", title_justify="left")
        for col in ("name", "extends", "tasks", "declared at", "description"):
            table.add_column(col)
        for name in sorted(program.experiments):
            decl = program.experiments[name]
            cells = (
                name,
                decl.extends or "",
                _inherited(program, decl, "tasks"),
                str(decl.span),
                _inherited(program, decl, "description") or decl.body.doc or "",
            )
            table.add_row(*cells)
        out.print(table)
    if program.sweeps:
        table = Table(title=f"sweeps in {file}", title_justify="left")
        for col in ("name", "experiment", "metric", "declared at", "description"):
            table.add_column(col)
        for name in sorted(program.sweeps):
            decl = program.sweeps[name]
            cells = (
                name,
                _field_text(decl, "experiment"),
                _field_text(decl, "metric"),
                str(decl.span),
                decl.body.doc or "",
            )
            table.add_row(*cells)
        out.print(table)


def _field_text(decl: Any, field: str) -> str:
    """The text of `field = ...` in a declaration's own body (`seqc list` does not resolve)."""
    from seqc.spec.ir import Assign, String
    from seqc.spec.printer import format_expr

    for item in decl.body.items:
        if isinstance(item, Assign) and item.path == (field,):
            return item.value.value if isinstance(item.value, String) else format_expr(item.value)
    return ""


def _inherited(program: Any, decl: Any, field: str) -> str:
    """The text of `field = ...` in an experiment or the nearest ancestor that sets it."""
    from seqc.spec.ir import Assign, String
    from seqc.spec.printer import format_expr

    seen = set()
    while decl is not None and decl.name not in seen:
        seen.add(decl.name)
        for item in reversed(decl.body.items):
            if isinstance(item, Assign) and item.path == (field,):
                return (
                    item.value.value if isinstance(item.value, String) else format_expr(item.value)
                )
        decl = program.experiments.get(decl.extends) if decl.extends else None
    return ""


@guarded
def show(
    file: FileArg,
    experiment: OptionalExpOpt = None,
    sweep: SweepOpt = None,
    set_: SetOpt = None,
    provenance: Annotated[
        bool, typer.Option("--provenance", help="Say where each value was set.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    graph: Annotated[
        bool, typer.Option("--graph", help="Lower the model; print op, param and FLOP counts.")
    ] = False,
    sharding: Annotated[
        bool,
        typer.Option(
            "--sharding", help="Each param's split over the mesh and its bytes per device."
        ),
    ] = False,
    passes: Annotated[
        bool,
        typer.Option(
            "--passes", help="With --graph: what each compiler pass did to the training graph."
        ),
    ] = False,
) -> None:
    """Show a resolved experiment (every value explicit, with its origin on request) or a
    sweep (its space beside the base experiment's values)."""
    from seqc.resolve.experiment import resolve
    from seqc.resolve.values import show_value, to_json

    if (experiment is None) == (sweep is None):
        from seqc.spec.errors import UsageError

        raise UsageError(
            "give one of -e EXPERIMENT and -s SWEEP",
            code="missing-option" if experiment is None else "bad-flags",
            path=str(file),
            hint="`seqc list FILE` lists both",
        )
    if sweep is not None:
        if set_ or provenance or graph or sharding or passes:
            from seqc.spec.errors import UsageError

            raise UsageError(
                "-s shows a sweep as declared: --set, --provenance, --graph, --passes and "
                "--sharding are for an experiment (-e)",
                code="bad-flags",
                path=str(file),
            )
        _show_sweep(_load(file), sweep, as_json)
        return
    assert experiment is not None
    program = _load(file)
    r = resolve(program, experiment, set_ or [])
    if graph:
        _show_graph(file, program, r, experiment, set_ or [], passes)
        return
    if sharding:
        from seqc.cli.pipeline_view import show_pipeline
        from seqc.compiler.sharding import check_memory
        from seqc.compiler.sharding_report import sharding_report

        for task in r.tasks:
            section, plan = sharding_report(program, r, task)
            print_section(section)
            check_memory(plan, r)  # after the table: the bytes that do not fit are on screen
            if plan.pipeline is not None:
                show_pipeline(plan, r, task)
        return
    if as_json:
        data = {
            "name": r.name,
            "file": r.file,
            "chain": list(r.chain),
            "tasks": list(r.tasks),
            "config": to_json(r.config),
            "models": {t: m.model_dump(exclude={"span"}) for t, m in r.models.items()},
        }
        if provenance:
            data["provenance"] = {p: str(r.origin(p)) for p, _ in r.leaves()}
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
        return
    chain = " <- ".join(r.chain)
    out.print(styled((f"experiment {r.name}", "bold"), f"  ({chain})"))
    width = max(len(p) for p, _ in r.leaves())
    for path, value in r.leaves():
        text = value if isinstance(value, str) and value.endswith("(...)") else show_value(value)
        line = f"  {path:<{width}} = {text}"
        if provenance:
            origin = r.origin(path)
            colour = "dim" if origin.kind == "default" else "cyan"
            out.print(styled(line, "  ", (f"# {origin}", colour)))
        else:
            out.print(line)
    from rich.tree import Tree

    for task, model in r.models.items():
        tree = Tree(styled((f"{task}.model", "bold"), f": {model.kind}"))
        _model_tree(tree, model)
        out.print(tree)


def _show_sweep(program: Any, name: str, as_json: bool) -> None:
    """`seqc show -s`: the sweep's settings, then its space as a table beside the base
    experiment's value at each path and the line that set it."""
    from seqc.resolve.experiment import resolve
    from seqc.resolve.sweep import FIELDS, resolve_sweep
    from seqc.resolve.values import show_value, to_json

    s = resolve_sweep(program, name)
    base = resolve(program, s.experiment, [])
    rows = [(d, base.get(d.path), base.origin(d.path)) for d in s.space]
    if as_json:
        data = s.model_dump(mode="json", exclude={"span": True, "space": {"__all__": {"span"}}})
        data["span"] = str(s.span) if s.span else None
        for dim, (d, value, origin) in zip(data["space"], rows, strict=True):
            dim["span"] = str(d.span) if d.span else None
            dim["base"] = to_json(value)
            dim["base_set_at"] = str(origin)
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
        return
    out.print(styled((f"sweep {s.name}", "bold"), f"  ({s.span})"))
    if s.doc:
        out.print(Text(f"  {s.doc}", "dim"))
    settings = {
        "experiment": s.experiment,
        "metric": s.metric.text,
        "goal": s.goal,
        "trials": str(s.trials),
        "sampler": s.sampler.describe(),
        "pruner": s.pruner.describe(),
    }
    assert set(settings) <= set(FIELDS)
    for key, text in settings.items():
        out.print(f"  {key:<10} = {text}")
    table = plain_table(("path", "distribution", "base value", "set at"))
    for dim, value, origin in rows:
        table.add_row(Text(dim.path), Text(dim.describe()), Text(show_value(value)), str(origin))
    out.print(table)


def _show_graph(
    file: Path, program: Any, r: Any, experiment: str, overrides: list[str], passes: bool
) -> None:
    """`seqc show --graph`: each task's lowered model (`seqc.compiler.graph_report`); the tasks
    of a multi-task experiment compiled together, shared layers named once."""
    from seqc.compiler.graph_report import graph_report, multitask_report, pass_report

    if len(r.tasks) > 1:
        from seqc.run.session import compile_multitask

        resolved, multi = compile_multitask(file, experiment, overrides)
        for section in multitask_report(program, resolved, multi, passes=passes):
            print_section(section)
        return
    for task in r.tasks:
        print_section(graph_report(program, r, task))
        if passes:
            print_section(pass_report(program, r, task))


def _model_tree(tree: Tree, node: Any) -> None:
    from seqc.resolve.values import show_value

    for child in node.children:
        args = ", ".join(f"{k}={show_value(v)}" for k, v in child.args.items() if v is not None)
        name = child.path.rsplit(".", 1)[-1]
        label = f"{name}: {child.kind}"
        if child.repeat:
            branch = tree.add(styled(f"{label} x {child.repeat}  ", (args, "dim")))
            _model_tree(branch.add(Text(f"each of {child.repeat}:", "dim")), child.children[0])
        elif child.builtin:
            tree.add(styled(f"{label}  ", (args, "dim")))
        else:
            _model_tree(tree.add(styled(f"{label}  ", (args, "dim"))), child)


@guarded
def layers(
    name: Annotated[
        str | None, typer.Argument(help="Show one layer kind (or any kind) in full.")
    ] = None,
    brief: Annotated[bool, typer.Option("--brief", help="One line per layer.")] = False,
) -> None:
    """Print the catalogue of built-in layers with their params and descriptions."""
    import seqc.spec.catalogue  # noqa: F401  (fills the registry)
    from seqc.spec.errors import UsageError, did_you_mean
    from seqc.spec.kinds import REGISTRY as KINDS

    if name is not None:
        found = [ns[name] for ns in KINDS.namespaces.values() if name in ns]
        if not found:
            every = [k for ns in KINDS.namespaces.values() for k in ns]
            raise UsageError(
                f"no kind named `{name}`",
                code="unknown-kind",
                suggestion=did_you_mean(name, every),
            )
        for spec in found:
            _print_kind(spec)
        return
    kinds = KINDS.namespaces.get("layer", {})
    if brief:
        out.print(
            styled((f"{len(kinds)} built-in layers", "bold"), " (seqc layers NAME for params)")
        )
        for k in sorted(kinds):
            out.print(styled("  ", (f"{k:<20}", "bold"), f" {kinds[k].doc}"))
        return
    for k in sorted(kinds):
        _print_kind(kinds[k])


def _print_kind(spec: Any) -> None:
    from seqc.resolve.values import show_value

    sig = ", ".join(spec.positional)
    out.print(styled("\n", (spec.name, "bold"), f"({sig})  ", (spec.namespace, "dim")))
    out.print(f"  {spec.doc}")
    table = plain_table(("param", "type", "default", "description"))
    for p in spec.params:
        default = Text("required", "red") if p.required else show_value(p.default)
        table.add_row(p.name, str(p.type), default, p.doc)
    if spec.params:
        out.print(table)


@guarded
def schema() -> None:
    """Print the JSON Schema of the spec IR."""
    from seqc.spec.ir import SpecFile

    sys.stdout.write(json.dumps(SpecFile.model_json_schema(), indent=2) + "\n")


@guarded
def lsp() -> None:
    """Run the language server over stdio (for an editor's LSP client; see editors/)."""
    from seqc.lsp.server import serve

    serve()


COMMANDS: dict[str, Callable[..., Any]] = {
    "check": check,
    "fmt": fmt,
    "list": list_,
    "show": show,
    "layers": layers,
    "schema": schema,
    "lsp": lsp,
}
"""The front end's commands by name, in `seqc --help` order."""
