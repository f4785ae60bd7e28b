"""`seqc diff A B`: the resolved values two experiments or runs disagree on, each with where it
was set on either side (Lingvo's params text diff; the logic is `seqc.resolve.diff`).

    seqc diff FILE -e EXP_A -e EXP_B            # two experiments of one file
    seqc diff FILE -e EXP --set-b train.steps=300   # what an override changes
    seqc diff RUN_DIR FILE:EXP                  # a run against an experiment
    seqc diff RUN_DIR_A RUN_DIR_B               # two runs (a sweep's trials)

A side is a run directory (a folder `seqc train` wrote: its `resolved.json`), `FILE:EXPERIMENT`,
or a bare `FILE`, which takes the next `-e` in order. Options cannot attach to one positional
argument, so the overrides of each side have a flag of their own (`--set-a`, `--set-b`) rather
than a `--set` whose side would depend on where it stands. A lazy command (`seqc.cli.app`):
nothing here loads until `seqc diff` runs, and it loads no ML framework.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from seqc.cli.console import out
from seqc.cli.guard import guarded

if TYPE_CHECKING:
    from seqc.resolve.diff import ResolvedSide

SideAArg = Annotated[
    str,
    typer.Argument(
        help="Side a: a run directory, FILE:EXPERIMENT, or a FILE that takes the first -e.",
        show_default=False,
        metavar="A",
    ),
]
SideBArg = Annotated[
    str | None,
    typer.Argument(
        help="Side b, as A; left out, A is a FILE and two -e name two experiments of it.",
        show_default=False,
        metavar="B",
    ),
]
ExperimentsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "-e",
        "--experiment",
        help="Registry name of an experiment, for each bare FILE in order (repeatable).",
        show_default=False,
    ),
]
SetAOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set-a",
        help="Override a value of side A (an experiment): --set-a train.steps=200 (repeatable).",
        show_default=False,
    ),
]
SetBOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set-b",
        help="Override a value of side B (an experiment): --set-b train.steps=200 (repeatable).",
        show_default=False,
    ),
]


@dataclass
class _Source:
    """What one side of the command line names: a run directory, or a spec's experiment."""

    token: str
    run: Path | None = None
    file: Path | None = None
    experiment: str | None = None
    overrides: list[str] = field(default_factory=list)


@guarded
def diff(
    a: SideAArg,
    b: SideBArg = None,
    experiments: ExperimentsOpt = None,
    set_a: SetAOpt = None,
    set_b: SetBOpt = None,
) -> None:
    """Print the values two experiments or runs resolve differently, and where each was set."""
    from seqc.resolve.diff import differences, format_differences
    from seqc.spec.printable import printable

    source_a, source_b = _sources([a] if b is None else [a, b], list(experiments or []))
    pairs = ((source_a, set_a, "--set-a"), (source_b, set_b, "--set-b"))
    for source, overrides, flag in pairs:
        if overrides and source.run is not None:
            from seqc.spec.errors import UsageError

            raise UsageError(
                f"{flag} overrides an experiment, and {source.token} is a run directory",
                code="bad-option",
                path=source.token,
                hint="a run's values are what it ran; give its spec as FILE:EXPERIMENT to "
                "try other values",
            )
        source.overrides = list(overrides or [])
    programs: dict[Path, Any] = {}
    side_a, side_b = _side(source_a, programs), _side(source_b, programs)
    out.print(printable(f"a: {side_a.label}"))
    out.print(printable(f"b: {side_b.label}"))
    found = differences(side_a, side_b)
    if not found:
        out.print(f"no differences: both sides resolve to the same {len(side_a.values)} values")
        return
    out.print(f"{len(found)} value(s) differ, a -> b (where a set it; where b set it):")
    for line in format_differences(found):
        out.print(f"  {line}")


def _sources(tokens: list[str], experiments: list[str]) -> tuple[_Source, _Source]:
    """The two sides the positional arguments and the `-e`s name (see the module docstring)."""
    from seqc.spec.errors import UsageError

    sources = [_classify(t) for t in tokens]
    if len(sources) == 1:
        only = sources[0]
        if only.file is None or only.experiment is not None:
            raise UsageError(
                f"seqc diff needs a second side to compare {only.token} with",
                code="missing-option",
                path=only.token,
                expected="seqc diff A B, each a run directory or FILE:EXPERIMENT, "
                "or seqc diff FILE -e A -e B",
            )
        if not 1 <= len(experiments) <= 2:
            raise UsageError(
                f"seqc diff {only.token} compares two experiments of it: give -e twice "
                "(or once, with --set-a or --set-b)",
                code="missing-option" if not experiments else "bad-option",
                path=only.token,
                found=" ".join(f"-e {e}" for e in experiments) or "no -e",
            )
        return (
            _Source(only.token, file=only.file, experiment=experiments[0]),
            _Source(only.token, file=only.file, experiment=experiments[-1]),
        )
    queue = list(experiments)
    for source in sources:
        if source.file is not None and source.experiment is None:
            if not queue:
                raise UsageError(
                    f"{source.token} is a spec: say which experiment of it to compare",
                    code="missing-option",
                    path=source.token,
                    hint=f"add -e EXPERIMENT, or write {source.token}:EXPERIMENT",
                )
            source.experiment = queue.pop(0)
    if queue:
        raise UsageError(
            f"-e {queue[0]} names the experiment of no side: each bare FILE takes one -e",
            code="bad-option",
            hint="a run directory and FILE:EXPERIMENT take none",
        )
    return sources[0], sources[1]


def _classify(token: str) -> _Source:
    """A positional argument: a folder is a run directory, a file a spec; `FILE:EXP` where no
    file has the whole name. Anything else is left to the spec reader to report (a missing
    `.seq` file), or reported here as neither a file nor a run directory."""
    path = Path(token)
    if path.is_dir():
        return _Source(token, run=path)
    if path.exists():
        return _Source(token, file=path)
    file, colon, experiment = token.rpartition(":")
    if colon and file and experiment:
        return _Source(token, file=Path(file), experiment=experiment)
    if path.suffix == ".seq":
        return _Source(token, file=path)
    from seqc.spec.errors import FileError

    raise FileError(
        f"no such file or run directory: {token}",
        path=token,
        code="file-not-found",
        hint="a side is a run directory, a .seq file with -e EXPERIMENT, or FILE:EXPERIMENT",
    )


def _side(source: _Source, programs: dict[Path, Any]) -> ResolvedSide:
    """One side, resolved as `seqc show` resolves it, or read from a run's record; a spec both
    sides name is loaded once."""
    if source.run is not None:
        from seqc.run.rundir.record import from_run_dir

        return from_run_dir(source.run)
    from seqc.resolve.diff import ResolvedSide
    from seqc.resolve.experiment import resolve
    from seqc.resolve.program import load_program

    assert source.file is not None and source.experiment is not None
    key = source.file.absolute()
    if key not in programs:
        programs[key] = load_program(source.file)
    resolved = resolve(programs[key], source.experiment, source.overrides)
    label = f"{resolved.name} in {source.file}"
    if source.overrides:
        label += "".join(f" --set {o}" for o in source.overrides)
    return ResolvedSide.from_experiment(resolved, label)


COMMANDS: dict[str, Callable[..., Any]] = {"diff": diff}
"""This module's command, loaded by `seqc.cli.app` when the command line names it."""
