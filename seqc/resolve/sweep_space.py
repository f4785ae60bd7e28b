"""A sweep's search space: each `path = distribution(...)` line checked against the experiment.

A path must name a value of the resolved base experiment, the way a `--set` would (did-you-mean
over the real paths). A distribution's bounds, or each of its choices, are then resolved as
`--set` overrides through the resolver itself, so a range outside a param's declared interval,
a float for an int or a string for a number is the catalogue's own verdict, reported at the
argument that asked for it. One thing is left to each trial: a rule between params (`d %
heads == 0`) depends on the values sampled together, so a bound or choice that breaks one only
with the base's other values passes here (`seqc.compiler.sweep_trials` checks every trial).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from seqc.resolve.experiment import ResolvedExperiment, resolve
from seqc.resolve.program import Program
from seqc.resolve.raw import Raw, RawCall, RawName, evaluate
from seqc.resolve.values import show_value
from seqc.spec import ir
from seqc.spec.errors import CheckError, Note, SeqcError, did_you_mean
from seqc.spec.printer import format_expr

Kind = Literal["uniform", "loguniform", "intrange", "logintrange", "choice"]

DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "uniform": ("low", "high", "step"),
    "loguniform": ("low", "high"),
    "intrange": ("low", "high", "step"),
    "logintrange": ("low", "high"),
    "choice": ("values",),
}
"""Each distribution and its arguments, in positional order (Optuna's `suggest_float` and
`suggest_int` take no step on a log scale, so neither do these)."""

INTEGER = ("intrange", "logintrange")


class Distribution(BaseModel):
    """One dimension of the space: the values a trial may give `path`."""

    model_config = ConfigDict(frozen=True)

    path: str
    """The dotted path a `--set` takes (`train.optimizer.lr.peak`)."""
    kind: Kind
    low: float | int | None = None
    high: float | int | None = None
    """Both included, as Optuna samples them."""
    step: float | int | None = None
    choices: tuple[Any, ...] = ()
    """Plain values (int, float, str, bool, None); a call, a name or a collection is kept as its
    spec text (`adam(lr = 0.001)`), which is what Optuna stores and a trial's `--set` writes."""
    choice_texts: tuple[str, ...] = ()
    """Each choice as spec text, in order: what a trial's `--set` writes for it."""
    span: ir.Span | None = None

    def describe(self) -> str:
        """The distribution as spec text, as `seqc show -s` prints it."""
        if self.kind == "choice":
            return f"choice([{', '.join(self.choice_texts)}])"
        step = f", step = {show_value(self.step)}" if self.step is not None else ""
        return f"{self.kind}({show_value(self.low)}, {show_value(self.high)}{step})"

    def text_of(self, value: Any) -> str:
        """`value`, one of this dimension's values, as the spec text a `--set` takes."""
        if self.kind == "choice":
            for choice, text in zip(self.choices, self.choice_texts, strict=True):
                if same_value(choice, value):
                    return text
            raise ValueError(f"{value!r} is not one of {self.path}'s choices {self.choices}")
        if self.kind in INTEGER:
            if isinstance(value, bool) or not float(value).is_integer():
                raise ValueError(f"{self.path} takes whole numbers, not {value!r}")
            return str(int(value))
        return show_value(float(value))


def same_value(a: Any, b: Any) -> bool:
    """Equal as spec values: `true` is not `1` (Python's `True == 1` is), `1` is `1.0`."""
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    return isinstance(a, bool) == isinstance(b, bool) and a == b


def space(block: ir.Block, program: Program, base: ResolvedExperiment) -> tuple[Distribution, ...]:
    """The dimensions of a sweep's `space { }` block, each checked (a located error otherwise)."""
    seen: dict[str, ir.Span | None] = {}
    out = []
    for item in block.body.items:
        if not isinstance(item, ir.Assign):
            raise CheckError(
                "a sweep's space holds `path = distribution(...)` lines",
                span=item.span,
                code="wrong-form",
                hint="e.g. `lm.model.dropout = uniform(0.0, 0.3)`",
            )
        path = ".".join(item.path)
        if path in seen:
            raise CheckError(
                f"`{path}` is in the space twice",
                span=item.span,
                code="duplicate-field",
                notes=[Note(seen[path], "first here")] if seen[path] else [],
            )
        for other, where in seen.items():
            outer, inner = sorted((other, path), key=len)
            if inner.startswith(outer + "."):
                raise CheckError(
                    f"`{inner}` lies inside `{outer}`, which the space also varies",
                    span=item.span,
                    code="space-overlap",
                    notes=[Note(where, f"`{other}` is here")] if where else [],
                    hint="a trial's value for the one would be overwritten or lost with the "
                    "other: vary the whole value (choice of calls) or its parts, not both",
                )
        seen[path] = item.span
        out.append(distribution(item, program, base))
    if not out:
        raise CheckError(
            "the space is empty: nothing to search",
            span=block.span,
            code="missing-space",
            hint="add `path = distribution(...)` lines: `lm.model.dropout = uniform(0.0, 0.3)`",
        )
    return tuple(out)


def distribution(item: ir.Assign, program: Program, base: ResolvedExperiment) -> Distribution:
    """One `path = distribution(...)` line: the path, the distribution's arguments, then its
    values resolved as overrides of the base experiment."""
    path = ".".join(item.path)
    current = _current(path, item, base)
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
            hint="a fixed value belongs in the experiment; the space holds what a trial varies",
        )
    args = bind(call, DISTRIBUTIONS[call.func], raw.span)
    if call.func == "choice":
        dist, probes = _choice(path, args, item, raw.span)
    else:
        dist, probes = _range(path, call.func, args, raw.span, current)
    for text, span in probes:
        _probe(program, base, dist, text, span)
    return dist


def _current(path: str, item: ir.Assign, base: ResolvedExperiment) -> Any:
    """The base experiment's value at `path`; an error with did-you-mean where there is none."""
    try:
        return base.get(path)
    except (KeyError, IndexError, ValueError, TypeError):
        paths = [p for p, _ in base.leaves()]
        raise CheckError(
            f"`{path}` names no value of experiment `{base.name}`",
            span=item.span,
            code="unknown-path",
            suggestion=did_you_mean(path, paths),
            hint=f"`seqc show FILE -e {base.name}` lists every path an override can set",
        ) from None


def bind(call: RawCall, names: tuple[str, ...], span: ir.Span | None) -> dict[str, Raw]:
    """A call's arguments by name, positional ones in `names`' order."""
    if len(call.args) > len(names):
        raise CheckError(
            f"`{call.func}` takes at most {len(names)} argument{'s' * (len(names) != 1)}",
            span=call.args[len(names)].span or span,
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
            raise CheckError(
                f"`{key}` is given twice (by position and by name)",
                span=kspan,
                code="duplicate-argument",
            )
        out[key] = value
    return out


# ------------------------------------------------------------------------------------ ranges


def _range(
    path: str, kind: str, args: dict[str, Raw], span: ir.Span | None, current: Any
) -> tuple[Distribution, list[tuple[str, ir.Span | None]]]:
    """uniform, loguniform, intrange, logintrange: the bounds' checks, and the bounds to probe."""
    integer = kind in INTEGER
    low = _number(args.get("low"), kind, "low", span, integer)
    high = _number(args.get("high"), kind, "high", span, integer)
    step = _number(args["step"], kind, "step", span, integer) if "step" in args else None
    if not integer:
        low, high = float(low), float(high)
        step = None if step is None else float(step)
    bad = args.get("high") or args.get("low")
    if low >= high:
        raise CheckError(
            f"{kind}'s low ({show_value(low)}) must be below its high ({show_value(high)})",
            span=bad.span if bad else span,
            code="bad-distribution",
            hint="a value that does not vary belongs in the experiment, not the space",
        )
    if kind.startswith("log") and low <= 0:
        raise CheckError(
            f"{kind} needs a low above 0, not {show_value(low)}",
            span=args["low"].span or span,
            code="bad-distribution",
            hint="a log scale has no 0 and no negatives: start at a small positive value",
        )
    if step is not None:
        _check_step(kind, low, high, step, args["step"].span or span, span)
    if not integer and isinstance(current, int) and not isinstance(current, bool):
        better = "logintrange" if kind == "loguniform" else "intrange"
        raise CheckError(
            f"`{path}` is an int and {kind} draws floats",
            span=span,
            code="space-wrong-type",
            found=f"`{path}` = {current} in the base experiment",
            suggestion=f"{better}({math.ceil(low)}, {math.floor(high)})",
        )
    if isinstance(current, bool | str):
        raise CheckError(
            f"`{path}` is {'a bool' if isinstance(current, bool) else 'a string'}; "
            f"{kind} draws numbers",
            span=span,
            code="space-wrong-type",
            found=f"`{path}` = {show_value(current)} in the base experiment",
            hint="list its values with choice([...])",
        )
    dist = Distribution(path=path, kind=kind, low=low, high=high, step=step, span=span)  # type: ignore[arg-type]
    return dist, [(dist.text_of(low), args["low"].span), (dist.text_of(high), args["high"].span)]


def _number(raw: Raw | None, kind: str, what: str, span: ir.Span | None, integer: bool) -> Any:
    v = raw.value if raw is not None else None
    if raw is None or isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise CheckError(
            f"{kind}'s {what} must be a number",
            span=raw.span if raw is not None else span,
            code="bad-distribution",
            expected=f"{kind}({', '.join(DISTRIBUTIONS[kind])})",
            found=raw.describe() if raw is not None else "nothing",
        )
    if integer and not isinstance(v, int):
        raise CheckError(
            f"{kind}'s {what} must be a whole number, not {show_value(v)}",
            span=raw.span or span,
            code="bad-distribution",
            hint="uniform and loguniform draw floats",
        )
    return v


def _check_step(
    kind: str, low: float, high: float, step: float, at: ir.Span | None, call: ir.Span | None
) -> None:
    """A step above 0 that reaches `high` from `low` (Optuna would quietly lower the high).
    `at` is the step's span, `call` the distribution's (what the suggestion replaces)."""
    if step <= 0:
        raise CheckError(
            f"{kind}'s step must be above 0, not {show_value(step)}",
            span=at,
            code="bad-distribution",
        )
    count = (high - low) / step
    if abs(count - round(count)) > 1e-9 * max(1.0, abs(count)):
        last = low + math.floor(count) * step
        raise CheckError(
            f"{kind} with step {show_value(step)} from {show_value(low)} never reaches "
            f"{show_value(high)}",
            span=call,
            code="bad-distribution",
            expected="a high that is low plus a whole number of steps",
            suggestion=f"{kind}({show_value(low)}, {show_value(last)}, step = {show_value(step)})",
        )


# ------------------------------------------------------------------------------------ choices


def _choice(
    path: str, args: dict[str, Raw], item: ir.Assign, span: ir.Span | None
) -> tuple[Distribution, list[tuple[str, ir.Span | None]]]:
    values = args.get("values")
    if values is None or not isinstance(values.value, list) or not values.value:
        raise CheckError(
            "choice takes a non-empty list of values",
            span=values.span if values is not None else span,
            code="bad-distribution",
            expected='e.g. choice([2, 3, 4]) or choice(["relu", "gelu"])',
            found=values.describe() if values is not None else "nothing",
        )
    exprs = _list_items(item.value)
    choices: list[Any] = []
    texts: list[str] = []
    probes: list[tuple[str, ir.Span | None]] = []
    for raw, expr in zip(values.value, exprs, strict=True):
        v = raw.value
        if isinstance(v, RawCall | RawName | list | dict):
            text = format_expr(expr)  # a call (`adam(...)`), a name, a collection: as written
            v = text
        else:
            text = show_value(v)
        if any(same_value(v, c) for c in choices):
            raise CheckError(
                f"{text} is in the choice twice", span=raw.span, code="duplicate-choice"
            )
        choices.append(v)
        texts.append(text)
        probes.append((text, raw.span))
    dist = Distribution(
        path=path, kind="choice", choices=tuple(choices), choice_texts=tuple(texts), span=span
    )
    return dist, probes


def _list_items(value: ir.Expr) -> list[ir.Expr]:
    """The item expressions of `choice([...])` (the list given by position or as `values =`)."""
    assert isinstance(value, ir.Call)
    first = value.args[0] if value.args else value.kwargs[0].value
    assert isinstance(first, ir.ListExpr)
    return list(first.items)


# ------------------------------------------------------------------------------------ probes


def _probe(
    program: Program, base: ResolvedExperiment, dist: Distribution, text: str, span: ir.Span | None
) -> None:
    """Resolve the base experiment with `path=text`: the param's own type and range decide.

    A rule between params (`bad-relation`) is not this value's fault alone (the trial that
    samples it may change the other side too): each trial is checked for those."""
    try:
        resolve(program, base.name, [f"{dist.path}={text}"])
    except SeqcError as e:
        if e.code == "bad-relation":
            return
        wrong_type = e.code == "wrong-type"
        if wrong_type and dist.kind in ("uniform", "loguniform") and _int(e.expected):
            hint = "an int takes intrange or logintrange"
        elif wrong_type:
            hint = e.hint or "list values of the param's type"
        else:
            hint = e.hint or "keep the distribution inside the values the param accepts"
        raise CheckError(
            f"{dist.describe()} gives `{dist.path}` the value {text}, which it does not take: "
            f"{e.message}",
            span=span or dist.span,
            code="space-wrong-type" if wrong_type else "space-out-of-range",
            expected=e.expected,
            hint=hint,
        ) from None


def _int(expected: str | None) -> bool:
    """Whether the resolver expected an int there (`int > 0 or none`)."""
    return (expected or "").startswith("int")
