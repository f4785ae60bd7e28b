"""A trained model loaded for use: weights read from a run directory or checkpoints of either
backend, checked against the session's model, restored into a model on the backend asked for
(`seqc.run.decoding.opened` makes a decoder of it, or of an exported artifact).

Why one module: `seqc eval`, `decode` and `export` all load what was trained, and each must
refuse the same things (another run's weights, a checkpoint of another model) with the same
message, and say the same things (a damaged newer checkpoint passed over, weights moved between
backends).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqc.backends import registry
from seqc.backends.api import Model, Weights
from seqc.run.report import PlainReporter, Reporter
from seqc.run.session import Session

if TYPE_CHECKING:  # imported where it is built, so that a restore alone loads no decoder
    pass


def run_backend(session: Session, backend: str | None) -> str:
    """The backend a command runs on: `--backend`, else the experiment's `backend`."""
    return registry.check_backend(backend or session.resolved.config["backend"])


def checked_weights(
    session: Session, source: Path, reporter: Reporter | None = None
) -> tuple[Weights, dict[str, Any]]:
    """The weights at `source` (a run directory or checkpoints of either backend), checked
    against the session's model, and its params matched to the model's by layer path. A
    damaged newer checkpoint passed over is a warning; a task of a multi-task model leaves
    the other tasks' params behind."""
    from seqc.backends.weights import match_params, names_weights, read_weights
    from seqc.run.rundir.directory import no_run
    from seqc.run.rundir.identity import check_use, run_of

    reporter = reporter or PlainReporter()
    if not names_weights(source):
        raise no_run(source)
    run = run_of(source)
    if run is not None:  # a run's weights: with its own model and tokenizer only
        check_use(run, session)
    weights = read_weights(source)
    for why in weights.skipped:
        reporter.warn(f"{why}; using step {weights.step}")
    if session.others:  # one task of a multi-task model: the other tasks' params stay behind
        kept = {k: v for k, v in weights.params.items() if k not in session.others}
        weights = dataclasses.replace(weights, params=kept)
    return weights, match_params(session.graph, weights)


@dataclass(frozen=True)
class Restored:
    """A trained model on a backend: the model, its state (`state["params"]`), and the
    `Weights` read, whose step and path name what was loaded."""

    model: Model
    state: Any
    weights: Weights


def restore(
    session: Session, source: Path, backend: str, reporter: Reporter | None = None
) -> Restored:
    """The model on `backend` with the weights of `source`, written by either backend (moved
    tensor by tensor by layer path, which is said)."""
    reporter = reporter or PlainReporter()
    weights, params = checked_weights(session, source, reporter)
    model = registry.backend(backend).model(session.compiled, session.train_config)
    state = model.with_params(params)
    if weights.backend != backend:
        reporter.info(
            f"loaded the {registry.title(weights.backend)} checkpoint (step {weights.step}) "
            f"into {registry.title(backend)}, tensor by tensor by layer path"
        )
    return Restored(model, state, weights)


def artifact_task(
    spec: Path, experiment: str, overrides: list[str] | None, held: str | None
) -> str | None:
    """The task an artifact holds, when it is one of the experiment's several tasks (a
    one-task experiment takes its task; another experiment's artifact is refused later)."""
    from seqc.resolve.experiment import resolve
    from seqc.resolve.program import load_program

    tasks = resolve(load_program(spec), experiment, overrides or []).tasks
    return held if len(tasks) > 1 and held in tasks else None


@dataclass(frozen=True)
class Source:
    """What to decode with, as `seqc decode` is given it: a spec's experiment and its run's
    weights, or an exported artifact (the spec then optional: given, the artifact is checked
    against it)."""

    spec: Path | None = None
    experiment: str | None = None
    overrides: tuple[str, ...] = ()
    run_dir: Path | None = None
    checkpoint: Path | None = None
    cache_dir: Path | None = None
    backend: str | None = None
    task: str | None = None
    artifact: Path | None = None
