"""The `seqc` command line.

Every command maps spec errors to a rendered message (file:line:col, caret, expected/found,
did-you-mean) and exit code 2; `--debug` shows the Python traceback as well. Exit codes:
0 success, 1 `fmt --check` found files to reformat, 2 a spec or usage error, 3 an internal error,
141 the reader of the output closed the pipe (`seqc check x | head -1`), as a shell reports a
writer that SIGPIPE ended (130 and 143: a run stopped by SIGINT or SIGTERM with a checkpoint).

User text is printed literally: the consoles interpret neither rich markup (`[bold]`) nor emoji
codes (`:smile:`), so a spec line, a file name or a decoded sample shows as written and a caret
stays under its column. Styles are given as `Text` spans, never as markup in a string.

Unless `--debug` is given, the libraries the backends load (TensorFlow, XLA, absl, oneDNN) are
asked to keep their own log lines to themselves, so the CLI shows only its own messages.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import click
import typer
from rich.text import Text
from typer.core import TyperGroup

from seqc.run.console import err, out, styled

if TYPE_CHECKING:  # the IR (pydantic) and rich's tables load only when a command needs them
    from rich.tree import Tree

    from seqc.spec.errors import SeqcError

HEAVY_COMMANDS = (
    "data",
    "train",
    "eval",
    "decode",
    "convert",
    "average",
    "export",
    "place",
    "profile",
    "calibrate",
    "launch",
)
"""Commands that live with their stage (data preparation, the run commands), in `--help` order.

Their modules pull in numpy, the data pipeline and the backends' plumbing, which `seqc check`
and `seqc fmt` (run on every save in an editor) should not pay for; they are imported when the
command line names one of them, or asks for the list of all commands (`seqc --help`). A test
keeps this tuple equal to `data` plus `seqc.run.commands.COMMANDS`."""


@functools.cache
def _heavy_group() -> Any:
    """The heavy commands as a click group, built from their modules on first use."""
    from seqc.data.commands import data_app
    from seqc.run.commands import COMMANDS

    heavy = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    for info in data_app.registered_commands:  # `seqc data ...` under the same guard as all
        if info.callback is not None:
            info.callback = _guard(info.callback)
    heavy.add_typer(data_app, name="data", help="Prepare the corpora the examples train on.")
    for name, fn in COMMANDS.items():
        heavy.command(name)(_guard(fn))
    return typer.main.get_command(heavy)


CLOSED_PIPE = 141
"""The exit code of any command whose output's reader went away (`seqc check x | head -1`),
as a shell reports a writer killed by SIGPIPE (128 + 13)."""


def _closed_pipe() -> typer.Exit:
    """Point stdout and stderr at /dev/null (nothing more can reach the reader, and Python's
    flush at exit would fail again and exit 120) and give the exit that says a pipe closed."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):  # no descriptor
            os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
    return typer.Exit(CLOSED_PIPE)


class _LazyGroup(TyperGroup):
    """The top-level group: the commands defined here, plus `HEAVY_COMMANDS` loaded on demand."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        own = super().list_commands(ctx)
        return [*own, *(n for n in HEAVY_COMMANDS if n not in own)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in HEAVY_COMMANDS:
            command = _heavy_group().get_command(ctx, cmd_name)
            if _quiet["on"] and _quiet["undo"] is None:  # it loads the libraries that log
                _quiet["undo"] = quiet_library_logs()
        return command


app = typer.Typer(
    name="seqc",
    cls=_LazyGroup,
    help="Compile .seq sequence-model specs: check, format, inspect.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
_state = {"debug": False}

T = TypeVar("T")


@app.callback()
def _main(
    debug: Annotated[
        bool, typer.Option("--debug", help="Show Python tracebacks with errors.")
    ] = False,
) -> None:
    _state["debug"] = debug


def _run(fn: Callable[[], T], spec: Path | None = None) -> T:
    """Run a command body; turn seqc errors into a message and exit code 2. `spec` is the file
    the command was given, to name when nothing better locates an error."""
    try:
        return fn()
    except typer.Exit:
        raise
    except RecursionError as e:
        from seqc.spec.errors import too_deep

        if _state["debug"]:
            traceback.print_exc()
        _print_error(too_deep(e, str(spec) if spec is not None else None))
        raise typer.Exit(2) from None
    except BrokenPipeError:  # `seqc decode ... | head -1`: the reader has all it wanted
        raise _closed_pipe() from None
    except Exception as e:
        from seqc.spec.errors import SeqcError  # imported here: a verdict hit never loads it

        if _state["debug"]:
            traceback.print_exc()
        if isinstance(e, SeqcError):
            _print_error(e)
            raise typer.Exit(2) from None
        # a bug in seqc, not in the spec (its message may quote the spec: made printable)
        from seqc.spec.printable import printable

        err.print(
            styled(
                ("internal error", "bold red"),
                f": {type(e).__name__}: {printable(str(e), lines=True)}\n"
                "This is a bug in seqc. Run again with --debug for the traceback and report it.",
            )
        )
        raise typer.Exit(3) from None


def _print_error(e: SeqcError) -> None:
    lines = e.render().split("\n")
    head, rest = lines[0], lines[1:]
    loc, _, msg = head.partition(": ")
    err.print(styled((loc, "bold"), ": ", (msg, "bold red")))
    for line in rest:
        style = "cyan" if line.lstrip().startswith(("expected", "found")) else ""
        if line.strip().startswith("|") or ("^" in line and set(line.split("|")[-1]) <= {" ", "^"}):
            style = "bold red"
        if "did you mean" in line or line.strip().startswith("hint:"):
            style = "green"
        err.print(Text(line, style=style))


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
    from seqc.compiler.check_cache import check_file

    shown = _printable_path(file)

    def body() -> None:
        if set_ and experiment is None:
            from seqc.spec.errors import UsageError

            raise UsageError("--set needs -e EXPERIMENT", code="bad-override", path=str(file))
        # an unchanged program that passed before is answered from its verdict, unimported
        summary = check_file(file, experiment, set_ or [])
        out.print(
            styled(
                ("ok", "green"),
                f" {shown}: {summary.files} file(s), "
                f"{summary.layers} layer(s), {summary.tasks} task(s), "
                f"{summary.experiments} experiment(s) checked",
            )
        )

    _run(body, file)


@app.command()
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

    def body() -> int:
        if check_ and write:
            from seqc.spec.errors import UsageError

            raise UsageError("use one of --check and --write", code="bad-flags")
        spec = parse_file(file)
        text = format_spec(spec)
        original = read_spec(file, keep_bom=True)  # bounded, as the parse's read
        if check_:
            if text != original:
                err.print(f"would reformat {shown}")
                return 1
            out.print(f"{shown} is formatted")
            return 0
        if write:
            if text != original:
                _atomic_write(file, text)
                out.print(f"reformatted {shown}")
            return 0
        sys.stdout.write(text)
        return 0

    code = _run(body, file)
    if code:
        raise typer.Exit(code)


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


@app.command("list")
def list_(file: FileArg) -> None:
    """List the experiments of a spec and its imports (the registry)."""

    def body() -> None:
        program = _load(file)
        from rich.table import Table

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
        if not program.experiments:
            out.print(f"{file}: no experiments")
            return
        out.print(table)

    _run(body, file)


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
    """Show a resolved experiment: every value explicit, with its origin on request."""
    from seqc.resolve.experiment import resolve
    from seqc.resolve.values import show_value, to_json

    def body() -> None:
        program = _load(file)
        r = resolve(program, experiment, set_ or [])
        if graph:
            from seqc.compiler.graph_report import print_graph_report, print_joint_report

            if len(r.tasks) > 1:  # the tasks compiled together: shared layers named once
                from seqc.run.session import compile_joint

                joint, multi = compile_joint(file, experiment, set_ or [])
                print_joint_report(out, program, joint, multi, passes=passes)
                return
            for task in r.tasks:
                print_graph_report(out, program, r, task)
                if passes:
                    from seqc.compiler.graph_report import print_pass_report

                    print_pass_report(out, program, r, task)
            return
        if sharding:
            from seqc.compiler.sharding_report import print_sharding_report

            for task in r.tasks:
                print_sharding_report(out, program, r, task)
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
            text = (
                value if isinstance(value, str) and value.endswith("(...)") else show_value(value)
            )
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

    _run(body, file)


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
            out.print(
                styled((f"{len(kinds)} built-in layers", "bold"), " (seqc layers NAME for params)")
            )
            for k in sorted(kinds):
                out.print(styled("  ", (f"{k:<20}", "bold"), f" {kinds[k].doc}"))
            return
        for k in sorted(kinds):
            _print_kind(kinds[k])

    _run(body)


def _print_kind(spec: Any) -> None:
    from seqc.resolve.values import show_value

    sig = ", ".join(spec.positional)
    out.print(styled("\n", (spec.name, "bold"), f"({sig})  ", (spec.namespace, "dim")))
    out.print(f"  {spec.doc}")
    from rich.table import Table

    table = Table(show_header=True, box=None, padding=(0, 2))
    for col in ("param", "type", "default", "description"):
        table.add_column(col)
    for p in spec.params:
        default = Text("required", "red") if p.required else show_value(p.default)
        table.add_row(p.name, str(p.type), default, p.doc)
    if spec.params:
        out.print(table)


@app.command()
def schema() -> None:
    """Print the JSON Schema of the spec IR."""
    from seqc.spec.ir import SpecFile

    sys.stdout.write(json.dumps(SpecFile.model_json_schema(), indent=2) + "\n")


@app.command()
def lsp() -> None:
    """Run the language server over stdio (for an editor's LSP client; see editors/)."""
    from seqc.lsp.server import serve

    serve()


def _guard(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Give a command mounted from another module the same error handling as the ones here."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        spec = kwargs.get("spec") or kwargs.get("file")
        return _run(lambda: fn(*args, **kwargs), spec if isinstance(spec, Path) else None)

    return wrapper


# ------------------------------------------------------------------------------------ native logs

NATIVE_LOG_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "GRPC_VERBOSITY": "ERROR", "GLOG_minloglevel": "2"}
"""Set (unless already set, or `--debug`) before any backend loads: TensorFlow's and XLA's C++
INFO and WARNING lines, gRPC's and glog's chatter stay out of the CLI's output."""

_NATIVE_NOISE = re.compile(
    rb"[IW]\d{4} \d+:\d+:\d+\.\d+ +\d+ [\w.+-]+:\d+\] "  # absl INFO/WARNING (oneDNN, XLA)
    rb"|WARNING: All log messages before absl::InitializeLog\(\) is called"
    rb"|INFO: "  # LiteRT's own INFO lines ("Created TensorFlow Lite XNNPACK delegate")
    rb"|\[Gloo\] Rank \d+ is connected to"  # gloo's note as JAX's CPU collectives connect
    rb"|fully_quantize: \d+, inference_type"  # TFLite's MLIR quantizer says its settings
)
"""Lines that native libraries write to the process's stderr whatever the environment says:
TensorFlow logs oneDNN's notice while its library loads, before it reads TF_CPP_MIN_LOG_LEVEL,
and LiteRT logs at INFO with no setting to stop it. Errors (`E...`, `F...`) pass through."""


_quiet: dict[str, Any] = {"on": False, "undo": None}
"""Whether `quiet_native_logs` holds (no `--debug`), and the undo of `quiet_library_logs`, which
a heavy command adds (the light ones never import `logging`)."""


def quiet_native_logs() -> Callable[[], None]:
    """Keep native libraries' INFO and WARNING lines out of stderr; return the undo.

    The environment handles what reads it; for the rest, file descriptor 2 becomes a pipe whose
    lines a thread passes on to the real stderr unless they match `_NATIVE_NOISE`. Python's
    own `sys.stderr` writes to the real stderr directly (a terminal stays a terminal for the
    progress bar). A native crash may lose its last line on the way: `--debug` turns all of
    this off.
    """
    for key, value in NATIVE_LOG_ENV.items():
        os.environ.setdefault(key, value)
    try:
        sys.stderr.flush()
        real = os.dup(2)
        read_end, write_end = os.pipe()
        os.dup2(write_end, 2)
        os.close(write_end)
    except OSError:  # no stderr to speak of (a closed descriptor): leave it alone
        return lambda: None
    python_stderr = sys.stderr
    sys.stderr = open(  # noqa: SIM115  (lives until the undo)
        os.dup(real), "w", encoding=python_stderr.encoding, errors="backslashreplace", buffering=1
    )

    def pump() -> None:
        pending, broken = b"", False
        while chunk := os.read(read_end, 1 << 16):
            *lines, pending = (pending + chunk).split(b"\n")
            kept = b"".join(line + b"\n" for line in lines if not _NATIVE_NOISE.match(line))
            if len(pending) > 1 << 16:  # no newline in sight: not a log line, pass it on
                kept, pending = kept + pending, b""
            try:
                if kept and not broken:
                    _write_all(real, kept)
            except OSError:  # the reader of stderr went away: keep draining, or writers block
                broken = True
        if pending and not broken:
            with contextlib.suppress(OSError):
                _write_all(real, pending)
        os.close(read_end)

    thread = threading.Thread(target=pump, name="seqc-native-stderr", daemon=True)
    thread.start()

    _quiet["on"] = True

    def undo() -> None:
        if _quiet["undo"] is not None:
            _quiet["undo"]()
        _quiet.update(on=False, undo=None)
        with contextlib.suppress(OSError, ValueError):  # a reader of stderr that went away
            sys.stderr.flush()
        os.dup2(real, 2)  # the pipe's last writer goes: the pump reads to its end and stops
        thread.join(timeout=5)
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.close()
        sys.stderr = python_stderr
        if not thread.is_alive():  # else a child still holds the pipe: the pump needs `real`
            os.close(real)

    return undo


def quiet_library_logs() -> Callable[[], None]:
    """Keep the Python log records of the libraries the backends load, and their Python
    warnings, out of stderr unless they are errors; return the undo.

    Why: `quiet_native_logs` filters what reaches file descriptor 2, but Python's `sys.stderr`
    goes to the real stderr directly, and with it every logging handler. absl adds one to the
    root logger at its first record (`logging.basicConfig`), and orbax and TensorFlow's
    SavedModel code log through absl: `WARNING:absl:...` lines; tensorboardX warns of each NaN
    scalar (`NaN or Inf found in input tensor.`). A handler of ours on the root logger, there
    first, stops that (absl and TensorFlow add none of their own when the root has one) and
    passes on errors, and seqc's own records, in the format absl's would have had."""
    import logging

    def shown(record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR or record.name.split(".")[0] == "seqc"

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(logging.BASIC_FORMAT))
    handler.addFilter(shown)
    root = logging.getLogger()
    root.addHandler(handler)
    logging.captureWarnings(True)  # warnings.warn -> the `py.warnings` logger, filtered so

    def undo() -> None:
        logging.captureWarnings(False)
        root.removeHandler(handler)

    return undo


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


def main() -> None:
    stdout = _identity(1)
    try:
        if "--debug" in sys.argv[1:]:
            app()
            return
        undo = quiet_native_logs()
        try:
            app()
        finally:
            undo()
    except SystemExit as e:
        # A closed pipe met outside seqc's own handlers (typer's and rich's: `--help`, a usage
        # error, a table) exits 1 there, the code `fmt --check` gives for "would reformat".
        if e.code not in (0, None, CLOSED_PIPE) and _output_closed(stdout):
            _closed_pipe()
            raise SystemExit(CLOSED_PIPE) from None
        raise


def _identity(fd: int) -> tuple[int, int] | None:
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _output_closed(stdout: tuple[int, int] | None) -> bool:
    """Whether a write to stdout or stderr met a closed pipe and a library handled it: rich
    puts /dev/null in stdout's place, typer wraps the streams so their flush at exit is quiet."""
    devnull = os.stat(os.devnull)
    now = _identity(1)
    if stdout is not None and now != stdout and now == (devnull.st_dev, devnull.st_ino):
        return True
    return any(type(s).__name__.endswith("PacifyFlushWrapper") for s in (sys.stdout, sys.stderr))


if __name__ == "__main__":
    main()
