"""Resolution: from a program and an experiment name to one frozen, fully explicit config.

Values are applied in this order, later ones winning: the catalogue's defaults, the root of the
`extends` chain down to the experiment itself (statements in source order), then `--set`
overrides from the command line. Every value remembers where it was set (its provenance).

Tasks are materialized last, so an override of a task's input (`lm.input.tokenizer.vocab_size`)
is seen by a model argument that refers to it (`vocab = input.vocab_size`), and a model param
whose default is computed from another (`ff: int = 4 * d`) follows an override of that param.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from seqc.resolve.conform import Context, conform
from seqc.resolve.layers.check import check_layers
from seqc.resolve.layers.instance import LayerInstance
from seqc.resolve.program import Program
from seqc.resolve.provenance import DEFAULT, Origin
from seqc.resolve.raw import RawName, evaluate
from seqc.resolve.setting import block_spec, default_values
from seqc.resolve.shares import read_shares
from seqc.resolve.statements import Stmt, experiment_statements, parse_override
from seqc.resolve.tasks import TaskResolver
from seqc.resolve.values import CallValue, freeze
from seqc.spec import ir
from seqc.spec.errors import CheckError, ResolveError, did_you_mean, remember_source
from seqc.spec.kinds import KindSpec

BLOCKS = ("train", "distribution", "export", "compile")
SHARE = "share"
"""The experiment's block of shared layers (`seqc.resolve.shares`)."""


class ResolvedExperiment(BaseModel):
    """An experiment with every value explicit, frozen. `config` is keyed by dotted path roots:
    experiment fields, `train`, `distribution`, `export`, and one entry per task."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    file: str
    chain: tuple[str, ...]
    tasks: tuple[str, ...]
    config: Any
    provenance: Any
    models: Any

    def get(self, path: str) -> Any:
        node: Any = self.config
        for part in path.split("."):
            if isinstance(node, CallValue):
                node = node.args[part]
            elif isinstance(node, dict):
                node = node[part]
            else:
                node = node[int(part)]
        return node

    def origin(self, path: str) -> Origin:
        parts = path.split(".")
        for n in range(len(parts), 0, -1):
            found = self.provenance.get(".".join(parts[:n]))
            if found is not None:
                return found
        return DEFAULT

    def span(self, path: str) -> ir.Span | None:
        """The spec line that set `path` (or the nearest enclosing value); None for defaults
        and `--set` overrides. Errors found after resolution point here."""
        return self.origin(path).span

    def leaves(self) -> list[tuple[str, Any]]:
        """Every leaf value with its dotted path, in a stable order."""
        out: list[tuple[str, Any]] = []

        def walk(prefix: str, node: Any) -> None:
            if isinstance(node, CallValue):
                out.append((f"{prefix}", f"{node.kind}(...)"))
                for k, v in node.args.items():
                    walk(f"{prefix}.{k}", v)
            elif isinstance(node, dict) and node and all(isinstance(k, str) for k in node):
                for k, v in node.items():
                    walk(f"{prefix}.{k}" if prefix else k, v)
            else:
                out.append((prefix, node))

        walk("", self.config)
        return out


class Resolver(TaskResolver):
    """Resolves the experiments of one program: the experiment level here, a task's in
    `TaskResolver` (`seqc.resolve.tasks`, with its input and model), values set at a path and
    their provenance in `Setter` (`seqc.resolve.setting`)."""

    def resolve(self, name: str, overrides: list[str]) -> ResolvedExperiment:
        """Experiment `name` with `--set` `overrides` applied last."""
        decl = self.program.experiment(name)
        chain, stmts = experiment_statements(self.program, decl)
        stmts += [parse_override(o, i + 1) for i, o in enumerate(overrides)]
        remember_source("<command line>", "\n".join(f"--set {o}" for o in overrides))
        exp_spec = block_spec("experiment")
        config: dict[str, Any] = {}
        for pname, value in default_values(exp_spec).items():
            config[pname] = value
            self.prov[pname] = DEFAULT
        for block in BLOCKS:
            config[block] = self.defaults(block_spec(block), block)
        tasks_stmt = None
        task_stmts: list[Stmt] = []
        share_stmts: list[Stmt] = []
        for st in stmts:
            head = st.path[0]
            if head == "tasks":
                tasks_stmt = st
            elif head == "share":
                share_stmts.append(st)
            elif head in BLOCKS:
                self.apply_block(config, st)
            elif head in exp_spec.param_names:
                self._check_leaf(st, 1)
                p = exp_spec.param(head)
                assert p is not None
                config[head] = self._conform(st, p.type, Context(bare_strings=st.bare_strings))
                self.prov[head] = st.origin
            else:
                task_stmts.append(st)
        if tasks_stmt is None:
            raise ResolveError(
                f"experiment `{name}` does not say which tasks it trains",
                span=decl.span,
                code="missing-tasks",
                hint="add `tasks = [task_name]`",
            )
        task_names = self._task_names(tasks_stmt)
        config["tasks"] = task_names
        self.prov["tasks"] = tasks_stmt.origin
        for st in task_stmts:
            if st.path[0] not in task_names:
                self._unknown_root(st, task_names, exp_spec)
        models: dict[str, LayerInstance] = {}
        for t in task_names:
            config[t], models[t] = self.resolve_task(t, [s for s in task_stmts if s.path[0] == t])
        shares = read_shares([(s.path, s.value, s.span) for s in share_stmts], task_names, models)
        config["share"] = {name: [str(u) for u in uses] for name, uses in shares.items()}
        for name, uses in shares.items():
            origin = next(s.origin for s in share_stmts if s.path[1:] == (name,))
            self.prov[f"share.{name}"] = origin
            for i, u in enumerate(uses):
                self.prov[f"share.{name}.{i}"] = Origin(kind="spec", where=str(u.span), span=u.span)
        return ResolvedExperiment(
            name=decl.name,
            file=decl.span.file if decl.span else self.program.root.path,
            chain=tuple(e.name for e in chain),
            tasks=tuple(task_names),
            config=freeze(config),
            provenance=freeze(self.prov),
            models=freeze(models),
        )

    def _unknown_root(self, st: Stmt, tasks: list[str], exp_spec: KindSpec) -> None:
        head = st.path[0]
        known = [*exp_spec.param_names, *BLOCKS, SHARE, *tasks]
        if head in self.program.tasks:
            raise ResolveError(
                f"task `{head}` is not one of this experiment's tasks",
                span=st.span,
                code="unknown-task",
                expected=", ".join(tasks),
                found=f"`{head}`",
                hint="add it to `tasks = [...]` to train it here",
            )
        raise ResolveError(
            f"`{head}` is not a field, block or task of this experiment",
            span=st.span,
            code="unknown-field",
            expected=f"one of {', '.join(known)}",
            found=f"`{'.'.join(st.path)}`",
            suggestion=did_you_mean(head, known),
        )

    def _task_names(self, st: Stmt) -> list[str]:
        assert st.value is not None
        self._check_leaf(st, 1)
        raw = evaluate(st.value)
        items = raw.value if isinstance(raw.value, list) else None
        if not items:
            raise CheckError(
                "`tasks` is a non-empty list of task names",
                span=st.span,
                code="wrong-type",
                expected="e.g. tasks = [lm]",
                found=raw.describe(),
            )
        names: list[str] = []
        for item in items:
            name = item.value.id if isinstance(item.value, RawName) else item.value
            if not isinstance(name, str) or name not in self.program.tasks:
                raise CheckError(
                    "unknown task" + (f" `{name}`" if isinstance(name, str) else ""),
                    span=item.span,
                    code="unknown-task",
                    expected=f"one of {', '.join(sorted(self.program.tasks)) or '(none)'}",
                    found=item.describe(),
                    suggestion=did_you_mean(name, self.program.tasks)
                    if isinstance(name, str)
                    else None,
                )
            if name in names:
                raise CheckError(
                    f"task `{name}` is listed twice", span=item.span, code="duplicate-task"
                )
            if name in (*BLOCKS, SHARE, *block_spec("experiment").param_names):
                raise CheckError(
                    f"task `{name}` has the name of an experiment field; rename the task",
                    span=item.span,
                    code="reserved-name",
                )
            names.append(name)
        return names

    def _check_leaf(self, st: Stmt, depth: int) -> None:
        if len(st.path) > depth:
            raise ResolveError(
                f"`{'.'.join(st.path[:depth])}` has no fields",
                span=st.span,
                code="unknown-field",
                found=f"`{'.'.join(st.path)}`",
            )

    def _conform(self, st: Stmt, type_: Any, ctx: Context) -> Any:
        assert st.value is not None
        return conform(evaluate(st.value), type_, ctx, f"`{'.'.join(st.path)}`")


def resolve(
    program: Program,
    name: str,
    overrides: list[str] | None = None,
    symbols: dict[str, int] | None = None,
) -> ResolvedExperiment:
    """Resolve experiment `name` of `program`, applying `--set` overrides last. `symbols` gives
    data-dependent values once the data is read (a character vocabulary's size)."""
    check_layers(program)
    return Resolver(program, symbols).resolve(name, list(overrides or []))
