"""What the catalogue and the program say about a name at the cursor.

Hover and completion ask the same questions: which kinds a name may be (a built-in of some
namespace, or a user layer), which field or parameter a place in a body or call is, and what
type a value written there must have. The answers come from the registry that `seqc layers`
prints and from the program's declarations; nothing is described twice.
"""

from __future__ import annotations

from collections.abc import Iterator

from seqc.lsp.context import Cursor, Frame
from seqc.resolve.experiment import BLOCKS as EXPERIMENT_BLOCKS  # an experiment's, and `share`
from seqc.resolve.program import Program
from seqc.spec import ir
from seqc.spec.kinds import REGISTRY, KindSpec, ParamSpec
from seqc.spec.types import Type

import seqc.spec.catalogue  # noqa: F401  (fills the registry)  isort: skip


def kinds_named(name: str, namespace: str | None = None) -> list[KindSpec]:
    """Built-in kinds called `name`: in `namespace` when given and found there, else in any."""
    if namespace is not None:
        found = REGISTRY.get(namespace, name)
        if found is not None:
            return [found]
    return [ns[name] for key, ns in REGISTRY.namespaces.items() if key != "block" and name in ns]


def block(name: str) -> KindSpec | None:
    return REGISTRY.get("block", name)


def namespaces(t: Type | None) -> list[str]:
    """The kind namespaces a value of type `t` may be a call of (through unions and lists)."""
    if t is None:
        return []
    if t.name == "kind":
        return [t.choices[0]]
    return [ns for a in t.args for ns in namespaces(a)]


def choices(t: Type | None) -> list[str]:
    """The strings an enum type (or an enum in a union) accepts."""
    if t is None:
        return []
    if t.name == "enum":
        return list(t.choices)
    return [c for a in t.args for c in choices(a)]


def element(t: Type | None) -> Type | None:
    """The item type of a list type (or of the list in a union)."""
    if t is None:
        return None
    if t.name == "list":
        return t.args[0]
    return next((element(a) for a in t.args if element(a) is not None), None)


def body_spec(frames: list[Frame], upto: int) -> tuple[KindSpec | None, tuple[str, ...]]:
    """The block kind whose fields the body of `frames[upto]` holds, and the path prefix of
    its statements within an experiment (`("train",)` inside `train { }`)."""
    f = frames[upto]
    if f.kind in ("input", "task"):
        return block(f.kind), ()
    if f.kind == "experiment":
        return block("experiment"), ()
    if f.kind == "block":
        parent = frames[upto - 1] if upto > 0 else None
        if parent is not None and parent.kind == "experiment":
            return block(f.name), (f.name,)
        return None, ()
    return None, ()


def field(
    frames: list[Frame], upto: int, path: list[str], program: Program | None
) -> tuple[ParamSpec | None, str]:
    """The declared field a statement path names in the body of `frames[upto]`, with the name
    of the block or kind it belongs to."""
    spec, prefix = body_spec(frames, upto)
    full = [*prefix, *path]
    if spec is None:
        return None, ""
    if spec.name == "experiment" or prefix:
        return experiment_field(full, program)
    if len(path) == 1:
        return spec.param(path[0]), spec.name
    return None, ""


def experiment_field(path: list[str], program: Program | None) -> tuple[ParamSpec | None, str]:
    """The field an experiment's dotted path names: its own fields, a block's, or a task's."""
    head = path[0]
    if len(path) == 1:
        exp = block("experiment")
        return (exp.param(head) if exp else None), "experiment"
    if head in EXPERIMENT_BLOCKS:
        spec = block(head)
        return (spec.param(path[1]) if spec and len(path) == 2 else None), head
    if program is not None and head in program.tasks and len(path) == 2:
        spec = block("task")
        return (spec.param(path[1]) if spec else None), "task"
    return None, ""


def expected_type(cur: Cursor, program: Program | None) -> Type | None:
    """The type of the value being written at the cursor, where the catalogue says it."""
    return _expected(cur.frames, len(cur.frames) - 1, program)


def _expected(frames: list[Frame], i: int, program: Program | None) -> Type | None:
    f = frames[i]
    if f.kind == "list":
        return element(_expected(frames, i - 1, program)) if i > 0 else None
    if f.kind == "call":
        p = call_param(f, program)
        return p.type if isinstance(p, ParamSpec) else None
    if f.kind in ("input", "task", "experiment", "block") and f.after_eq and f.stmt:
        p, _ = field(frames, i, f.stmt, program)
        return p.type if p is not None else None
    return None


def call_param(f: Frame, program: Program | None) -> ParamSpec | ir.Param | None:
    """The param of a call frame's callee that the argument being written fills."""
    name = f.keyword
    layer = program.layers.get(f.name) if program is not None else None
    if layer is not None:
        if name is None:
            return layer.params[f.positional] if f.positional < len(layer.params) else None
        return layer.param(name)
    for spec in kinds_named(f.name):
        if name is None:
            if f.positional < len(spec.positional):
                return spec.param(spec.positional[f.positional])
            continue
        p = spec.param(name)
        if p is not None:
            return p
    return None


def user_layers(program: Program | None) -> Iterator[ir.LayerDecl]:
    if program is not None:
        yield from program.layers.values()
