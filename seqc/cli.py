"""The `seqc` command line.

Every command maps spec errors to a rendered message (file:line:col, caret, expected/found,
did-you-mean) and exit code 2; `--debug` shows the Python traceback as well. Exit codes:
0 success, 1 `fmt --check` found files to reformat, 2 a spec or usage error, 3 an internal error.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

from seqc.spec.errors import SeqcError

app = typer.Typer(
    name="seqc",
    help="Compile .seq sequence-model specs: check, format, inspect.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
# Off a terminal (pipes, CI logs) rich would assume 80 columns and cut table cells.
out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, highlight=False, soft_wrap=True)
_state = {"debug": False}

T = TypeVar("T")


@app.callback()
def _main(
    debug: Annotated[
        bool, typer.Option("--debug", help="Show Python tracebacks with errors.")
    ] = False,
) -> None:
    _state["debug"] = debug


def _run(fn: Callable[[], T]) -> T:
    """Run a command body; turn seqc errors into a message and exit code 2."""
    try:
        return fn()
    except SeqcError as e:
        if _state["debug"]:
            traceback.print_exc()
        _print_error(e)
        raise typer.Exit(2) from None
    except RecursionError:
        err.print("[bold red]error[/]: the spec nests too deeply to process")
        raise typer.Exit(2) from None
    except typer.Exit:
        raise
    except Exception as e:  # a bug in seqc, not in the spec
        if _state["debug"]:
            traceback.print_exc()
        err.print(
            f"[bold red]internal error[/]: {escape(type(e).__name__)}: {escape(str(e))}\n"
            "This is a bug in seqc. Run again with --debug for the traceback and report it."
        )
        raise typer.Exit(3) from None


def _print_error(e: SeqcError) -> None:
    lines = e.render().split("\n")
    head, rest = lines[0], lines[1:]
    loc, _, msg = head.partition(": ")
    err.print(f"[bold]{escape(loc)}[/]: [bold red]{escape(msg)}[/]")
    for line in rest:
        style = "cyan" if line.lstrip().startswith(("expected", "found")) else ""
        if line.strip().startswith("|") or ("^" in line and set(line.split("|")[-1]) <= {" ", "^"}):
            style = "bold red"
        if "did you mean" in line or line.strip().startswith("hint:"):
            style = "green"
        err.print(f"[{style}]{escape(line)}[/]" if style else escape(line))


def _load(file: Path) -> Any:
    from seqc.resolve.program import load_program

    return load_program(file)


FileArg = Annotated[Path, typer.Argument(help="A .seq file.", show_default=False)]
ExpOpt = Annotated[
    str | None, typer.Option("-e", "--experiment", help="Registry name of an experiment.")
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a value: --set lm.model.d=128 (repeatable)."),
]


@app.command()
def check(file: FileArg, experiment: ExpOpt = None, set_: SetOpt = None) -> None:
    """Parse, resolve and type-check a spec (all experiments, or one with -e)."""
    from seqc.compiler.check import check_program

    def body() -> None:
        program = _load(file)
        if set_ and experiment is None:
            from seqc.spec.errors import UsageError

            raise UsageError("--set needs -e EXPERIMENT", code="bad-override", path=str(file))
        resolved = check_program(program, experiment, set_ or [])
        n_layers = len(program.layers)
        out.print(
            f"[green]ok[/] {escape(str(file))}: {len(program.files)} file(s), "
            f"{n_layers} layer(s), {len(program.tasks)} task(s), "
            f"{len(resolved)} experiment(s) checked"
        )

    _run(body)


@app.command()
def fmt(
    file: FileArg,
    check_: Annotated[
        bool, typer.Option("--check", help="Exit 1 if the file is not formatted; change nothing.")
    ] = False,
    write: Annotated[bool, typer.Option("--write", help="Rewrite the file in place.")] = False,
) -> None:
    """Print the canonical form of a spec (comments kept)."""
    from seqc.spec.parser import parse_file
    from seqc.spec.printer import format_spec

    def body() -> int:
        if check_ and write:
            from seqc.spec.errors import UsageError

            raise UsageError("use one of --check and --write", code="bad-flags")
        spec = parse_file(file)
        text = format_spec(spec)
        original = file.read_text(encoding="utf-8")
        if check_:
            if text != original:
                err.print(f"would reformat {escape(str(file))}")
                return 1
            out.print(f"{escape(str(file))} is formatted")
            return 0
        if write:
            if text != original:
                _atomic_write(file, text)
                out.print(f"reformatted {escape(str(file))}")
            return 0
        sys.stdout.write(text)
        return 0

    code = _run(body)
    if code:
        raise typer.Exit(code)


def _atomic_write(path: Path, text: str) -> None:
    """Write via a temporary file and a rename, so an interrupted write never loses the spec."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@app.command("list")
def list_(file: FileArg) -> None:
    """List the experiments of a spec and its imports (the registry)."""

    def body() -> None:
        program = _load(file)
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
            table.add_row(*(escape(c) for c in cells))
        if not program.experiments:
            out.print(f"{escape(str(file))}: no experiments")
            return
        out.print(table)

    _run(body)


def _inherited(program: Any, decl: Any, field: str) -> str:
    """The text of `field = ...` in an experiment or the nearest ancestor that sets it."""
    from seqc.spec.ir import Assign, String
    from seqc.spec.printer import _flat

    seen = set()
    while decl is not None and decl.name not in seen:
        seen.add(decl.name)
        for item in reversed(decl.body.items):
            if isinstance(item, Assign) and item.path == (field,):
                return item.value.value if isinstance(item.value, String) else _flat(item.value)
        decl = program.experiments.get(decl.extends) if decl.extends else None
    return ""


@app.command()
def show(
    file: FileArg,
    experiment: Annotated[
        str, typer.Option("-e", "--experiment", help="Registry name of an experiment.")
    ],
    set_: SetOpt = None,
    provenance: Annotated[
        bool, typer.Option("--provenance", help="Say where each value was set.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    graph: Annotated[
        bool, typer.Option("--graph", help="Lower the model; print op, param and FLOP counts.")
    ] = False,
) -> None:
    """Show a resolved experiment: every value explicit, with its origin on request."""
    from seqc.resolve.experiment import resolve
    from seqc.resolve.values import show_value, to_json

    def body() -> None:
        program = _load(file)
        r = resolve(program, experiment, set_ or [])
        if graph:
            from seqc.compiler.graph_report import print_graph_report

            for task in r.tasks:
                print_graph_report(out, program, r, task)
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
        out.print(f"[bold]experiment {escape(r.name)}[/]  ({escape(chain)})")
        width = max(len(p) for p, _ in r.leaves())
        for path, value in r.leaves():
            text = (
                value if isinstance(value, str) and value.endswith("(...)") else show_value(value)
            )
            line = f"  {path:<{width}} = {text}"
            if provenance:
                origin = r.origin(path)
                colour = "dim" if origin.kind == "default" else "cyan"
                out.print(f"{escape(line)}  [{colour}]# {escape(str(origin))}[/]")
            else:
                out.print(escape(line))
        for task, model in r.models.items():
            tree = Tree(f"[bold]{escape(task)}.model[/]: {escape(model.kind)}")
            _model_tree(tree, model)
            out.print(tree)

    _run(body)


def _model_tree(tree: Tree, node: Any) -> None:
    from seqc.resolve.values import show_value

    for child in node.children:
        args = ", ".join(f"{k}={show_value(v)}" for k, v in child.args.items() if v is not None)
        name = child.path.rsplit(".", 1)[-1]
        label = f"{name}: {child.kind}"
        if child.repeat:
            branch = tree.add(f"{escape(label)} x {child.repeat}  [dim]{escape(args)}[/]")
            _model_tree(branch.add(f"[dim]each of {child.repeat}:[/]"), child.children[0])
        elif child.builtin:
            tree.add(f"{escape(label)}  [dim]{escape(args)}[/]")
        else:
            _model_tree(tree.add(f"{escape(label)}  [dim]{escape(args)}[/]"), child)


@app.command()
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

    def body() -> None:
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
            out.print(f"[bold]{len(kinds)} built-in layers[/] (seqc layers NAME for params)")
            for k in sorted(kinds):
                out.print(f"  [bold]{k:<20}[/] {escape(kinds[k].doc)}")
            return
        for k in sorted(kinds):
            _print_kind(kinds[k])

    _run(body)


def _print_kind(spec: Any) -> None:
    from seqc.resolve.values import show_value

    sig = ", ".join(spec.positional)
    out.print(f"\n[bold]{escape(spec.name)}[/]({escape(sig)})  [dim]{escape(spec.namespace)}[/]")
    out.print(f"  {escape(spec.doc)}")
    table = Table(show_header=True, box=None, padding=(0, 2))
    for col in ("param", "type", "default", "description"):
        table.add_column(col)
    for p in spec.params:
        default = "[red]required[/]" if p.required else escape(show_value(p.default))
        table.add_row(escape(p.name), escape(str(p.type)), default, escape(p.doc))
    if spec.params:
        out.print(table)


@app.command()
def schema() -> None:
    """Print the JSON Schema of the spec IR."""
    from seqc.spec.ir import SpecFile

    sys.stdout.write(json.dumps(SpecFile.model_json_schema(), indent=2) + "\n")


def _guard(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Give a command mounted from another module the same error handling as the ones here."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return _run(lambda: fn(*args, **kwargs))

    return wrapper


def _mount() -> None:
    """Commands that live with their stage: data preparation and the run commands."""
    from seqc.data.commands import data_app
    from seqc.run.commands import COMMANDS

    app.add_typer(data_app, name="data", help="Prepare the corpora the examples train on.")
    for name, fn in COMMANDS.items():
        app.command(name)(_guard(fn))


_mount()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
