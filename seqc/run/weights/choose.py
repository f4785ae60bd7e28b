"""Choosing a run's weights on held-out data (`seqc choose`): each kept checkpoint and the mean
of the newest 2, 3, ... of them, scored on one split or manifest, the best taken by a rule fixed
before any figure is read, and every figure kept in `RUN/chosen.json`.

Why: the last checkpoint is not always a run's best on data unlike its training data, and an
average of the last few usually beats any one of them (`seqc.run.weights.average`). Which one to
report is a question for data held out of training and of the test, asked once, by a rule: the
spoken-numbers recogniser's dev (the training voices) fell at every checkpoint while a voice it
never heard scored 3.42 at step 5,000 and 8.18 at 6,000 (docs/results.md, "Speech"). This command
chooses on dev or on any speech manifest held out of training and of the test (recipe 6 of that
corpus spoke dev's numbers in a held-out voice for it), and the test is then read once, with
`--checkpoint`.

The rule: the criterion is WER for a speech task (lower is better), BLEU for a translation task
that lists it (higher), else the split's perplexity or loss (lower). Candidates are scored newest
checkpoint first, then older ones, then the means of the newest 2, 3, ... N; a tie goes to the
first in that order (no averaging, the newer weights). The means are written where `seqc
average` writes them (`RUN/averaged/last-K-step-S`); one already there with the same steps is
scored as it is, not written again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seqc.backends import registry
from seqc.backends.weights import checkpoint_dir
from seqc.run.report import Reporter
from seqc.run.rundir.directory import no_run
from seqc.run.weights.average import FOLDER, RECORD, average
from seqc.spec.errors import UsageError

CHOSEN = "chosen.json"
"""The file in a run directory that records a choice: every candidate's figures, the rule, the
winner."""


@dataclass(frozen=True)
class Candidate:
    """Weights that may be chosen: one checkpoint, or the mean of the newest few."""

    path: Path
    """What `--checkpoint` takes to load them."""
    steps: tuple[int, ...]
    """The steps averaged (one for a checkpoint), oldest first."""

    @property
    def name(self) -> str:
        if len(self.steps) == 1:
            return f"step {self.steps[0]}"
        return f"mean of {len(self.steps)} ({self.steps[0]}-{self.steps[-1]})"


@dataclass(frozen=True)
class Criterion:
    """The figure a choice is made on, and which way is better."""

    name: str
    lower_is_better: bool

    def better(self, a: float, b: float) -> bool:
        """Whether `a` is strictly better than `b` (a tie is not)."""
        return a < b if self.lower_is_better else a > b


@dataclass(frozen=True)
class Choice:
    """What `choose` found: each candidate's figure, in the order scored, and the winner."""

    criterion: Criterion
    scored: list[tuple[Candidate, dict[str, Any]]]
    chosen: Candidate
    record: Path


def criterion(task: str, metrics: set[str]) -> Criterion:
    """WER for speech, BLEU for a translation task that lists it, else perplexity or loss."""
    if task == "asr" and "wer" in metrics:
        return Criterion("wer", lower_is_better=True)
    if task == "seq2seq" and "bleu" in metrics:
        return Criterion("bleu", lower_is_better=False)
    return Criterion("headline", lower_is_better=True)


def candidates(run_dir: Path, averages: bool = True) -> list[Candidate]:
    """The run's kept checkpoints, newest first, then (with `averages`) the means of the newest
    2..N, written by `seqc average` where none with those steps exists yet."""
    if not run_dir.exists():
        raise no_run(run_dir)
    directory = checkpoint_dir(run_dir)
    steps = registry.checkpoint_backend(directory).steps(directory.resolve())
    if not steps:
        raise UsageError(
            f"{run_dir} holds no checkpoint to choose from",
            path=str(directory),
            code="no-checkpoint",
            hint="train first; keep several checkpoints (train.keep_checkpoints) to choose among",
        )
    found = [Candidate(directory / str(step), (step,)) for step in reversed(steps)]
    for k in range(2, len(steps) + 1) if averages else ():
        found.append(_mean(directory, tuple(steps[-k:])))
    return found


def _mean(directory: Path, steps: tuple[int, ...]) -> Candidate:
    """The mean of `steps`, read where `seqc average` put it, or written there now."""
    target = directory.parent / FOLDER / f"last-{len(steps)}-step-{steps[-1]}"
    record = target / RECORD
    if record.is_file():
        try:
            held = tuple(json.loads(record.read_text()).get("steps", ()))
        except (OSError, ValueError):
            held = ()
        if held == steps:
            return Candidate(target, steps)
        raise UsageError(
            f"{target} averages steps {', '.join(map(str, held)) or 'unknown'}, not "
            f"{', '.join(map(str, steps))}",
            path=str(target),
            code="exists",
            hint="it is another run's average, or an older one: move it away and choose again",
        )
    done = average(directory, len(steps), target)
    return Candidate(done.path, tuple(done.steps))


def choose(
    candidates: list[Candidate],
    score: Callable[[Candidate], dict[str, Any]],
    rule: Criterion,
    run_dir: Path,
    about: dict[str, Any],
    reporter: Reporter,
) -> Choice:
    """Score each candidate (`score` returns its figures), take the best by `rule` (a tie to
    the earlier), and write every figure, the rule and the winner to `RUN/chosen.json` with
    `about` (what was scored: the split or manifest, how many examples)."""
    scored: list[tuple[Candidate, dict[str, Any]]] = []
    best: tuple[Candidate, float] | None = None
    for i, candidate in enumerate(candidates):
        figures = score(candidate)
        name, value = measure(figures, rule)
        scored.append((candidate, figures))
        reporter.info(f"[{i + 1}/{len(candidates)}] {candidate.name}: {name} {value:.4g}")
        if best is None or rule.better(value, best[1]):
            best = (candidate, value)
    assert best is not None  # `candidates` refuses a run without checkpoints
    record = run_dir / CHOSEN
    write_record(record, rule, scored, best[0], about)
    return Choice(rule, scored, best[0], record)


def measure(figures: dict[str, Any], rule: Criterion) -> tuple[str, float]:
    """(name, value) of the figure `rule` compares in one candidate's figures: `wer`, `bleu`,
    or the split's headline (`perplexity`, or a CTC model's `loss`)."""
    if rule.name != "headline":
        return rule.name, float(figures[rule.name])
    from seqc.run.scoring.evaluate import headline

    return headline(figures)


def write_record(
    path: Path,
    rule: Criterion,
    scored: list[tuple[Candidate, dict[str, Any]]],
    chosen: Candidate,
    about: dict[str, Any],
) -> None:
    """`RUN/chosen.json`: the rule, what was scored, each candidate's figures, the winner."""
    from seqc.run.rundir.lock import unwritable

    def entry(c: Candidate) -> dict[str, Any]:
        return {"name": c.name, "checkpoint": str(c.path), "steps": list(c.steps)}

    record = {
        **about,
        "criterion": measure(scored[0][1], rule)[0],
        "lower_is_better": rule.lower_is_better,
        "rule": "the best figure; a tie to the earlier candidate (newest checkpoint first, "
        "then older ones, then the means of the newest 2, 3, ...)",
        "candidates": [entry(c) | {"figures": f} for c, f in scored],
        "chosen": entry(chosen),
        "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    try:
        path.write_text(json.dumps(record, indent=2, default=str) + "\n", encoding="utf-8")
    except OSError as e:
        raise unwritable(path.parent, e) from None
