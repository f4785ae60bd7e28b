"""A sweep's objective: which dev figure of the runs it compares, and in which direction.

The figures are the keys of a run's dev records in `metrics.jsonl`, as the training loop writes
them (`seqc.run.train.loop`, `evaluate`): every task reports `loss`, `nll`, `perplexity` and
`accuracy` (a CTC model only `loss`: its frames have no next-token softmax); a recogniser that
lists `wer` or `cer` among its metrics reports both; a translator that lists `bleu` or `chrf`
reports both when the run decodes dev translations (`train.dev_translations` > 0). A sweep
names one as `dev.NAME`, or `TASK.dev.NAME` in a multi-task run, whose records carry the task.

Only `dev`: choosing settings by their test score makes the test score an optimistic estimate,
so a sweep may not name the test split at all.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from seqc.resolve.experiment import ResolvedExperiment
from seqc.spec import ir
from seqc.spec.errors import CheckError, did_you_mean
from seqc.spec.printer import format_expr

Goal = Literal["minimize", "maximize"]

TOKEN_FIGURES = ("loss", "nll", "perplexity", "accuracy")
"""What every task's dev evaluation reports, but a CTC model's."""
CTC_FIGURES = ("loss",)
PAIRS = (("wer", "cer"), ("bleu", "chrf"))
"""Figures computed together: listing one of a pair among a task's metrics reports both."""
NEEDS_TRANSLATIONS = ("bleu", "chrf")

DIRECTION: dict[str, Goal] = {
    "loss": "minimize",
    "nll": "minimize",
    "perplexity": "minimize",
    "wer": "minimize",
    "cer": "minimize",
    "accuracy": "maximize",
    "bleu": "maximize",
    "chrf": "maximize",
}
"""Which way each figure is better: a sweep's `goal` when it does not say."""


class Metric(BaseModel):
    """The dev figure a sweep's trials are compared by."""

    model_config = ConfigDict(frozen=True)

    task: str | None
    """The task whose dev records carry it; None for the experiment's only task (a one-task
    run's records carry no task name)."""
    split: str
    """Always `dev`."""
    name: str
    """The key in the run's `metrics.jsonl` dev records: `perplexity`, `bleu`, `wer`, ..."""
    text: str
    """As written: `dev.perplexity`, `lm.dev.perplexity`."""


def dev_figures(base: ResolvedExperiment, task: str) -> tuple[str, ...]:
    """The figures `task`'s dev records hold in a run of `base`."""
    config = base.config[task]
    loss = config.get("loss")
    figures = list(CTC_FIGURES if getattr(loss, "kind", None) == "ctc" else TOKEN_FIGURES)
    listed = {m.kind for m in config.get("metrics") or ()}
    for pair in PAIRS:
        if listed & set(pair):
            figures += pair
    return tuple(figures)


def metric(text: str, span: ir.Span | None, base: ResolvedExperiment) -> Metric:
    """`dev.NAME` or `TASK.dev.NAME`, checked against what a run of `base` reports."""
    parts = text.split(".")
    task = parts[0] if len(parts) == 3 else None
    if len(parts) not in (2, 3):
        raise CheckError(
            f"`{text}` is not a metric",
            span=span,
            code="bad-metric",
            expected="dev.NAME (dev.perplexity), or TASK.dev.NAME in a multi-task run",
        )
    split, name = parts[-2:]
    if split == "test":
        raise CheckError(
            "a sweep may not tune on the test split",
            span=span,
            code="test-metric",
            suggestion=".".join([*([task] if task else []), "dev", name]),
            hint="settings chosen by their test score make that score an optimistic estimate; "
            "tune on dev and report test once, at the end",
        )
    if split != "dev":
        raise CheckError(
            f"`{split}` is not a split a run scores while it trains",
            span=span,
            code="bad-metric",
            expected="dev",
            suggestion=did_you_mean(split, ("dev",)),
        )
    tasks = base.tasks
    if task is None and len(tasks) > 1:
        raise CheckError(
            f"experiment `{base.name}` trains {len(tasks)} tasks ({', '.join(tasks)}): "
            "say whose metric",
            span=span,
            code="metric-task",
            suggestion=f"{tasks[0]}.dev.{name}",
        )
    if task is not None and task not in tasks:
        raise CheckError(
            f"`{task}` is not a task of experiment `{base.name}`",
            span=span,
            code="unknown-task",
            expected=f"one of {', '.join(tasks)}",
            suggestion=did_you_mean(task, tasks),
        )
    owner = task or tasks[0]
    figures = dev_figures(base, owner)
    if name not in figures:
        listable = [n for pair in PAIRS for n in pair if n not in figures]
        raise CheckError(
            f"task `{owner}` reports no dev `{name}`",
            span=span,
            code="unknown-metric",
            expected=f"one of {', '.join(figures)}",
            suggestion=did_you_mean(name, figures),
            hint=f"a task reports {', '.join(listable)} when its `metrics` list them"
            if name in listable
            else "these are the keys of the run's dev records in metrics.jsonl",
        )
    if name in NEEDS_TRANSLATIONS and not base.config["train"].get("dev_translations"):
        raise CheckError(
            f"dev `{name}` is scored on dev translations, and `{base.name}` decodes none",
            span=span,
            code="metric-off",
            hint="set `train.dev_translations` in the base experiment (e.g. 200)",
        )
    return Metric(task=task if len(tasks) > 1 else None, split=split, name=name, text=text)


def goal(item: ir.Assign | None, found: Metric) -> Goal:
    """`goal = minimize | maximize`, by default the metric's own direction; the opposite of
    its direction is refused (a sweep that maximizes perplexity looks for the worst model)."""
    want = DIRECTION.get(found.name)
    if item is None:
        assert want is not None  # every figure `dev_figures` lists has a direction
        return want
    value = item.value
    text = value.id if isinstance(value, ir.Name) else getattr(value, "value", None)
    if text not in ("minimize", "maximize"):
        raise CheckError(
            "`goal` is minimize or maximize",
            span=value.span,
            code="bad-goal",
            found=format_expr(value),
            suggestion=did_you_mean(text, ("minimize", "maximize"))
            if isinstance(text, str)
            else None,
        )
    if want is not None and want != text:
        better = "lower" if want == "minimize" else "higher"
        raise CheckError(
            f"`{found.text}` is better {better}: `goal = {text}` would search for the worst",
            span=item.value.span,
            code="bad-goal",
            suggestion=want,
            hint="leave `goal` out: it follows from the metric",
        )
    return text  # type: ignore[return-value]
