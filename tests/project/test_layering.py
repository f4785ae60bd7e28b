"""The shape of the package: imports flow one way along the pipeline, and the run libraries and
the commands reach backends only through their contract.

spec -> resolve -> compiler -> backends -> run -> serve -> cli, with data beside them depending
on spec and resolve only, and backends skipping resolve (they read the compiler's typed config,
never the resolved spec), and the language server (`lsp`) on the front end and the checks (spec,
resolve, compiler) only: an editor never loads a backend. `seqc.run` (and the server, `seqc.
serve`, which runs artifacts through it) imports `seqc.backends.api` and `seqc.backends.registry`
(and the format-neutral `seqc.backends.weights`), never a backend
package; a run on one backend does not load another backend's code (nor, on JAX, TensorFlow; the
other way round is TensorFlow's own doing: `import tensorflow` imports JAX when it is installed,
for its converter). The command line (`seqc.cli`) is the one stage that prints to a terminal:
no library below it imports typer or rich, and it reaches backends through the registry (and
the contract's types) only.

Within a stage, no two modules import each other, however indirectly: a cycle means a concept
lives on the wrong side (it belongs in a module both sides import, as each backend's `context.py`
and `onnx/errors.py` do), and a lazy import that hides one is found all the same.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_specs import LM_SPEC, lm_corpus

from seqc.backends import registry

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "seqc"

ALLOWED = {
    "spec": {"spec"},
    "resolve": {"spec", "resolve"},
    "data": {"spec", "resolve", "data"},
    "compiler": {"spec", "resolve", "compiler"},
    "backends": {"spec", "compiler", "backends"},
    "run": {"spec", "resolve", "compiler", "backends", "data", "run"},
    "serve": {"spec", "resolve", "compiler", "backends", "data", "run", "serve"},
    "lsp": {"spec", "resolve", "compiler", "lsp"},
    "cli": {"spec", "resolve", "compiler", "backends", "data", "run", "serve", "lsp", "cli"},
}
"""Which stages each stage may import (the command line, `seqc/cli/`, all of them)."""

CONTRACT = {"api", "registry", "weights"}
"""The modules of `seqc.backends` that `seqc.run` may import."""

CLI_CONTRACT = {"api", "registry"}
"""The modules of `seqc.backends` that `seqc.cli` may import: a command names a backend by its
name and runs it through the library that drives it."""

LIBRARIES = ("spec", "resolve", "compiler", "backends", "data", "run", "serve")
"""The stages that print through their caller (`seqc.run.report.Reporter`, or plain data the
command line lays out), never to a terminal of their own."""

TERMINAL = {"typer", "click", "rich"}
"""The command-line and terminal libraries only `seqc.cli` imports."""

KNOWN_CYCLES: set[tuple[str, ...]] = set()
"""Import cycles that exist and are being removed, each as `_cycles` gives it. A new cycle fails
`test_no_import_cycles`, and so does one listed here that is gone (delete its line)."""


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every `seqc...` module a file imports, at any depth (lazy imports count)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("seqc")]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("seqc"):
            found.append((node.lineno, str(node.module)))
            # `from seqc.backends import jax` names a module too
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return found


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p.parent != PACKAGE)


def _import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Each module of `package` -> the modules of `package` it imports, at any depth (lazy
    imports count), relative imports resolved. `from p import n` names `p` and, where it is a
    module, `p.n`. A module's own packages are left out: they are initialised before it runs,
    so naming one closes no cycle."""
    files = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in files.items():
        own_package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        named: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                named |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(node, own_package)
                named |= {base} | {f"{base}.{a.name}" for a in node.names}
        graph[name] = {
            m for m in named if m in files and m != name and not name.startswith(m + ".")
        }
    return graph


def _absolute(node: ast.ImportFrom, package: str) -> str:
    """The module a `from ... import` reads, a relative one (`from ..ops import x`) resolved
    against the importing module's package."""
    if not node.level:
        return node.module or ""
    parts = package.split(".")
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join([*parts, *([node.module] if node.module else [])])


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def _cycles(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """Every elementary import cycle, once each: its modules in import order, from the least
    name. Searched only among the modules that reach back to the start (its strongly connected
    component), so an acyclic package costs one reachability walk per module."""
    reach = {m: _reachable(graph, m) for m in graph}
    cycles = set()
    for start in sorted(graph):
        knot = {m for m in reach[start] if m > start and start in reach[m]}
        paths = [(start,)]
        while paths:
            path = paths.pop()
            for nxt in graph[path[-1]]:
                if nxt == start:
                    cycles.add(path)
                elif nxt in knot and nxt not in path:
                    paths.append((*path, nxt))
    return cycles


def _render(cycle: tuple[str, ...]) -> str:
    return " -> ".join([*cycle, cycle[0]])


def test_imports_flow_one_way() -> None:
    wrong = []
    for path in _modules():
        stage = path.relative_to(PACKAGE).parts[0]
        for line, module in _imports(path):
            parts = module.split(".")
            target = parts[1] if len(parts) > 1 else ""
            if target in ALLOWED and target not in ALLOWED[stage]:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not wrong, "\n".join(wrong)


def test_run_talks_to_backends_through_their_contract() -> None:
    """`seqc.run`, and the server that runs artifacts through it (`seqc.serve`)."""
    wrong = []
    paths = [*(PACKAGE / "run").rglob("*.py"), *(PACKAGE / "serve").rglob("*.py")]
    for path in sorted(paths):
        for line, module in _imports(path):
            parts = module.split(".")
            if parts[:2] == ["seqc", "backends"] and len(parts) > 2 and parts[2] not in CONTRACT:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not wrong, "\n".join(wrong)


def _third_party(path: Path) -> list[tuple[int, str]]:
    """Every top-level package other than seqc a file imports, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name.split(".")[0]) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
    return [(line, name) for line, name in found if name != "seqc"]


def test_libraries_import_no_terminal_library() -> None:
    """`seqc.run` and the stages before it print through the `Reporter` their caller supplies
    (or return plain data, as `seqc.compiler.graph_report` does): no module of theirs imports
    typer, click or rich, lazily or not."""
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for stage in LIBRARIES
        for path in sorted((PACKAGE / stage).rglob("*.py"))
        for line, name in _third_party(path)
        if name in TERMINAL
    ]
    assert not wrong, "\n".join(wrong)


def test_the_command_line_reaches_backends_through_the_registry() -> None:
    """A command never imports a backend package (`seqc.backends.jax`, `tf`, `onnx`,
    `tflite`): it names a backend, and `seqc.backends.registry` finds it."""
    wrong = []
    for path in sorted((PACKAGE / "cli").rglob("*.py")):
        for line, module in _imports(path):
            parts = module.split(".")
            if (
                parts[:2] == ["seqc", "backends"]
                and len(parts) > 2
                and parts[2] not in CLI_CONTRACT
            ):
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not wrong, "\n".join(wrong)


def test_backends_never_read_the_resolved_spec() -> None:
    """Configuration reaches a backend typed (`seqc.compiler.config`: `TrainConfig`,
    `DecodeConfig`), built once by `compile_task`: no module under `seqc/backends` imports
    `seqc.resolve`, lazily or not, so none indexes the resolved dict by string or restates a
    default the catalogue declares."""
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in sorted((PACKAGE / "backends").rglob("*.py"))
        for line, module in _imports(path)
        if module == "seqc.resolve" or module.startswith("seqc.resolve.")
    ]
    assert not wrong, "\n".join(wrong)


def test_the_checker_catches_a_leak(tmp_path: Path) -> None:
    """The tests above read lazy imports too: a leak inside a function is found."""
    leak = tmp_path / "leak.py"
    leak.write_text("def f():\n    from seqc.backends.jax.train import JaxModel\n")
    assert (2, "seqc.backends.jax.train") in _imports(leak)


def test_no_import_cycles() -> None:
    found = _cycles(_import_graph())
    new = sorted(found - KNOWN_CYCLES)
    assert not new, "import cycles (move what both sides need into a module of its own):\n" + (
        "\n".join(_render(c) for c in new)
    )
    gone = sorted(KNOWN_CYCLES - found)
    assert not gone, "known cycles that are gone; delete them from KNOWN_CYCLES:\n" + (
        "\n".join(_render(c) for c in gone)
    )


def test_the_cycle_finder_reads_relative_and_lazy_imports(tmp_path: Path) -> None:
    """A cycle closed by a relative import inside a function is found, by its modules."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "table.py").write_text("from pkg.sub.walk import run\n")
    (pkg / "sub" / "walk.py").write_text("def run():\n    from ..table import x\n")
    (pkg / "sub" / "leaf.py").write_text("from . import walk\nfrom .. import table\n")
    graph = _import_graph(pkg)
    assert graph["pkg.sub.leaf"] == {"pkg.sub.walk", "pkg.table"}
    assert _cycles(graph) == {("pkg.sub.walk", "pkg.table")}
    assert _render(("pkg.sub.walk", "pkg.table")) == "pkg.sub.walk -> pkg.table -> pkg.sub.walk"


@pytest.mark.parametrize("name", sorted(registry.BACKENDS))
def test_every_registered_backend_implements_the_contract(name: str) -> None:
    backend = registry.backend(name)
    assert backend.name == name and backend.title == registry.title(name)
    for method in ("model", "checkpoints", "wrote", "read_weights", "write_weights", "run"):
        assert callable(getattr(backend, method)), method
    assert callable(backend.step_functions)
    assert isinstance(backend.places_ops, bool)


@pytest.mark.parametrize("name", sorted(registry.FORMATS))
def test_every_registered_format_implements_the_contract(name: str) -> None:
    fmt = registry.artifact_format(name)
    assert fmt.name == name and fmt.quantize[0] == "none" and fmt.model_files
    for method in ("build", "runtime", "stamp"):
        assert callable(getattr(fmt, method)), method


PROBE = r"""
import json, sys
from typer.testing import CliRunner
from seqc.cli import app
spec, run, cache, backend = sys.argv[1:5]
args = ["train", spec, "-e", "tiny", "--run-dir", run, "--cache-dir", cache, "--no-progress",
        "--backend", backend, "--set", "train.steps=2"]
result = CliRunner().invoke(app, args)
loaded = sorted(m for m in sys.modules if m.startswith(("seqc", "tensorflow")))
print(json.dumps({"code": result.exit_code, "output": result.output[-2000:], "modules": loaded}))
"""


@pytest.mark.parametrize(
    ("backend", "others"),
    [("tf", ["seqc.backends.jax."]), ("jax", ["seqc.backends.tf.", "tensorflow"])],
)
def test_a_run_loads_only_its_own_backend(tmp_path: Path, backend: str, others: list) -> None:
    common = (ROOT / "examples" / "common" / "transformer.seq").as_posix()
    spec = tmp_path / "lm.seq"
    spec.write_text(LM_SPEC.format(common=common))
    lm_corpus(tmp_path)
    args = [str(spec), str(tmp_path / "run"), str(tmp_path / "cache"), backend]
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["code"] == 0, out["output"]
    loaded = [m for m in out["modules"] if m.startswith(tuple(others)) or m in others]
    assert not loaded, f"a {backend} run imported {loaded}"
    assert f"seqc.backends.{backend}.train" in out["modules"]
