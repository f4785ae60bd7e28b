"""A program: a root .seq file, everything it imports, and an index of their declarations.

Imports are paths relative to the importing file. Every declaration is global across the
program (the registry of experiments is keyed by dotted name), so a name declared twice is an
error that points at both places, whichever files they are in.

Where imports may reach. A spec is text someone may hand you, and `seqc check` on it must not
read (and echo in an error) `/proc/self/environ` or `/etc/shadow`. So an import names a `.seq`
file, and the file it resolves to (symlinks followed) must lie in one of the import roots:

- the root spec's project: the nearest folder at or above the root spec's folder that holds
  `seqc.toml`, `pyproject.toml`, `.git` or `ORIGIN` (what a frozen copy of a spec tree, such as
  a run directory's `spec/`, carries at its top), else the root spec's own folder. So
  `examples/lm/x.seq` may import `../common/transformer.seq` in a repository, and a run
  directory's copy resolves the same imports inside the copy;
- each folder named in the `SEQC_PATH` environment variable (`os.pathsep`-separated): shared
  libraries of layers, configured by whoever runs seqc, not by the spec;
- the examples bundled with this seqc when it runs from a source checkout (`examples/` beside
  the `seqc` package, next to its `pyproject.toml`): seqc's own blocks, which specs written to
  temporary folders (tests, benchmarks) import by absolute path. Only `.seq` files can come
  from there, and they are seqc's own source.

Anything else is a `ResolveError` at the import line that names the path but never reads it,
checked before the file's existence so it does not even tell whether the file is there.
Imports nest at most `MAX_IMPORT_DEPTH` files deep, and an import that is a symlink loop is a
located error, like a missing file.

An editor checks the text in its buffers, not what was last saved: `load_program` takes an
optional overlay of file texts (keyed by resolved path) that wins over the disk for those files,
the root included, and lets an import name an open buffer that was never saved.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from seqc.resolve import prefetch
from seqc.resolve.roots import (  # noqa: F401  re-exported: callers and tests name them here
    BUNDLED_EXAMPLES,
    PROJECT_MARKERS,
    SEQC_PATH,
    import_roots,
    project_root,
)
from seqc.spec import ir
from seqc.spec.errors import FileError, Note, ResolveError, did_you_mean
from seqc.spec.kinds import REGISTRY
from seqc.spec.parser import parse_file, parse_text

# Importing the catalogue fills the registry of built-in kinds.
import seqc.spec.catalogue  # noqa: F401  isort: skip


@dataclass
class Program:
    root: ir.SpecFile
    files: list[ir.SpecFile] = field(default_factory=list)
    paths: list[Path] = field(default_factory=list)
    """The resolved path of each file in `files`, in the same order."""
    inputs: dict[str, ir.InputDecl] = field(default_factory=dict)
    layers: dict[str, ir.LayerDecl] = field(default_factory=dict)
    tasks: dict[str, ir.TaskDecl] = field(default_factory=dict)
    experiments: dict[str, ir.ExperimentDecl] = field(default_factory=dict)
    sweeps: dict[str, ir.SweepDecl] = field(default_factory=dict)
    """Hyperparameter sweeps by registry name (their own namespace: `-s`, not `-e`)."""
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


_KIND_WORDS = {
    "input": "input",
    "layer": "layer",
    "task": "task",
    "experiment": "experiment",
    "sweep": "sweep",
}

_NAMESAKES = {"sweep": "experiment", "experiment": "sweep"}
"""Kinds kept in tables of their own that may still not share a name. Sweeps and experiments
are asked for by different flags (`-s`, `-e`), so the command line could tell them apart, but
a reader could not: a run directory, a log line or `seqc diff` naming `lm.shakespeare.lr` must
mean one thing, and so must the editor's go-to-definition on it."""


MAX_IMPORT_DEPTH = 100
"""How many files deep imports may chain (a.seq imports b.seq imports ...)."""


def load_program(path: str | Path, overlay: Mapping[Path, str] | None = None) -> Program:
    """Parse `path` and its imports (depth first, each file once) and index the declarations.

    `overlay` maps resolved file paths to texts read instead of the files (an editor's unsaved
    buffers); everything else is read from disk as usual."""
    root_path = Path(path)
    overlay = overlay or {}
    text = _overlaid(root_path, overlay)
    root = parse_file(root_path) if text is None else parse_text(text, str(root_path))
    program = Program(root=root)
    seen: set[Path] = set()
    try:
        abspath = root_path.resolve()
    except (OSError, RuntimeError):  # a symlink loop (Python 3.11 raises RuntimeError)
        raise FileError(
            f"{root_path} is a symlink loop", path=str(root_path), code="symlink-loop"
        ) from None
    _visit(root, abspath, program, seen, stack=[], roots=import_roots(abspath), overlay=overlay)
    return program


def _overlaid(path: Path, overlay: Mapping[Path, str]) -> str | None:
    """The overlay's text for `path`, if it has one."""
    if not overlay:
        return None
    try:
        return overlay.get(path.resolve())
    except (OSError, RuntimeError):  # a symlink loop: left to the normal read to report
        return None


def _import_target(imp: ir.Import, importer: Path, roots: list[Path]) -> Path:
    """The resolved file an import names, refused (unread) unless it is a `.seq` file inside
    the import roots; a symlink loop is a located error."""
    try:
        target = (importer.parent / imp.path).resolve()
    except (OSError, RuntimeError):  # Python 3.11 raises RuntimeError for a symlink loop
        raise ResolveError(
            f"import {imp.path} is a symlink loop",
            span=imp.span,
            code="symlink-loop",
            found=imp.path,
            hint="point the link at a .seq file",
        ) from None
    if not any(target.is_relative_to(root) for root in roots):
        raise ResolveError(
            f"import outside the spec's folder tree: {imp.path}",
            span=imp.span,
            code="import-outside",
            expected="a .seq file under " + " or ".join(str(r) for r in roots),
            found=str(target),
            hint="imports resolve inside the root spec's project (the nearest folder above it "
            f"with seqc.toml, pyproject.toml or .git) and the folders in {SEQC_PATH}: add a "
            f"seqc.toml to a folder above both files, or the library's folder to {SEQC_PATH}",
        )
    if target.suffix != ".seq":
        raise ResolveError(
            f"an import names a .seq file, not {target.name}",
            span=imp.span,
            code="import-not-seq",
            expected="a path ending in .seq",
            found=str(target),
        )
    return target


def _visit(
    spec: ir.SpecFile,
    abspath: Path,
    program: Program,
    seen: set[Path],
    stack: list[Path],
    roots: list[Path],
    overlay: Mapping[Path, str],
) -> None:
    seen.add(abspath)
    stack.append(abspath)
    helper = _prefetch(spec, abspath, seen, roots, overlay)
    try:
        _visit_imports(spec, abspath, program, seen, stack, roots, overlay, helper)
    except BaseException:
        if helper is not None:
            helper.cancel()
        raise
    finally:
        if helper is not None:
            helper.wait()
    stack.pop()
    program.files.append(spec)
    program.paths.append(abspath)
    _index(spec, program)


def _prefetch(
    spec: ir.SpecFile,
    abspath: Path,
    seen: set[Path],
    roots: list[Path],
    overlay: Mapping[Path, str],
) -> prefetch.Helper | None:
    """A helper parsing some of the files `spec` imports, when that pays (`prefetch`)."""
    if len(spec.imports) < 2:
        return None
    candidates: list[Path] = []
    for imp in spec.imports:
        try:  # leniently: the loop that follows raises each import's error in its turn
            target = _import_target(imp, abspath, roots)
        except ResolveError:
            continue
        if target not in seen and target not in overlay and target not in candidates:
            candidates.append(target)
    if len(candidates) < 2:
        return None
    return prefetch.start([_display(t) for t in candidates], parse_file)


def _visit_imports(
    spec: ir.SpecFile,
    abspath: Path,
    program: Program,
    seen: set[Path],
    stack: list[Path],
    roots: list[Path],
    overlay: Mapping[Path, str],
    helper: prefetch.Helper | None,
) -> None:
    for imp in spec.imports:
        target = _import_target(imp, abspath, roots)
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
        if len(stack) >= MAX_IMPORT_DEPTH:
            raise ResolveError(
                f"imports nest more than {MAX_IMPORT_DEPTH} files deep",
                span=imp.span,
                code="imports-too-deep",
                expected=f"a chain of at most {MAX_IMPORT_DEPTH} files, each importing the next",
                hint="import the shared files from the root spec instead of through each other",
            )
        text = overlay.get(target)
        # `exists`, not `is_file`: a folder, a pipe or a device named `x.seq` is refused by the
        # read itself (`files.read_spec`), at this import, with what it is
        if text is None and not target.exists():
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
        if text is not None:
            child = parse_text(text, str(_display(target)))
        else:
            shown = _display(target)
            if helper is not None and helper.takes(shown):
                helper.wait()  # its entry is in the parse cache now, unless it failed
            try:
                child = parse_file(shown)
            except FileError as e:
                e.span = imp.span
                raise
        _visit(child, target, program, seen, stack, roots, overlay)


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
        "sweep": program.sweeps,
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
        other = _NAMESAKES.get(decl.decl)
        if other is not None and decl.name in tables[other]:
            first_span = tables[other][decl.name].span
            raise ResolveError(
                f"{decl.decl} `{decl.name}` has the name of {'an' if other[0] == 'e' else 'a'} "
                f"{other}",
                span=decl.span,
                code="duplicate-name",
                notes=[Note(first_span, f"the {other} is declared here")] if first_span else [],
                hint="a name means one thing in run folders and logs: rename one (a sweep is "
                "often named for what it searches, `lm.shakespeare.lr`)",
            )
        if decl.decl == "layer" and REGISTRY.get("layer", decl.name) is not None:
            raise ResolveError(
                f"`{decl.name}` is a built-in layer; a user layer may not shadow it",
                span=decl.span,
                code="shadows-builtin",
                hint=f"rename it, e.g. `My{decl.name}`",
            )
        table[decl.name] = decl
