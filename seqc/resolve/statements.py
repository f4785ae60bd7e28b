"""The statements an experiment applies, in order: `field = value` lines and `--set` overrides.

An experiment's own body is read after its parents' (`extends`), root first, and `--set`
overrides come last, so later statements win. Each statement keeps the span of the line that
wrote it and its `Origin`, for errors and provenance; a task's or an input's body is read the
same way, under the task's or input's name.
"""

from __future__ import annotations

from dataclasses import dataclass

from seqc.resolve.program import Program
from seqc.resolve.provenance import DEFAULT, Origin
from seqc.spec import ir
from seqc.spec.errors import ResolveError, UsageError, did_you_mean, remember_source
from seqc.spec.parser import parse_expr

MAX_EXTENDS_DEPTH = 100
"""How many experiments an `extends` chain may hold, the experiment itself included.

`seqc check` resolves every experiment, each through its whole chain, so a chain thousands long
(a generated spec gone wrong) costs the square of its length: minutes, not an error. 100 is far
beyond any hand-written chain, as `MAX_IMPORT_DEPTH` is for imports.
"""


@dataclass
class Stmt:
    """One assignment to apply: a path, a value expression, and where it came from."""

    path: tuple[str, ...]
    value: ir.Expr | None
    span: ir.Span | None
    origin: Origin
    call: ir.Call | None = None  # a bare call in `export { }`
    bare_strings: bool = False


def parse_override(text: str, line: int = 1) -> Stmt:
    """`path=value` from the command line, e.g. `lm.model.d=128`; the `line`th `--set`."""
    if "=" not in text:
        raise UsageError(
            f"--set needs path=value, got `{text}`",
            code="bad-override",
            expected="path=value, e.g. --set train.steps=200",
            found=text,
        )
    path, value = text.split("=", 1)
    parts = tuple(p.strip() for p in path.strip().split("."))
    if not all(p.isidentifier() for p in parts):
        raise UsageError(
            f"--set path `{path}` is not a dotted name",
            code="bad-override",
            expected="a dotted path such as lm.model.d",
            found=path,
        )
    # Parse the value in place, so a caret under it lines up with the whole `--set` argument;
    # the command line reads as a source with the Nth `--set` on line N.
    prefix = f"--set {path}="
    source = prefix + value
    above = "\n" * (line - 1)
    padded = above + " " * len(prefix) + (value if value.strip() else '""')
    try:
        expr = parse_expr(padded, "<command line>")
    finally:  # a syntax error in the value renders the real argument, not the padding
        remember_source("<command line>", above + source)
    origin = Origin(kind="override", where=f"--set {text}")
    # The statement spans `path=value`, as an assignment in a spec spans the whole line, so an
    # unknown field is underlined where it was written; type errors still point at the value.
    span = ir.Span(
        file="<command line>",
        line=line,
        col=len("--set ") + 1,
        end_line=line,
        end_col=len(source) + 1,
    )
    return Stmt(parts, expr, span, origin, bare_strings=True)


def experiment_statements(
    program: Program, decl: ir.ExperimentDecl
) -> tuple[list[ir.ExperimentDecl], list[Stmt]]:
    """The experiment's `extends` chain, itself first, and its statements, root first."""
    chain: list[ir.ExperimentDecl] = [decl]
    seen = {decl.name}  # `parent in chain` compared whole pydantic nodes: cubic in the chain
    while chain[-1].extends is not None:
        current = chain[-1]
        parent = program.experiments.get(current.extends)
        if parent is None:
            raise ResolveError(
                f"`{current.name}` extends `{current.extends}`, which is not declared",
                span=current.extends_span,
                code="unknown-parent",
                suggestion=did_you_mean(current.extends, sorted(program.experiments)),
            )
        if parent.name in seen:
            start = next(i for i, e in enumerate(chain) if e.name == parent.name)
            loop = " -> ".join(e.name for e in [*chain[start:], parent])
            raise ResolveError(
                "experiments extend each other in a cycle",
                span=current.extends_span,
                code="extends-cycle",
                found=loop,
            )
        if len(chain) >= MAX_EXTENDS_DEPTH:
            raise ResolveError(
                f"`{decl.name}` extends a chain of more than {MAX_EXTENDS_DEPTH} experiments",
                span=decl.extends_span,
                code="extends-too-deep",
                expected=f"a chain of at most {MAX_EXTENDS_DEPTH} experiments",
                found=f"{decl.name} -> {chain[1].name} -> ... -> {parent.name}: "
                f"{len(chain) + 1} experiments so far",
                hint="let the variants extend a common parent rather than each one the one before",
            )
        chain.append(parent)
        seen.add(parent.name)
    stmts: list[Stmt] = []
    for exp in reversed(chain):
        stmts.extend(_body_statements(exp.body, ()))
    return chain, stmts


def _body_statements(body: ir.Body, prefix: tuple[str, ...]) -> list[Stmt]:
    """The statements of an experiment body; a block (`train { }`) prefixes its own."""
    out: list[Stmt] = []
    for item in body.items:
        where = Origin(kind="spec", where=str(item.span), span=item.span) if item.span else DEFAULT
        if isinstance(item, ir.Assign):
            out.append(Stmt(prefix + item.path, item.value, item.span, where))
        elif isinstance(item, ir.Block):
            if prefix:
                raise ResolveError(
                    f"blocks do not nest: `{item.name} {{ }}` inside `{prefix[0]}`",
                    span=item.span,
                    code="nested-block",
                    hint=f"write `{item.name}.field = value` instead",
                )
            out.extend(_body_statements(item.body, (item.name,)))
        else:
            if prefix != ("export",):
                raise ResolveError(
                    "a bare call is only allowed in an `export { }` block",
                    span=item.span,
                    code="bare-call",
                    hint="assign it to a field: `field = call(...)`",
                )
            out.append(Stmt(prefix, None, item.span, where, call=item.call))
    return out


LIST_BLOCKS = {"input": frozenset({"augment"})}
"""The fields of a task's or an input's body that may be written as a block of bare calls, one
a line: `augment { speed([0.9, 1.1]) noise([10, 30], p = 0.5) }` is `augment = [speed(...),
noise(...)]`. Why a block: a list of several calls with their arguments reads better one call a
line, as `export { }` does, and each line's errors point at that line."""


def body_assignments(body: ir.Body, head: tuple[str, ...], what: str) -> list[Stmt]:
    """The `field = value` lines of a task or input body as statements under `head` (and its
    list blocks, `LIST_BLOCKS`, as the assignment of their calls' list)."""
    out = []
    blocks = LIST_BLOCKS.get(what, frozenset())
    for item in body.items:
        origin = Origin(kind="spec", where=str(item.span), span=item.span)
        if isinstance(item, ir.Block) and item.name in blocks:
            out.append(Stmt((*head, item.name), _calls_list(item), item.span, origin))
            continue
        if not isinstance(item, ir.Assign):
            article = "an" if what[0] in "aeiou" else "a"
            listed = "".join(f" and `{name} {{ }}` blocks of calls" for name in sorted(blocks))
            raise ResolveError(
                f"{article} {what} body holds `field = value` lines{listed or ' only'}",
                span=item.span,
                code=f"bad-{what}-item",
            )
        out.append(Stmt((*head, *item.path), item.value, item.span, origin))
    return out


def _calls_list(block: ir.Block) -> ir.ListExpr:
    """A list block's calls as the list expression it stands for."""
    calls = []
    for item in block.body.items:
        if not isinstance(item, ir.CallStmt):
            raise ResolveError(
                f"an `{block.name} {{ }}` block holds calls, one a line",
                span=item.span,
                code="list-block-item",
                expected="a call such as `speed([0.9, 1.0, 1.1])` or `noise([10, 30], p = 0.5)`",
                hint=f"write the whole list as `{block.name} = [...]`, or each item as a call",
            )
        calls.append(item.call)
    return ir.ListExpr(items=tuple(calls), span=block.span)
