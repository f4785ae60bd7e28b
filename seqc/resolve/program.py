"""A program: a root .seq file, everything it imports, and an index of their declarations.

Imports are paths relative to the importing file. Every declaration is global across the
program (the registry of experiments is keyed by dotted name), so a name declared twice is an
error that points at both places, whichever files they are in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from seqc.spec import ir
from seqc.spec.errors import FileError, Note, ResolveError, did_you_mean
from seqc.spec.kinds import REGISTRY
from seqc.spec.parser import parse_file

# Importing the catalogue fills the registry of built-in kinds.
import seqc.spec.catalogue  # noqa: F401  isort: skip


@dataclass
class Program:
    root: ir.SpecFile
    files: list[ir.SpecFile] = field(default_factory=list)
    inputs: dict[str, ir.InputDecl] = field(default_factory=dict)
    layers: dict[str, ir.LayerDecl] = field(default_factory=dict)
    tasks: dict[str, ir.TaskDecl] = field(default_factory=dict)
    experiments: dict[str, ir.ExperimentDecl] = field(default_factory=dict)
    layers_checked: bool = False
    instances: dict = field(default_factory=dict)
    """Layer instance trees already built, shared between experiments (see `instantiate`)."""

    def experiment(self, name: str, span: ir.Span | None = None) -> ir.ExperimentDecl:
        """Look an experiment up by registry name, with a "did you mean" when it is missing."""
        found = self.experiments.get(name)
        if found is None:
            names = sorted(self.experiments)
            listing = ", ".join(names) if names else "(none declared)"
            raise ResolveError(
                f"no experiment named `{name}`",
                span=span,
                path=self.root.path,
                code="unknown-experiment",
                expected=f"one of {listing}",
                found=f"`{name}`",
                suggestion=did_you_mean(name, names),
                hint="`seqc list FILE` shows the registry",
            )
        return found


_KIND_WORDS = {"input": "input", "layer": "layer", "task": "task", "experiment": "experiment"}


def load_program(path: str | Path) -> Program:
    """Parse `path` and its imports (depth first, each file once) and index the declarations."""
    root_path = Path(path)
    root = parse_file(root_path)
    program = Program(root=root)
    seen: set[Path] = set()
    _visit(root, root_path.resolve(), program, seen, stack=[])
    return program


def _visit(
    spec: ir.SpecFile, abspath: Path, program: Program, seen: set[Path], stack: list[Path]
) -> None:
    seen.add(abspath)
    stack.append(abspath)
    for imp in spec.imports:
        target = (abspath.parent / imp.path).resolve()
        if target in stack:
            chain = [*stack[stack.index(target) :], target]
            raise ResolveError(
                "import cycle",
                span=imp.span,
                code="import-cycle",
                found=" -> ".join(p.name for p in chain),
                hint="move the shared declarations to a file that imports neither",
            )
        if target in seen:
            continue
        if not target.is_file():
            siblings = (
                [p.name for p in target.parent.glob("*.seq")] if target.parent.is_dir() else []
            )
            raise ResolveError(
                f"imported file not found: {imp.path}",
                span=imp.span,
                code="import-not-found",
                found=str(target),
                suggestion=did_you_mean(Path(imp.path).name, siblings),
                hint="import paths are relative to the importing file",
            )
        try:
            child = parse_file(_display(target))
        except FileError as e:
            e.span = imp.span
            raise
        _visit(child, target, program, seen, stack)
    stack.pop()
    program.files.append(spec)
    _index(spec, program)


def _display(path: Path) -> Path:
    """A path as users see it in messages: relative to the working directory when inside it."""
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


def _index(spec: ir.SpecFile, program: Program) -> None:
    tables: dict[str, dict] = {
        "input": program.inputs,
        "layer": program.layers,
        "task": program.tasks,
        "experiment": program.experiments,
    }
    for decl in spec.decls:
        table = tables[decl.decl]
        first = table.get(decl.name)
        if first is not None:
            raise ResolveError(
                f"{_KIND_WORDS[decl.decl]} `{decl.name}` is declared twice",
                span=decl.span,
                code="duplicate-name",
                notes=[Note(first.span, "first declared here")],
                hint="rename one of them",
            )
        if decl.decl == "layer" and REGISTRY.get("layer", decl.name) is not None:
            raise ResolveError(
                f"`{decl.name}` is a built-in layer; a user layer may not shadow it",
                span=decl.span,
                code="shadows-builtin",
                hint=f"rename it, e.g. `My{decl.name}`",
            )
        table[decl.name] = decl
