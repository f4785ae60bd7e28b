"""Resolution: from a program and an experiment name to one frozen, fully explicit config.

Values are applied in this order, later ones winning: the catalogue's defaults, the root of the
`extends` chain down to the experiment itself (statements in source order), then `--set`
overrides from the command line. Every value remembers where it was set (its provenance).

Tasks are materialized last, so an override of a task's input (`lm.input.tokenizer.vocab_size`)
is seen by a model argument that refers to it (`vocab = input.vocab_size`), and a model param
whose default is computed from another (`ff: int = 4 * d`) follows an override of that param.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from seqc.resolve.layers import (
    LayerInstance,
    bind_user_layer_spans,
    check_layers,
    instantiate,
    layer_context,
    layer_kind_spec,
)
from seqc.resolve.program import Program
from seqc.resolve.shares import read_shares
from seqc.resolve.values import (
    CallValue,
    Context,
    Raw,
    RawCall,
    RawName,
    Symbol,
    check_relations,
    conform,
    evaluate,
    freeze,
    from_python,
    show_value,
)
from seqc.spec import ir
from seqc.spec.errors import (
    CheckError,
    Note,
    ResolveError,
    UsageError,
    did_you_mean,
    remember_source,
)
from seqc.spec.kinds import REGISTRY, KindSpec
from seqc.spec.parser import parse_expr

BLOCKS = ("train", "distribution", "export", "compile")
SHARE = "share"
"""The experiment's block of shared layers (`seqc.resolve.shares`)."""

MAX_EXTENDS_DEPTH = 100
"""How many experiments an `extends` chain may hold, the experiment itself included.

`seqc check` resolves every experiment, each through its whole chain, so a chain thousands long
(a generated spec gone wrong) costs the square of its length: minutes, not an error. 100 is far
beyond any hand-written chain, as `MAX_IMPORT_DEPTH` is for imports.
"""


class Origin(BaseModel):
    """Where a resolved value was set: a catalogue default, a spec line, or a `--set`."""

    model_config = ConfigDict(frozen=True)

    kind: str
    where: str = ""
    span: ir.Span | None = None
    """The line that set it (spec values), for errors found after resolution."""

    def __str__(self) -> str:
        return "default" if self.kind == "default" else self.where


DEFAULT = Origin(kind="default")


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


@dataclass
class _Stmt:
    """One assignment to apply: a path, a value expression, and where it came from."""

    path: tuple[str, ...]
    value: ir.Expr | None
    span: ir.Span | None
    origin: Origin
    call: ir.Call | None = None  # a bare call in `export { }`
    bare_strings: bool = False


def parse_override(text: str, line: int = 1) -> _Stmt:
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
    return _Stmt(parts, expr, span, origin, bare_strings=True)


_DEFAULTS: dict[int, tuple[KindSpec, dict[str, Any]]] = {}


def _default_values(spec: KindSpec) -> dict[str, Any]:
    """The conformed defaults of a kind's optional params, as a new (mutable) dict.

    Every experiment starts from the same defaults of each block: they are conformed once per
    spec and copied (`_fresh`), since a resolve writes into calls (`train.optimizer.lr = ...`).
    """
    hit = _DEFAULTS.get(id(spec))
    if hit is None or hit[0] is not spec:
        values = {
            p.name: conform(from_python(p.default), p.type, Context())
            for p in spec.params
            if not p.required
        }
        hit = _DEFAULTS[id(spec)] = (spec, values)
    return {k: _fresh(v) for k, v in hit[1].items()}


def _fresh(value: Any) -> Any:
    """A copy of a resolved value whose calls, dicts and lists can be changed independently."""
    if type(value) is CallValue:
        args = {k: _fresh(v) for k, v in value.args.items()}
        return CallValue.model_construct(
            _fields_set=set(value.model_fields_set),
            kind=value.kind,
            namespace=value.namespace,
            args=args,
        )
    if type(value) is dict:
        return {k: _fresh(v) for k, v in value.items()}
    if type(value) is list:
        return [_fresh(v) for v in value]
    return value


def _block_spec(name: str) -> KindSpec:
    spec = REGISTRY.get("block", name)
    assert spec is not None, name
    return spec


class Resolver:
    def __init__(self, program: Program, symbols: dict[str, int] | None = None) -> None:
        self.program = program
        self.symbols = dict(symbols or {})
        """Values of data-dependent symbols once known, e.g. {"shakespeare.vocab_size": 4000}."""
        self.layers = program.layers
        self.prov: dict[str, Origin] = {}

    # ---------------------------------------------------------------- statements
    def statements(self, decl: ir.ExperimentDecl) -> tuple[list[ir.ExperimentDecl], list[_Stmt]]:
        chain: list[ir.ExperimentDecl] = [decl]
        seen = {decl.name}  # `parent in chain` compared whole pydantic nodes: cubic in the chain
        while chain[-1].extends is not None:
            current = chain[-1]
            parent = self.program.experiments.get(current.extends)
            if parent is None:
                raise ResolveError(
                    f"`{current.name}` extends `{current.extends}`, which is not declared",
                    span=current.extends_span,
                    code="unknown-parent",
                    suggestion=did_you_mean(current.extends, sorted(self.program.experiments)),
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
                    hint="let the variants extend a common parent rather than each one the "
                    "one before",
                )
            chain.append(parent)
            seen.add(parent.name)
        stmts: list[_Stmt] = []
        for exp in reversed(chain):
            stmts.extend(self._body_stmts(exp.body, ()))
        return chain, stmts

    def _body_stmts(self, body: ir.Body, prefix: tuple[str, ...]) -> list[_Stmt]:
        out: list[_Stmt] = []
        for item in body.items:
            where = (
                Origin(kind="spec", where=str(item.span), span=item.span) if item.span else DEFAULT
            )
            if isinstance(item, ir.Assign):
                out.append(_Stmt(prefix + item.path, item.value, item.span, where))
            elif isinstance(item, ir.Block):
                if prefix:
                    raise ResolveError(
                        f"blocks do not nest: `{item.name} {{ }}` inside `{prefix[0]}`",
                        span=item.span,
                        code="nested-block",
                        hint=f"write `{item.name}.field = value` instead",
                    )
                out.extend(self._body_stmts(item.body, (item.name,)))
            else:
                if prefix != ("export",):
                    raise ResolveError(
                        "a bare call is only allowed in an `export { }` block",
                        span=item.span,
                        code="bare-call",
                        hint="assign it to a field: `field = call(...)`",
                    )
                out.append(_Stmt(prefix, None, item.span, where, call=item.call))
        return out

    # ---------------------------------------------------------------- experiment level
    def resolve(self, name: str, overrides: list[str]) -> ResolvedExperiment:
        decl = self.program.experiment(name)
        chain, stmts = self.statements(decl)
        stmts += [parse_override(o, i + 1) for i, o in enumerate(overrides)]
        remember_source("<command line>", "\n".join(f"--set {o}" for o in overrides))
        exp_spec = _block_spec("experiment")
        config: dict[str, Any] = {}
        for pname, value in _default_values(exp_spec).items():
            config[pname] = value
            self.prov[pname] = DEFAULT
        for block in BLOCKS:
            config[block] = self._defaults(_block_spec(block), block)
        tasks_stmt = None
        task_stmts: list[_Stmt] = []
        share_stmts: list[_Stmt] = []
        for st in stmts:
            head = st.path[0]
            if head == "tasks":
                tasks_stmt = st
            elif head == "share":
                share_stmts.append(st)
            elif head in BLOCKS:
                self._apply_block(config, st)
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

    def _unknown_root(self, st: _Stmt, tasks: list[str], exp_spec: KindSpec) -> None:
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

    def _task_names(self, st: _Stmt) -> list[str]:
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
            if name in (*BLOCKS, SHARE, *_block_spec("experiment").param_names):
                raise CheckError(
                    f"task `{name}` has the name of an experiment field; rename the task",
                    span=item.span,
                    code="reserved-name",
                )
            names.append(name)
        return names

    def _check_leaf(self, st: _Stmt, depth: int) -> None:
        if len(st.path) > depth:
            raise ResolveError(
                f"`{'.'.join(st.path[:depth])}` has no fields",
                span=st.span,
                code="unknown-field",
                found=f"`{'.'.join(st.path)}`",
            )

    def _conform(self, st: _Stmt, type_: Any, ctx: Context) -> Any:
        assert st.value is not None
        return conform(evaluate(st.value), type_, ctx, f"`{'.'.join(st.path)}`")

    def _defaults(self, spec: KindSpec, prefix: str) -> dict[str, Any]:
        out = _default_values(spec)
        self.prov[prefix] = DEFAULT
        return out

    # ---------------------------------------------------------------- generic setting
    def _apply_block(self, config: dict[str, Any], st: _Stmt) -> None:
        block = st.path[0]
        spec = _block_spec(block)
        if st.call is not None:  # `onnx(...)` inside export { }: append a format
            fmt = conform(evaluate(st.call), spec.param("formats").type.args[0], Context())
            config["export"]["formats"] = [*config["export"]["formats"], fmt]
            self.prov["export.formats"] = st.origin
            return
        if len(st.path) == 1:
            raise ResolveError(
                f"`{block}` is a block",
                span=st.span,
                code="block-assign",
                hint=f"write `{block} {{ field = value }}` or `{block}.field = value`",
            )
        self._set(config[block], spec, st.path, 1, st, Context(bare_strings=st.bare_strings))

    def _set(
        self,
        container: dict[str, Any],
        spec: KindSpec,
        path: tuple[str, ...],
        i: int,
        st: _Stmt,
        ctx: Context,
    ) -> None:
        """Set `path[i:]` inside `container` (a block dict or a call's args), typed by `spec`."""
        key = path[i]
        p = spec.param(key)
        if p is None:
            raise ResolveError(
                f"`{'.'.join(path[:i])}` has no field `{key}`",
                span=st.span,
                code="unknown-field",
                expected=f"one of {', '.join(spec.param_names)}",
                found=f"`{'.'.join(path)}`",
                suggestion=did_you_mean(key, spec.param_names),
            )
        dotted_path = ".".join(path[: i + 1])
        if i == len(path) - 1:
            assert st.value is not None
            raw = evaluate(st.value)
            container[key] = conform(raw, p.type, ctx, f"`{'.'.join(path)}`")
            # One arg of a call set on its own (`train.optimizer.lr.warmup = 0`): the kind's
            # relations between its args are checked again with the new value.
            check_relations(spec, container, {key: raw.span}, st.span, changed=key)
            self._record(dotted_path, raw, st.origin)
            return
        inner = container.get(key)
        if not isinstance(inner, CallValue):
            raise ResolveError(
                f"`{dotted_path}` is {show_value(inner)}, which has no fields",
                span=st.span,
                code="unknown-field",
                found=f"`{'.'.join(path)}`",
            )
        inner_spec = REGISTRY.get(inner.namespace, inner.kind)
        assert inner_spec is not None
        self._set(inner.args, inner_spec, path, i + 1, st, ctx)

    def _record(self, path: str, raw: Raw, origin: Origin) -> None:
        """Provenance of a value and, for a call, which of its args were written and which not."""
        below = path + "."
        for key in [k for k in self.prov if k.startswith(below)]:
            del self.prov[key]
        self.prov[path] = origin
        v = raw.value
        if not isinstance(v, RawCall):
            return
        positional, names = self._param_names(v.func)
        given = dict(zip(positional, v.args, strict=False))
        given.update({k: a for k, (a, _) in v.kwargs.items()})
        for name in names:
            if name in given:
                self._record(f"{path}.{name}", given[name], origin)
            else:
                self.prov[f"{path}.{name}"] = DEFAULT

    def _param_names(self, func: str) -> tuple[list[str], list[str]]:
        """Positional and all param names of a kind, whatever its namespace."""
        if func in self.layers:
            names = [p.name for p in self.layers[func].params]
            return names, names
        for ns in REGISTRY.namespaces.values():
            if func in ns:
                return list(ns[func].positional), ns[func].param_names
        return [], []

    # ---------------------------------------------------------------- tasks
    def resolve_task(self, name: str, stmts: list[_Stmt]) -> tuple[dict[str, Any], LayerInstance]:
        decl = self.program.tasks[name]
        spec = _block_spec("task")
        task_stmts = _assignments(decl.body, (name,), "task")
        config: dict[str, Any] = self._defaults(spec, name)
        input_name: str | None = None
        input_stmts: list[_Stmt] = []
        model_stmt: _Stmt | None = None
        model_overrides: list[_Stmt] = []
        for st in [*task_stmts, *stmts]:
            field_name = st.path[1] if len(st.path) > 1 else None
            if field_name is None:
                raise ResolveError(
                    f"`{name}` is a task",
                    span=st.span,
                    code="block-assign",
                    hint=f"set one of its fields, e.g. `{name}.loss = ...`",
                )
            if field_name == "input":
                if len(st.path) == 2:
                    input_name, input_stmts = self._input_ref(st), []
                    self.prov[f"{name}.input.name"] = st.origin
                else:
                    input_stmts.append(st)
            elif field_name == "model":
                if len(st.path) == 2:
                    model_stmt, model_overrides = st, []
                elif len(st.path) == 3:
                    model_overrides.append(st)
                else:
                    raise ResolveError(
                        "model params are set one level deep, e.g. `lm.model.d = 512`",
                        span=st.span,
                        code="unknown-field",
                        found=".".join(st.path),
                    )
            else:
                self._set(config, spec, st.path, 1, st, Context(bare_strings=st.bare_strings))
        if input_name is None:
            raise ResolveError(
                f"task `{name}` has no `input`",
                span=decl.span,
                code="missing-param",
                hint="add `input = <name of an input block>`",
            )
        if model_stmt is None:
            raise ResolveError(
                f"task `{name}` has no `model`",
                span=decl.span,
                code="missing-param",
                hint="add `model = SomeModel(...)`",
            )
        config["input"] = self.resolve_input(name, input_name, input_stmts)
        config["model"], instance = self._model(name, model_stmt, model_overrides, config["input"])
        return config, instance

    def _input_ref(self, st: _Stmt) -> str:
        assert st.value is not None
        ref = st.value
        found = ref.id if isinstance(ref, ir.Name) else None
        if found is None and isinstance(ref, ir.String):
            found = ref.value
        if found is None or found not in self.program.inputs:
            raise CheckError(
                "unknown input" + (f" `{found}`" if found else ""),
                span=ref.span,
                code="unknown-input",
                expected=f"one of {', '.join(sorted(self.program.inputs)) or '(none declared)'}",
                found=f"`{found}`" if found else type(ref).__name__.lower(),
                suggestion=did_you_mean(found, self.program.inputs) if found else None,
            )
        return found

    def resolve_input(
        self, task: str | None, input_name: str, stmts: list[_Stmt]
    ) -> dict[str, Any]:
        """An input's config as seen by `task` (with that task's overrides), or on its own.

        Without overrides it is the same for every experiment: kept in the program's cache
        (with the provenance it records) for as long as the input's declaration is unchanged.
        """
        if stmts:
            return self._resolve_input(task, input_name, stmts)
        decl = self.program.inputs[input_name]
        key = ("seqc.resolve.experiment.input", task, input_name)
        hit = self.program.instances.get(key)
        if hit is None or hit[0] is not decl:
            outer, self.prov = self.prov, {}
            try:
                config = self._resolve_input(task, input_name, [])
                hit = self.program.instances[key] = (decl, config, self.prov)
            finally:
                self.prov = outer
        self.prov.update(hit[2])
        return dict(hit[1])

    def _resolve_input(
        self, task: str | None, input_name: str, stmts: list[_Stmt]
    ) -> dict[str, Any]:
        decl = self.program.inputs[input_name]
        spec = _block_spec("input")
        head = (task, "input") if task is not None else (input_name,)
        prefix = ".".join(head)
        config = {"name": input_name, **self._defaults(spec, prefix)}
        self.prov[f"{prefix}.name"] = self.prov.get(prefix, DEFAULT)
        own = _assignments(decl.body, head, "input")
        for st in [*own, *stmts]:
            self._set(config, spec, st.path, len(head), st, Context(bare_strings=st.bare_strings))
        for p in spec.params:
            if p.required and p.name not in config:
                raise CheckError(
                    f"input `{input_name}` needs `{p.name}`",
                    span=decl.span,
                    code="missing-param",
                    expected=f"`{p.name}: {p.type}` ({p.doc})",
                )
        return config

    def _model(
        self,
        task: str,
        model_stmt: _Stmt,
        overrides: list[_Stmt],
        input_config: dict[str, Any],
    ) -> tuple[CallValue, LayerInstance]:
        def lookup(expr: ir.Expr) -> Raw | None:
            is_input = isinstance(expr, ir.Attr) and isinstance(expr.obj, ir.Name)
            if is_input and expr.obj.id == "input":  # type: ignore[union-attr]
                return Raw(self._input_attr(input_config, expr), expr.span)  # type: ignore[arg-type]
            return None

        assert model_stmt.value is not None
        raw = evaluate(model_stmt.value, lookup)
        func = raw.value.func if isinstance(raw.value, RawCall) else None
        if isinstance(raw.value, RawName):
            func = raw.value.id
            raw = Raw(RawCall(func, raw.span, [], {}), raw.span)
        if func is None or func not in self.layers:
            models = sorted(n for n, d in self.layers.items() if d.kind == "model")
            raise CheckError(
                "a task's model is a call of a declared `model`",
                span=raw.span if func is None else raw.value.func_span,
                code="unknown-model",
                expected=f"one of {', '.join(models) or '(none declared)'}",
                found=f"`{func}`" if func else raw.describe(),
                suggestion=did_you_mean(func, models) if func else None,
            )
        decl = self.layers[func]
        assert isinstance(raw.value, RawCall)
        call = raw.value
        spec = layer_kind_spec(decl)
        if overrides:
            # Overrides are by name; turn positional arguments into named ones first.
            kwargs = {n: (a, a.span) for n, a in zip(spec.param_names, call.args, strict=False)}
            kwargs.update(call.kwargs)
            call = RawCall(call.func, call.func_span, call.args[len(spec.params) :], kwargs)
        for st in overrides:
            pname = st.path[2]
            if spec.param(pname) is None:
                raise ResolveError(
                    f"model `{func}` has no param `{pname}`",
                    span=st.span,
                    code="unknown-param",
                    expected=f"one of {', '.join(spec.param_names)}",
                    found=f"`{pname}`",
                    suggestion=did_you_mean(pname, spec.param_names),
                    notes=[Note(decl.span, f"`{func}` is declared here")] if decl.span else [],
                )
            assert st.value is not None
            call.kwargs[pname] = (evaluate(st.value, lookup), st.span)
        ctx = layer_context(self.layers)
        bound, spans = bind_user_layer_spans(decl, call.args, call.kwargs, raw.span, ctx)
        path = f"{task}.model"
        self._record(path, Raw(RawCall(func, None, [], {}), raw.span), model_stmt.origin)
        self._record_model_args(path, decl, call, model_stmt, overrides)
        cache = self.program.instances
        instance = instantiate(decl, bound.args, self.layers, "", raw.span, cache, spans)
        return bound, instance

    def _record_model_args(
        self,
        path: str,
        decl: ir.LayerDecl,
        call: RawCall,
        model_stmt: _Stmt,
        overrides: list[_Stmt],
    ) -> None:
        written = {p.name for p in decl.params[: len(call.args)]} | set(call.kwargs)
        for p in decl.params:
            origin = model_stmt.origin if p.name in written else DEFAULT
            if p.name not in written and p.default is not None and _refers(p.default):
                origin = Origin(kind="default", where=f"computed at {p.default.span}")
            self.prov[f"{path}.{p.name}"] = origin
        for st in overrides:
            self.prov[f"{path}.{st.path[2]}"] = st.origin

    def _input_attr(self, input_config: dict[str, Any], expr: ir.Attr) -> Any:
        name = expr.name
        if name == "vocab_size":
            tok = input_config.get("tokenizer")
            if isinstance(tok, CallValue) and isinstance(tok.args.get("vocab_size"), int):
                return tok.args["vocab_size"]
            if isinstance(tok, CallValue) and tok.kind == "bytes":
                return 260  # 256 byte values + pad, bos, eos, unk (seqc.data.tokenizers)
            ref = f"{input_config['name']}.vocab_size"
            return self.symbols.get(ref, Symbol(ref=ref))
        if name in input_config:
            return input_config[name]
        known = ["vocab_size", *input_config]
        raise CheckError(
            f"input has no attribute `{name}`",
            span=expr.span,
            code="unknown-name",
            expected=f"one of {', '.join(known)}",
            found=f"`{name}`",
            suggestion=did_you_mean(name, known),
        )


def _assignments(body: ir.Body, head: tuple[str, ...], what: str) -> list[_Stmt]:
    """The `field = value` lines of a task or input body as statements under `head`."""
    out = []
    for item in body.items:
        if not isinstance(item, ir.Assign):
            article = "an" if what[0] in "aeiou" else "a"
            raise ResolveError(
                f"{article} {what} body holds `field = value` lines only",
                span=item.span,
                code=f"bad-{what}-item",
            )
        origin = Origin(kind="spec", where=str(item.span), span=item.span)
        out.append(_Stmt((*head, *item.path), item.value, item.span, origin))
    return out


def _refers(expr: ir.Expr) -> bool:
    if isinstance(expr, ir.Name):
        return True
    if isinstance(expr, ir.BinOp):
        return _refers(expr.left) or _refers(expr.right)
    if isinstance(expr, ir.Neg):
        return _refers(expr.operand)
    return False


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
