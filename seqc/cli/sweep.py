"""`seqc sweep`: run a `sweep` declaration's trials on Optuna (`seqc.run.sweep`), and
`seqc sweep show` to read what a sweep found.

    seqc sweep FILE -s SWEEP [--workers K] [--storage URL] [--trials N] [--backend B] [--dir D]
    seqc sweep show DIR                  # the folder of a sweep (its journal)
    seqc sweep show --storage URL -s SWEEP

One command with `show` as its first word rather than a command group: a group would read the
spec file's name as a subcommand. A sweep stopped by Ctrl-C or SIGTERM exits 143 with its
running trials checkpointed; the same command resumes it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from seqc.cli.console import err, out, plain_table
from seqc.cli.guard import guarded
from seqc.cli.options import BackendOpt, SweepOpt
from seqc.spec.errors import FileError, UsageError


@guarded
def sweep_cmd(
    target: Annotated[
        str,
        typer.Argument(help="A .seq file, or `show` to report on a sweep.", show_default=False),
    ],
    where: Annotated[
        Path | None,
        typer.Argument(help="With `show`: the sweep's folder.", show_default=False),
    ] = None,
    sweep: SweepOpt = None,
    workers: Annotated[
        int, typer.Option("--workers", help="Worker processes on this machine.")
    ] = 1,
    storage: Annotated[
        str | None,
        typer.Option(
            "--storage",
            help="Optuna storage URL (postgresql://user@host/db, sqlite:///f.db) or a journal "
            "file; default: DIR/study.journal. Workers on other machines join with the same URL.",
        ),
    ] = None,
    trials: Annotated[
        int | None, typer.Option("--trials", help="Trials in all (default: the sweep's).")
    ] = None,
    backend: BackendOpt = None,
    folder: Annotated[
        Path | None,
        typer.Option("--dir", help="The sweep's folder (default: runs/sweeps/SWEEP)."),
    ] = None,
    plots: Annotated[
        bool, typer.Option(help="With `show`: write Optuna's plots as PNGs beside the study.")
    ] = True,
    base_first: Annotated[
        bool,
        typer.Option(
            "--base-first",
            help="Make the base experiment's own values the first trial, so the sweep says how "
            "much better than them it found.",
        ),
    ] = False,
    worker_index: Annotated[int, typer.Option("--worker-index", hidden=True)] = 0,
    quiet_summary: Annotated[bool, typer.Option("--quiet-summary", hidden=True)] = False,
) -> None:
    """Run a sweep's trials on Optuna (each a `seqc train` run), or `show` what one found."""
    if target == "show":
        _show(where, sweep, storage, plots)
        return
    if where is not None:
        raise UsageError(
            f"unexpected argument {where}",
            code="bad-argument",
            hint="seqc sweep FILE -s SWEEP, or seqc sweep show DIR",
        )
    if sweep is None:
        raise UsageError(
            "which sweep? -s SWEEP is required",
            code="missing-sweep",
            hint="`seqc list FILE` lists the sweeps a file declares",
        )
    if workers < 1:
        raise UsageError(f"--workers must be at least 1, not {workers}", code="bad-workers")
    if trials is not None and trials < 1:
        raise UsageError(f"--trials must be at least 1, not {trials}", code="bad-trials")
    _run(
        Path(target),
        sweep,
        workers,
        storage,
        trials,
        backend,
        folder,
        worker_index,
        quiet_summary,
        base_first,
    )


def _run(
    spec: Path,
    name: str,
    workers: int,
    storage: str | None,
    trials: int | None,
    backend: str | None,
    folder: Path | None,
    index: int,
    quiet: bool,
    base_first: bool,
) -> None:
    from seqc.resolve.program import load_program
    from seqc.resolve.sweep import resolve_sweep
    from seqc.run.sweep import study as studies
    from seqc.run.sweep.driver import STOPPED_EXIT, SweepRun

    if not spec.is_file():
        raise FileError(f"no such spec file: {spec}", path=str(spec), code="missing-file")
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)  # the sweep says what happens itself
    program = load_program(spec)
    resolved = resolve_sweep(program, name)
    folder = folder or studies.default_dir(name)
    prefix = f"[worker {index}] " if quiet else ""

    def say(text: str) -> None:
        out.print(Text(prefix + text))
        sys.stdout.flush()

    run = SweepRun(program, resolved, folder, storage, workers, trials, backend, index, base_first)
    if not quiet:
        budget = trials or resolved.trials
        where = storage if storage and studies.is_url(storage) else folder / studies.JOURNAL
        say(
            f"sweep {name}: {budget} trials of {resolved.experiment}, {resolved.goal} "
            f"{resolved.metric.text}; sampler {resolved.sampler.kind}, pruner "
            f"{resolved.pruner.kind}; {workers} worker(s); study in {studies.redacted(str(where))}"
        )
    code = run.run(say)
    if not quiet:
        study = run.open()
        _summary(study, resolved.metric.text, folder)
    if code == STOPPED_EXIT:
        err.print("sweep stopped; run the same command again to resume it")
    if code:
        raise typer.Exit(code)


def _summary(study: Any, metric: str, folder: Path) -> None:
    from seqc.run.sweep import ledger, report

    trials = study.get_trials(deepcopy=False)
    rows = report.rows(study)
    pruned = sum(r.state == "pruned" for r in rows)
    out.print(f"{ledger.counted(trials)} trials done ({pruned} pruned)")
    best = report.best(study)
    if best is not None:
        out.print(f"best: trial {best.number}, {metric} {best.value:.4g}")
        for path, v in best.params.items():
            out.print(Text(f"  {path} = {v!r}"))
        if "command" in best.user_attrs:
            out.print(Text(f"  train it again: {best.user_attrs['command']}"))
    out.print(Text(f"seqc sweep show {folder}: the table, importances and plots"))


def _show(where: Path | None, name: str | None, storage: str | None, plots: bool) -> None:
    from seqc.run.sweep import report
    from seqc.run.sweep import study as studies

    if where is None and storage is None:
        raise UsageError(
            "show which sweep? give its folder, or --storage URL -s SWEEP",
            code="missing-sweep",
            hint="seqc sweep show runs/sweeps/SWEEP",
        )
    if where is not None and storage is None and not (where / studies.JOURNAL).is_file():
        raise FileError(
            f"{where} holds no sweep (no {studies.JOURNAL})",
            path=str(where),
            code="no-sweep",
            hint="give the folder `seqc sweep` printed, or --storage URL -s SWEEP",
        )
    folder = where or Path(".")
    opened = studies.open_storage(storage, folder)
    if name is None:
        names = studies.study_names(opened)
        if len(names) != 1:
            raise UsageError(
                f"the storage holds {len(names)} sweeps; say which with -s",
                code="missing-sweep",
                hint=("it has " + ", ".join(names)) if names else "run one first",
            )
        name = names[0]
    study = studies.load_study(name, opened)
    metric = study.user_attrs.get("metric", "value")
    rows = report.rows(study)
    paths = sorted({p for r in rows for p in r.params})
    table = plain_table(
        ["trial", *paths, metric, "steps", "min", "state", "note"],
        right=["trial", metric, "steps", "min"],
    )
    for r in rows:
        cells = [str(r.number), *(_cell(r.params.get(p)) for p in paths)]
        cells += [_cell(r.value), _cell(r.steps), _cell(r.minutes), r.state, r.note]
        table.add_row(*(Text(c) for c in cells))
    out.print(
        f"sweep {name}: {study.user_attrs.get('experiment', '?')}, "
        f"{study.direction.name.lower()} {metric}"
    )
    out.print(table)
    best = report.best(study)
    if best is None:
        out.print("no complete trial yet")
    else:
        out.print(f"best: trial {best.number}, {metric} {best.value:.4g}")
        if "command" in best.user_attrs:
            out.print(Text(f"  train it again: {best.user_attrs['command']}"))
        for line in _differs(study, best):
            out.print(Text("  " + line))
    imp = report.importances(study)
    if imp:
        out.print("parameter importances (fANOVA):")
        for path, v in imp.items():
            out.print(Text(f"  {path}: {v:.2f}"))
    if plots and where is not None:
        for png in report.plots(study, where / "plots"):
            out.print(Text(f"wrote {png}"))


def _differs(study: Any, best: Any) -> list[str]:
    """How the best trial's resolved experiment differs from the base experiment's, as `seqc
    diff` says it (each value with where it was set); its values alone where the spec or the
    trial's run directory is not at hand (another machine's run, a moved spec)."""
    from seqc.resolve.diff import ResolvedSide, differences, format_differences
    from seqc.resolve.experiment import resolve
    from seqc.resolve.program import load_program
    from seqc.run.rundir.record import RESOLVED, from_run_dir
    from seqc.spec.errors import SeqcError

    name = study.user_attrs.get("experiment", "the base experiment")
    file, run_dir = study.user_attrs.get("file"), best.user_attrs.get("run_dir")
    fallback = [
        f"differs from {name} in: " + ", ".join(f"{k} = {v!r}" for k, v in best.params.items())
    ]
    if not file or not run_dir or not (Path(run_dir) / RESOLVED).is_file():
        return fallback
    try:
        base = resolve(load_program(Path(file)), name)
        diffs = differences(ResolvedSide.from_experiment(base, name), from_run_dir(Path(run_dir)))
        # a size the data gives (`<tiny.vocab_size>` unread, a number in the run) is no change
        diffs = [d for d in diffs if not _symbolic(d.a)]
    except SeqcError:
        return fallback
    return [
        f"differs from {name} (seqc diff):",
        *("  " + line for line in format_differences(diffs)),
    ]


def _symbolic(text: str | None) -> bool:
    return text is not None and text.startswith("<") and text.endswith(">") and " " not in text


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


COMMANDS = {"sweep": sweep_cmd}
