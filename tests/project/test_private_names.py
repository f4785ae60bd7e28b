"""No module reaches into another's private names.

A leading underscore says "this module's business": when another module needs it, the boundary
is in the wrong place, and the name should be public (said in a docstring) or the code should
move. Reach-ins crept in before (`printer._flat`, `ctx._scoring`, `dec._step`, `GraphBuilder._add`
from the lowerings); this keeps them out.

Three forms are read, lazy imports included: `from seqc.x import _name`; `module._name` or
`Class._name` on a name imported from seqc; and `obj._name` on anything but `self` or `cls`
when no code in the same module defines `_name`. The last is a heuristic over names, so the few
private attributes of third-party objects seqc must set or read are listed with their reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "seqc"

THIRD_PARTY = {
    "_exit": "os._exit: a process that must end now, without unwinding (signal paths)",
    "_callbacks": "lark: the parser binds its tree builder's callbacks (seqc.spec.parser)",
    "_parse_table": "lark: the LALR table the parser checks its callbacks against",
    "_experimental_lower_tensor_list_ops": "TFLiteConverter's flag for recurrent layers",
    "_experimental_calibrate_only": "TFLiteConverter's flag for calibrating without converting",
}
"""Private attributes of other libraries' objects that seqc uses, each with why."""


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _defined_here(tree: ast.AST) -> set[str]:
    """Private names this module defines: functions, classes, assignments, attributes set on
    any object, parameters."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if _private(n)}


def reach_ins(path: Path) -> list[str]:
    """Each reach-in of `path` as "file:line: what"."""
    tree = ast.parse(path.read_text(), str(path))
    own = _defined_here(tree)
    imported: set[str] = set()
    found: list[str] = []
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("seqc"):
            for alias in node.names:
                imported.add(alias.asname or alias.name)
                if _private(alias.name):
                    found.append(f"{where}:{node.lineno}: imports {node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("seqc"):
                    imported.add((alias.asname or alias.name).split(".")[0])
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and _private(node.attr)):
            continue
        value = node.value
        if isinstance(value, ast.Name) and value.id in ("self", "cls"):
            continue
        if (isinstance(value, ast.Name) and value.id in imported) or (
            node.attr not in own and node.attr not in THIRD_PARTY
        ):
            found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_reaches_into_another() -> None:
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) for hit in reach_ins(path)]
    assert not found, "private names used across modules (make them public or move the code):\n" + (
        "\n".join(found)
    )


def test_the_reader_finds_each_form(tmp_path: Path) -> None:
    """Each of the three forms is found, inside a function too; a module's own private
    attribute on another object of its own is not a reach-in."""
    path = tmp_path / "leak.py"
    path.write_text(
        "from seqc.spec.printer import _secret\n"
        "from seqc.compiler import graph\n"
        "from seqc.backends.tf.train import TfModel\n"
        "class Own:\n"
        "    def __init__(self):\n"
        "        self._mine = 1\n"
        "def f(b, other):\n"
        "    graph._hidden()\n"
        "    TfModel._arrays(b)\n"
        "    b._add(1)\n"
        "    return other._mine\n"
    )
    found = [hit.split(": ", 1)[1] for hit in reach_ins(path)]
    assert found == [
        "imports seqc.spec.printer._secret",
        "graph._hidden",
        "TfModel._arrays",
        "b._add",
    ]
