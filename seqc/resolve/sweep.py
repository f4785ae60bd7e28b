"""A `sweep` declaration resolved: its base experiment, dev metric, goal, budget, search space,
sampler and pruner, each checked where it was written.

```
sweep lm.shakespeare.lr {
  experiment = lm.shakespeare.quick
  metric = dev.perplexity
  space { train.optimizer.lr.peak = loguniform(1e-4, 1e-2) }
  pruner = asha(min_steps = 100, reduction = 3)
}
```

The grammar reads a sweep's body as it reads an experiment's (`field = value` lines and
blocks), and meaning is given here, as for experiments, so a misspelt field is a located error
with a did-you-mean rather than a syntax error. The space is checked in `sweep_space`, the
metric and goal in `sweep_metric`. A trial's experiment is the base plus the `--set` overrides
`trial_overrides` writes; `seqc.compiler.sweep_trials.check_trial` checks it as `seqc check -e`
would (the compiler's checks live a stage above this one).

Optuna is not imported here: a sampler and a pruner are names and arguments that
`seqc.run.sweep.engine` turns into Optuna's objects, so `seqc check` stays quick. Their
argument names are Optuna's where the engine passes them through (`n_startup_trials`).
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict

from seqc.resolve.experiment import resolve
from seqc.resolve.program import Program
from seqc.resolve.raw import RawCall, RawName, dotted, evaluate
from seqc.resolve.sweep_metric import Goal, Metric, goal, metric
from seqc.resolve.sweep_space import DISTRIBUTIONS, Distribution, bind, space
from seqc.spec import ir
from seqc.spec.errors import CheckError, Note, ResolveError, did_you_mean
from seqc.spec.printer import format_expr

__all__ = [
    "DISTRIBUTIONS",
    "Component",
    "Distribution",
    "Metric",
    "ResolvedSweep",
    "resolve_sweep",
    "trial_overrides",
]

FIELDS: dict[str, str] = {
    "experiment": "The base experiment's registry name; each trial is it plus the trial's values.",
    "metric": "The dev figure trials are compared by: dev.NAME, or TASK.dev.NAME in a "
    "multi-task run (loss, nll, perplexity, accuracy; wer, cer; bleu, chrf).",
    "goal": "minimize or maximize (default: the metric's own direction).",
    "trials": "How many trials in all, across workers (default 20).",
    "space": "A block of `path = distribution(...)` lines: the values trials vary.",
    "sampler": "tpe(seed), random(seed), grid(seed) or cmaes(seed): Optuna's samplers "
    "(default tpe(seed = 0)).",
    "pruner": "asha(min_steps, reduction), median(startup_trials, warmup_steps) or none "
    "(default none).",
}
"""A sweep's fields, with what each says (`seqc show`, the editor's hover)."""

DEFAULT_TRIALS = 20


class Arg(NamedTuple):
    """An argument of a sampler or pruner: a whole number of at least `low`, or a bool."""

    kind: Literal["int", "bool"]
    low: int = 0


_SEED = Arg("int")
SAMPLERS: dict[str, dict[str, Arg]] = {
    "tpe": {"seed": _SEED, "n_startup_trials": Arg("int"), "multivariate": Arg("bool")},
    "random": {"seed": _SEED},
    "grid": {"seed": _SEED},
    "cmaes": {"seed": _SEED, "n_startup_trials": Arg("int")},
}
"""Optuna's samplers by the spec's names, with their arguments (by position in this order, or
by name). `grid` walks a finite space; its seed orders the walk."""

PRUNERS: dict[str, dict[str, Arg]] = {
    "asha": {
        "min_steps": Arg("int", 1),
        "reduction": Arg("int", 2),
        "min_early_stopping_rate": Arg("int"),
    },
    "median": {"startup_trials": Arg("int"), "warmup_steps": Arg("int")},
    "none": {},
}
"""Optuna's pruners: ASHA (`SuccessiveHalvingPruner`; steps are training steps), `MedianPruner`,
none."""

DEFAULT_SAMPLER_SEED = 0


class Component(BaseModel):
    """A sampler or a pruner: its kind and its arguments as written, as plain values."""

    model_config = ConfigDict(frozen=True)

    kind: str
    args: dict[str, Any]

    def describe(self) -> str:
        """As spec text: `tpe(seed = 0)`, `none`."""
        args = ", ".join(
            f"{k} = {str(v).lower() if isinstance(v, bool) else v}" for k, v in self.args.items()
        )
        return f"{self.kind}({args})" if args or self.kind != "none" else self.kind


class ResolvedSweep(BaseModel):
    """A sweep with every part checked and every field explicit (`goal`, `trials`, `sampler`
    and `pruner` filled in where not written); frozen."""

    model_config = ConfigDict(frozen=True)

    name: str
    file: str
    """The .seq file it was declared in, as the program names it (what a trial's
    `seqc train FILE` reads)."""
    span: ir.Span | None
    experiment: str
    metric: Metric
    goal: Goal
    trials: int
    space: tuple[Distribution, ...]
    sampler: Component
    pruner: Component
    doc: str | None = None
    """The declaration's doc string."""

    def dimension(self, path: str) -> Distribution:
        """The dimension of the space at `path`."""
        for d in self.space:
            if d.path == path:
                return d
        raise KeyError(path)


# ---------------------------------------------------------------------------------- resolving


def resolve_sweep(program: Program, name: str, span: ir.Span | None = None) -> ResolvedSweep:
    """Sweep `name` of `program`, every part checked (a located `CheckError` or `ResolveError`
    otherwise). `span` locates an unknown name (where it was asked for), if anywhere."""
    decl = program.sweeps.get(name)
    if decl is None:
        names = sorted(program.sweeps)
        raise ResolveError(
            f"no sweep named `{name}`",
            span=span,
            path=program.root.path,
            code="unknown-sweep",
            expected=f"one of {', '.join(names)}" if names else "a sweep (none is declared)",
            found=f"`{name}`",
            suggestion=did_you_mean(name, names),
            hint="`seqc list FILE` lists the sweeps",
        )
    items = _fields(decl)
    exp_item = _required(items, "experiment", decl)
    experiment = _dotted_value(exp_item, "an experiment's registry name")
    program.experiment(experiment, span=exp_item.value.span)  # unknown: did-you-mean
    base = resolve(program, experiment, [])
    metric_item = _required(items, "metric", decl)
    found = metric(_dotted_value(metric_item, "a dev metric"), metric_item.value.span, base)
    space_block = items.get("space")
    if space_block is None:
        raise CheckError(
            f"sweep `{name}` has no `space {{ }}` block: nothing to search",
            span=decl.span,
            code="missing-space",
            hint="add `space { train.optimizer.lr.peak = loguniform(1e-4, 1e-2) }`",
        )
    assert isinstance(space_block, ir.Block)
    dims = space(space_block, program, base)
    sampler = _component(items.get("sampler"), SAMPLERS, "sampler")
    if sampler is None:
        sampler = Component(kind="tpe", args={"seed": DEFAULT_SAMPLER_SEED})
    if sampler.kind == "grid":
        for d in dims:
            if d.kind not in ("choice", "intrange"):
                raise CheckError(
                    f"the grid sampler walks a finite space; `{d.path}` is {d.kind}",
                    span=d.span,
                    code="grid-infinite",
                    hint="give it as choice([...]) or intrange(...), or use another sampler",
                    notes=_note(items.get("sampler"), "the grid sampler is chosen here"),
                )
    pruner = _component(items.get("pruner"), PRUNERS, "pruner")
    return ResolvedSweep(
        name=name,
        file=decl.span.file if decl.span else program.root.path,
        span=decl.span,
        experiment=experiment,
        metric=found,
        goal=goal(_assign(items.get("goal")), found),
        trials=_trials(_assign(items.get("trials"))),
        space=dims,
        sampler=sampler,
        pruner=pruner or Component(kind="none", args={}),
        doc=decl.body.doc,
    )


def _fields(decl: ir.SweepDecl) -> dict[str, ir.Assign | ir.Block]:
    """The body's fields by name: each known, given once, in its form (`space` a block)."""
    out: dict[str, ir.Assign | ir.Block] = {}
    for item in decl.body.items:
        if isinstance(item, ir.Assign):
            key = ".".join(item.path)
        elif isinstance(item, ir.Block):
            key = item.name
        else:
            key = format_expr(item.call.func)
        if key not in FIELDS:
            raise CheckError(
                f"a sweep has no field `{key}`",
                span=item.span,
                code="unknown-field",
                expected=f"one of {', '.join(FIELDS)}",
                suggestion=did_you_mean(key, FIELDS),
                hint="the values a trial varies go in `space { }`" if "." in key else None,
            )
        if key in out:
            raise CheckError(
                f"`{key}` is given twice",
                span=item.span,
                code="duplicate-field",
                notes=_note(out[key], "first given here"),
            )
        if (key == "space") != isinstance(item, ir.Block):
            want = "a block, `space { ... }`" if key == "space" else f"`{key} = ...`"
            raise CheckError(f"`{key}` is written as {want}", span=item.span, code="wrong-form")
        out[key] = item  # type: ignore[assignment]
    return out


def _note(item: ir.Stmt | None, text: str) -> list[Note]:
    return [Note(item.span, text)] if item is not None and item.span is not None else []


def _assign(item: ir.Assign | ir.Block | None) -> ir.Assign | None:
    assert item is None or isinstance(item, ir.Assign)
    return item


def _required(items: dict[str, Any], key: str, decl: ir.SweepDecl) -> ir.Assign:
    item = items.get(key)
    if item is None:
        example = (
            "experiment = lm.shakespeare.quick" if key == "experiment" else "metric = dev.loss"
        )
        raise CheckError(
            f"sweep `{decl.name}` does not say its `{key}`",
            span=decl.span,
            code="missing-experiment" if key == "experiment" else "missing-metric",
            hint=f"add `{example}`",
        )
    return item


def _dotted_value(item: ir.Assign, what: str) -> str:
    """A dotted name (or a string holding one): an experiment's name, a metric."""
    value = item.value
    text = value.value if isinstance(value, ir.String) else dotted(value)
    if not text:
        raise CheckError(
            f"`{'.'.join(item.path)}` is {what}",
            span=value.span,
            code="wrong-type",
            found=format_expr(value),
        )
    return text


def _trials(item: ir.Assign | None) -> int:
    if item is None:
        return DEFAULT_TRIALS
    value = evaluate(item.value).value
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CheckError(
            "`trials` is a count of at least 1",
            span=item.value.span,
            code="bad-trials",
            found=format_expr(item.value),
        )
    return value


def _component(
    item: ir.Assign | ir.Block | None, table: dict[str, dict[str, Arg]], what: str
) -> Component | None:
    """`sampler = tpe(seed = 0)`, `pruner = none`: a known kind with its arguments checked;
    None where the field is not written."""
    if item is None:
        return None
    assert isinstance(item, ir.Assign)
    raw = evaluate(item.value)
    v = raw.value
    call = v if isinstance(v, RawCall) else None
    kind = call.func if call else "none" if v is None else v.id if isinstance(v, RawName) else ""
    if kind not in table:
        raise CheckError(
            f"unknown {what} `{kind or format_expr(item.value)}`",
            span=call.func_span if call and call.func_span else item.value.span,
            code="unknown-sampler" if what == "sampler" else "unknown-pruner",
            expected=f"one of {', '.join(table)}",
            suggestion=did_you_mean(kind, table) if kind else None,
        )
    args: dict[str, Any] = {}
    if call is not None:
        for key, arg in bind(call, tuple(table[kind]), raw.span).items():
            args[key] = _argument(arg.value, table[kind][key], f"{kind}'s `{key}`", arg.span)
    return Component(kind=kind, args=args)


def _argument(value: Any, spec: Arg, what: str, span: ir.Span | None) -> Any:
    if spec.kind == "bool":
        if not isinstance(value, bool):
            raise CheckError(
                f"{what} is true or false", span=span, code="bad-argument", found=repr(value)
            )
        return value
    if isinstance(value, bool) or not isinstance(value, int) or value < spec.low:
        raise CheckError(
            f"{what} is a whole number of at least {spec.low}",
            span=span,
            code="bad-argument",
            found=str(value).lower() if isinstance(value, bool) else repr(value),
        )
    return value


# ---------------------------------------------------------------------------------- trials


def trial_overrides(sweep: ResolvedSweep, values: dict[str, Any]) -> list[str]:
    """The `--set` arguments that make a trial's experiment from the base, one per dimension in
    the space's order: `values` (one per path) written as spec literals that the override
    parser reads back to the same value (`0.00123`, `3`, `"gelu"`, `true`, `adam(lr = 0.1)`)."""
    missing = [d.path for d in sweep.space if d.path not in values]
    extra = sorted(set(values) - {d.path for d in sweep.space})
    if missing or extra:
        raise KeyError(f"trial values lack {missing} or name paths outside the space {extra}")
    return [f"{d.path}={d.text_of(values[d.path])}" for d in sweep.space]
