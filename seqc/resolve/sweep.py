"""A `sweep` declaration resolved: its base experiment, dev metric, goal, budget, search space,
sampler and pruner, each checked where it was written.

The space is checked against the experiment as a `--set` would be: every path must name a
value of the resolved base experiment (did-you-mean over the real paths), and each
distribution's bounds (or each choice) are resolved as overrides through the same resolver, so
a range outside a param's declared interval, a float for an int, or a string for a number is
the resolver's own error, reported at the distribution's line. A sampled value that breaks a
rule between params (`d % heads`) is only known per trial: `seqc.compiler.sweep_trials`
checks each trial before it runs.

Optuna is not imported here: the sampler and pruner are names and arguments that
`seqc.run.sweep.engine` turns into Optuna's objects, so `seqc check` stays quick.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from seqc.resolve.experiment import ResolvedExperiment, resolve
from seqc.resolve.program import Program
from seqc.resolve.raw import Raw, RawCall, RawName, dotted, evaluate
from seqc.spec import ir
from seqc.spec.errors import CheckError, ResolveError, SeqcError, did_you_mean
from seqc.spec.printer import format_expr

Kind = Literal["uniform", "loguniform", "intrange", "logintrange", "choice"]

DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "uniform": ("low", "high", "step"),
    "loguniform": ("low", "high"),
    "intrange": ("low", "high", "step"),
    "logintrange": ("low", "high"),
    "choice": ("values",),
}
"""Each distribution and its arguments, in positional order."""

SAMPLERS: dict[str, tuple[str, ...]] = {
    "tpe": ("seed", "n_startup_trials", "multivariate"),
    "random": ("seed",),
    "grid": ("seed",),
    "cmaes": ("seed", "n_startup_trials"),
}
"""Optuna's samplers by the spec's names, with the arguments each takes."""

PRUNERS: dict[str, tuple[str, ...]] = {
    "asha": ("min_steps", "reduction", "min_early_stopping_rate"),
    "median": ("startup_trials", "warmup_steps"),
    "none": (),
}
"""Optuna's pruners: ASHA (`SuccessiveHalvingPruner`), `MedianPruner`, none."""

FIELDS = ("experiment", "metric", "goal", "trials", "space", "sampler", "pruner")

ALWAYS = ("loss", "nll", "perplexity", "accuracy")
"""Dev figures every task's evaluation writes to `metrics.jsonl`."""
MINIMIZE = ("loss", "nll", "perplexity", "wer", "cer")
MAXIMIZE = ("accuracy", "bleu", "chrf")
NEEDS_TRANSLATIONS = ("bleu", "chrf")
"""Figures computed from dev translations, only when `train.dev_translations` > 0."""

DEFAULT_TRIALS = 20


class Distribution(BaseModel):
    """One dimension of the space: the values a trial may give `path`."""

    model_config = ConfigDict(frozen=True)

    path: str
    kind: Kind
    low: float | int | None = None
    high: float | int | None = None
    step: float | int | None = None
    choices: tuple[Any, ...] = ()
    """Plain values (int, float, str, bool); a call is kept as its spec text."""
    choice_texts: tuple[str, ...] = ()
    """Each choice as spec text, what a trial's `--set` writes."""
    span: ir.Span | None = None

    def describe(self) -> str:
        if self.kind == "choice":
            return f"choice([{', '.join(self.choice_texts)}])"
        step = f", step = {self.step}" if self.step is not None else ""
        return f"{self.kind}({self.low}, {self.high}{step})"


class Metric(BaseModel):
    model_config = ConfigDict(frozen=True)

    task: str | None
    """None: the experiment's only task (its dev records carry no task name)."""
    split: str
    name: str
    text: str


class Component(BaseModel):
    """A sampler or a pruner: its kind and arguments as plain values."""

    model_config = ConfigDict(frozen=True)

    kind: str
    args: dict[str, Any]

    def describe(self) -> str:
        args = ", ".join(f"{k} = {v}" for k, v in self.args.items())
        return f"{self.kind}({args})" if args else self.kind


class ResolvedSweep(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    file: str
    span: ir.Span | None
    experiment: str
    metric: Metric
    goal: Literal["minimize", "maximize"]
    trials: int
    space: tuple[Distribution, ...]
    sampler: Component
    pruner: Component
    doc: str | None = None


# ---------------------------------------------------------------------------------- resolving


def resolve_sweep(program: Program, name: str, span: ir.Span | None = None) -> ResolvedSweep:
    """Sweep `name` of `program`, every part checked (a located error otherwise)."""
    decl = program.sweeps.get(name)
    if decl is None:
        names = sorted(program.sweeps)
        raise ResolveError(
            f"no sweep named `{name}`",
            span=span,
            path=program.root.path,
            code="unknown-sweep",
            expected=f"one of {', '.join(names)}" if names else "a sweep (none declared)",
            found=f"`{name}`",
            suggestion=did_you_mean(name, names),
            hint="`seqc list FILE` lists the sweeps",
        )
    items = _items(decl)
    exp_item = _required(items, "experiment", decl)
    experiment = _dotted_value(exp_item, "an experiment's registry name")
    program.experiment(experiment, span=exp_item.value.span)
    base = resolve(program, experiment, [])
    metric = _metric(_required(items, "metric", decl), base)
    goal = _goal(items.get("goal"), metric)
    trials = _trials(items.get("trials"))
    space_block = items.get("space")
    if not isinstance(space_block, ir.Block):
        raise CheckError(
            f"sweep `{name}` has no `space {{ }}` block",
            span=decl.span if space_block is None else space_block.span,
            code="missing-space",
            hint="add `space { train.optimizer.lr.peak = loguniform(1e-4, 1e-2) }`",
        )
    space = tuple(_distribution(item, program, base) for item in _space_items(space_block))
    if not space:
        raise CheckError("the space is empty", span=space_block.span, code="missing-space")
    sampler = _component(
        items.get("sampler"), SAMPLERS, "sampler", Component(kind="tpe", args={"seed": 0})
    )
    pruner = _component(items.get("pruner"), PRUNERS, "pruner", Component(kind="none", args={}))
    if sampler.kind == "grid":
        for d in space:
            if d.kind not in ("choice", "intrange"):
                raise CheckError(
                    f"the grid sampler needs a finite space; `{d.path}` is {d.kind}",
                    span=d.span,
                    code="grid-infinite",
                    hint="give it as choice([...]) or intrange(...), or use another sampler",
                )
    return ResolvedSweep(
        name=name,
        file=_file(program, decl),
        span=decl.span,
        experiment=experiment,
        metric=metric,
        goal=goal,
        trials=trials,
        space=space,
        sampler=sampler,
        pruner=pruner,
        doc=decl.body.doc,
    )


def _file(program: Program, decl: ir.SweepDecl) -> str:
    """The file the sweep was declared in, as the run of a trial names it (as given for the
    root file, relative to the working directory for an imported one inside it)."""
    if any(d is decl for d in program.root.decls):
        return program.root.path
    for spec, path in zip(program.files, program.paths, strict=False):
        if any(d is decl for d in spec.decls):
            try:
                return str(path.relative_to(Path.cwd()))
            except ValueError:
                return str(path)
    return program.root.path


def _items(decl: ir.SweepDecl) -> dict[str, ir.Assign | ir.Block]:
    out: dict[str, ir.Assign | ir.Block] = {}
    for item in decl.body.items:
        key = ".".join(item.path) if isinstance(item, ir.Assign) else getattr(item, "name", None)
        if key not in FIELDS:
            shown = key if key is not None else format_expr(item.call)  # type: ignore[union-attr]
            raise CheckError(
                f"a sweep has no field `{shown}`",
                span=item.span,
                code="unknown-field",
                expected=f"one of {', '.join(FIELDS)}",
                suggestion=did_you_mean(str(shown), FIELDS),
            )
        if key in out:
            raise CheckError(f"`{key}` is given twice", span=item.span, code="duplicate-field")
        if (key == "space") != isinstance(item, ir.Block):
            want = "a block, `space { ... }`" if key == "space" else f"`{key} = ...`"
            raise CheckError(f"`{key}` is written as {want}", span=item.span, code="wrong-form")
        out[key] = item  # type: ignore[assignment]
    return out


def _required(items: dict[str, Any], key: str, decl: ir.SweepDecl) -> ir.Assign:
    item = items.get(key)
    if item is None:
        raise CheckError(
            f"sweep `{decl.name}` does not say its `{key}`",
            span=decl.span,
            code=f"missing-{key}",
            hint="e.g. `experiment = lm.shakespeare.quick`"
            if key == "experiment"
            else "e.g. `metric = dev.perplexity`",
        )
    return item


def _dotted_value(item: ir.Assign, what: str) -> str:
    value = item.value
    if isinstance(value, ir.String):
        return value.value
    text = dotted(value)
    if text is None:
        raise CheckError(
            f"`{'.'.join(item.path)}` must be {what}",
            span=value.span,
            code="wrong-type",
            found=format_expr(value),
        )
    return text


def _metric(item: ir.Assign, base: ResolvedExperiment) -> Metric:
    text = _dotted_value(item, "a dev metric, e.g. dev.perplexity")
    parts = text.split(".")
    span = item.value.span
    task: str | None = None
    if len(parts) == 3:
        task = parts[0]
        parts = parts[1:]
    if len(parts) != 2:
        raise CheckError(
            f"`{text}` is not a metric",
            span=span,
            code="bad-metric",
            expected="split.name (dev.perplexity), or task.split.name in a multi-task run",
        )
    split, name = parts
    if split == "test":
        raise CheckError(
            "a sweep may not choose on the test split",
            span=span,
            code="test-metric",
            hint="tune on dev (`dev." + name + "`); the test split is for the final report",
        )
    if split != "dev":
        raise CheckError(
            f"`{split}` is not a split a run evaluates during training",
            span=span,
            code="bad-metric",
            expected="dev",
        )
    tasks = base.tasks
    if task is None and len(tasks) > 1:
        raise CheckError(
            f"experiment `{base.name}` trains {len(tasks)} tasks: say whose metric",
            span=span,
            code="metric-task",
            hint=f"e.g. `{tasks[0]}.dev.{name}`",
        )
    if task is not None and task not in tasks:
        raise CheckError(
            f"`{task}` is not a task of `{base.name}`",
            span=span,
            code="unknown-task",
            expected=f"one of {', '.join(tasks)}",
            suggestion=did_you_mean(task, tasks),
        )
    owner = task or tasks[0]
    kinds = [m.kind for m in base.config[owner].get("metrics") or ()]
    known = [*ALWAYS, *(k for k in kinds if k not in ALWAYS)]
    if name not in known:
        raise CheckError(
            f"task `{owner}` reports no dev `{name}`",
            span=span,
            code="unknown-metric",
            expected=f"one of {', '.join(known)}",
            suggestion=did_you_mean(name, known),
            hint="a task reports loss, nll, perplexity and accuracy, and the metrics it lists",
        )
    if name in NEEDS_TRANSLATIONS and not base.config["train"].get("dev_translations"):
        raise CheckError(
            f"dev `{name}` is computed from dev translations, and `{base.name}` makes none",
            span=span,
            code="metric-off",
            hint="set `train.dev_translations` in the base experiment (e.g. 200)",
        )
    return Metric(task=task if len(tasks) > 1 else None, split=split, name=name, text=text)


def _goal(item: ir.Assign | None, metric: Metric) -> Literal["minimize", "maximize"]:
    if item is None:
        if metric.name in MINIMIZE:
            return "minimize"
        if metric.name in MAXIMIZE:
            return "maximize"
        raise CheckError(
            f"say whether to minimize or maximize `{metric.text}`",
            span=None,
            code="missing-goal",
            hint="add `goal = minimize` or `goal = maximize`",
        )
    text = dotted(item.value)
    if text not in ("minimize", "maximize"):
        raise CheckError(
            "`goal` is minimize or maximize",
            span=item.value.span,
            code="bad-goal",
            found=format_expr(item.value),
            suggestion=did_you_mean(str(text), ("minimize", "maximize")),
        )
    want = (
        "minimize" if metric.name in MINIMIZE else "maximize" if metric.name in MAXIMIZE else None
    )
    if want is not None and want != text:
        raise CheckError(
            f"`{metric.text}` is better {'lower' if want == 'minimize' else 'higher'}: "
            f"`goal = {text}` would search for the worst",
            span=item.value.span,
            code="bad-goal",
            suggestion=want,
        )
    return text  # type: ignore[return-value]


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


def _space_items(block: ir.Block) -> list[ir.Assign]:
    out = []
    seen: dict[str, ir.Span | None] = {}
    for item in block.body.items:
        if not isinstance(item, ir.Assign):
            raise CheckError(
                "the space holds `path = distribution(...)` lines",
                span=item.span,
                code="wrong-form",
                hint="e.g. `lm.model.dropout = uniform(0.0, 0.3)`",
            )
        path = ".".join(item.path)
        if path in seen:
            raise CheckError(
                f"`{path}` is in the space twice", span=item.span, code="duplicate-field"
            )
        seen[path] = item.span
        out.append(item)
    return out


# ---------------------------------------------------------------------------------- the space


def _distribution(item: ir.Assign, program: Program, base: ResolvedExperiment) -> Distribution:
    path = ".".join(item.path)
    _check_path(path, item, base)
    raw = evaluate(item.value)
    call = raw.value
    if not isinstance(call, RawCall) or call.func not in DISTRIBUTIONS:
        raise CheckError(
            f"`{path}` needs a distribution",
            span=item.value.span,
            code="not-a-distribution",
            expected=", ".join(f"{k}(...)" for k in DISTRIBUTIONS),
            found=format_expr(item.value),
            suggestion=did_you_mean(call.func, DISTRIBUTIONS)
            if isinstance(call, RawCall)
            else None,
        )
    args = _bind(call, DISTRIBUTIONS[call.func], raw.span)
    current = base.get(path)
    if call.func == "choice":
        dist = _choice(path, args, item, raw.span)
    else:
        dist = _range(path, call.func, args, raw.span, current)
    for text in _probes(dist):
        try:
            resolve(program, base.name, [f"{path}={text}"])
        except SeqcError as e:
            raise CheckError(
                f"{dist.describe()} gives `{path}` the value {text}, which it does not take: "
                f"{e.message}",
                span=item.value.span,
                code="space-out-of-range",
                hint=e.hint or "narrow the distribution to the values the param accepts",
            ) from None
    return dist


def _check_path(path: str, item: ir.Assign, base: ResolvedExperiment) -> None:
    try:
        base.get(path)
    except (KeyError, IndexError, ValueError, TypeError):
        paths = [p for p, _ in base.leaves()]
        raise CheckError(
            f"`{path}` names no value of experiment `{base.name}`",
            span=item.span,
            code="unknown-path",
            suggestion=did_you_mean(path, paths),
            hint=f"`seqc show FILE -e {base.name}` lists every path an override can set",
        ) from None


def _bind(call: RawCall, names: tuple[str, ...], span: ir.Span | None) -> dict[str, Raw]:
    if len(call.args) > len(names):
        raise CheckError(
            f"`{call.func}` takes at most {len(names)} arguments",
            span=span,
            code="bad-arguments",
            expected=f"{call.func}({', '.join(names)})",
        )
    out = dict(zip(names, call.args, strict=False))
    for key, (value, kspan) in call.kwargs.items():
        if key not in names:
            raise CheckError(
                f"`{call.func}` has no argument `{key}`",
                span=kspan,
                code="unknown-argument",
                expected=", ".join(names),
                suggestion=did_you_mean(key, names),
            )
        if key in out:
            raise CheckError(f"`{key}` is given twice", span=kspan, code="duplicate-argument")
        out[key] = value
    return out


def _number(raw: Raw | None, what: str, span: ir.Span | None) -> int | float:
    v = raw.value if raw is not None else None
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise CheckError(
            f"{what} must be a number",
            span=raw.span if raw is not None else span,
            code="bad-distribution",
            found=raw.describe() if raw is not None else "nothing",
        )
    return v


def _range(
    path: str, kind: str, args: dict[str, Raw], span: ir.Span | None, current: Any
) -> Distribution:
    low = _number(args.get("low"), f"{kind}'s low", span)
    high = _number(args.get("high"), f"{kind}'s high", span)
    step = _number(args["step"], f"{kind}'s step", span) if "step" in args else None
    integer = kind in ("intrange", "logintrange")
    if integer and not all(isinstance(v, int) for v in (low, high, step) if v is not None):
        raise CheckError(
            f"{kind} takes whole numbers",
            span=span,
            code="bad-distribution",
            hint="use uniform or loguniform for a float",
        )
    if low >= high:
        raise CheckError(
            f"{kind}'s low ({low}) must be below its high ({high})",
            span=span,
            code="bad-distribution",
        )
    if kind.startswith("log") and low <= 0:
        raise CheckError(
            f"{kind} needs a low above 0, not {low}",
            span=span,
            code="bad-distribution",
            hint="a log scale has no 0: start at a small positive value",
        )
    if step is not None and step <= 0:
        raise CheckError(
            f"the step must be above 0, not {step}", span=span, code="bad-distribution"
        )
    if not integer and isinstance(current, int) and not isinstance(current, bool):
        raise CheckError(
            f"`{path}` is an int and {kind} draws floats",
            span=span,
            code="space-wrong-type",
            suggestion=f"{'logintrange' if kind == 'loguniform' else 'intrange'}"
            f"({int(low)}, {int(high)})",
        )
    if isinstance(current, bool | str) or (current is None and not integer):
        shown = (
            "a bool"
            if isinstance(current, bool)
            else "a string"
            if isinstance(current, str)
            else "none"
        )
        raise CheckError(
            f"`{path}` is {shown} now; a {kind} draws numbers",
            span=span,
            code="space-wrong-type",
            hint="give its values as choice([...])",
        )
    return Distribution(path=path, kind=kind, low=low, high=high, step=step, span=span)  # type: ignore[arg-type]


def _choice(path: str, args: dict[str, Raw], item: ir.Assign, span: ir.Span | None) -> Distribution:
    values = args.get("values")
    if values is None or not isinstance(values.value, list) or not values.value:
        raise CheckError(
            "choice takes a list of values, e.g. choice([2, 3, 4])",
            span=span,
            code="bad-distribution",
        )
    exprs = _list_items(item.value)
    choices: list[Any] = []
    texts: list[str] = []
    for raw, expr in zip(values.value, exprs, strict=True):
        v = raw.value
        text = format_expr(expr)
        if isinstance(v, RawCall | RawName | list | dict):
            choices.append(text)  # a call (`adam(...)`), a name, a list: by its spec text
        else:
            choices.append(v)
            text = _literal(v)
        if choices[-1] in choices[:-1]:
            raise CheckError(
                f"{text} is in the choice twice", span=raw.span, code="duplicate-choice"
            )
        texts.append(text)
    return Distribution(
        path=path, kind="choice", choices=tuple(choices), choice_texts=tuple(texts), span=span
    )


def _list_items(value: ir.Expr) -> list[ir.Expr]:
    call = value
    assert isinstance(call, ir.Call)
    first = call.args[0] if call.args else next(k.value for k in call.kwargs)
    assert isinstance(first, ir.ListExpr)
    return list(first.items)


def _probes(dist: Distribution) -> list[str]:
    """The values a distribution's check resolves, as spec text: its bounds, or every choice."""
    if dist.kind == "choice":
        return list(dist.choice_texts)
    return [_literal(v) for v in (dist.low, dist.high)]


def _component(
    item: ir.Assign | None, table: dict[str, tuple[str, ...]], what: str, default: Component
) -> Component:
    if item is None:
        return default
    raw = evaluate(item.value)
    v = raw.value
    if isinstance(v, RawName) or v is None:
        kind, args = ("none" if v is None else v.id), {}
    elif isinstance(v, RawCall):
        kind = v.func
        if v.args:
            raise CheckError(
                f"give the {what}'s arguments by name",
                span=raw.span,
                code="bad-arguments",
                expected=f"{kind}({', '.join(f'{a} = ...' for a in table.get(kind, ()))})",
            )
        args = {}
        for key, (value, kspan) in v.kwargs.items():
            if kind in table and key not in table[kind]:
                raise CheckError(
                    f"the {kind} {what} has no argument `{key}`",
                    span=kspan,
                    code="unknown-argument",
                    expected=", ".join(table[kind]) or "none",
                    suggestion=did_you_mean(key, table[kind]),
                )
            args[key] = _plain_arg(value, key, kspan)
    else:
        kind, args = "", {}
    if kind not in table:
        raise CheckError(
            f"unknown {what} `{kind or format_expr(item.value)}`",
            span=item.value.span,
            code=f"unknown-{what}",
            expected=f"one of {', '.join(table)}",
            suggestion=did_you_mean(kind, table),
        )
    return Component(kind=kind, args=args)


def _plain_arg(raw: Raw, key: str, span: ir.Span | None) -> Any:
    v = raw.value
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, int) and v >= 0:
        return v
    raise CheckError(
        f"`{key}` must be a whole number of at least 0 (or true/false)",
        span=span,
        code="bad-argument",
        found=raw.describe(),
    )


# ---------------------------------------------------------------------------------- trials


def _literal(value: Any) -> str:
    """A plain value as spec text (what `--set path=TEXT` parses back to the same value)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    return json.dumps(str(value))


def trial_overrides(sweep: ResolvedSweep, values: dict[str, Any]) -> list[str]:
    """The `--set` arguments that make a trial's experiment from the base: one per dimension,
    in the space's order."""
    out = []
    for dist in sweep.space:
        value = values[dist.path]
        if dist.kind == "choice":
            text = dist.choice_texts[dist.choices.index(value)]
        elif dist.kind in ("intrange", "logintrange"):
            text = str(int(value))
        else:
            text = _literal(float(value))
        out.append(f"{dist.path}={text}")
    return out
