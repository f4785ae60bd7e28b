"""`seqc data ...`: preparing the corpora the example specs read (`seqc.data.prepare`).

Its commands run under the same guard as every other (`seqc.cli.guard`): a data error (unknown
corpus, source not reachable, a tool not installed) prints its message and hint and exits 2,
anything else exits 3, `--debug` shows the traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from seqc.cli.guard import guarded
from seqc.cli.options import DataCacheOpt, ExpOpt, FileArg, SetOpt, TaskOpt, TokenizerCacheOpt
from seqc.data.prepare import CORPORA, describe, prepare, state

APP = typer.Typer(
    name="data",
    help="Prepare the corpora the example specs train on (into .cache/data/NAME), and encode "
    "an experiment's splits into the cache its runs read.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@APP.command("prepare")
@guarded
def prepare_cmd(
    name: Annotated[str, typer.Argument(help=f"Corpus: {', '.join(CORPORA)}.")],
    cache_dir: DataCacheOpt = None,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even if prepared.")] = False,
    source: Annotated[
        Path | None,
        typer.Option(
            "--source",
            help="Use a local copy of the source instead of fetching it (see `seqc data list`).",
        ),
    ] = None,
) -> None:
    """Build a corpus's train/dev/test files and manifest; skip it if already prepared."""
    typer.echo(describe(prepare(name, cache_dir, force=force, source=source)))


@APP.command("list")
@guarded
def list_cmd(cache_dir: DataCacheOpt = None) -> None:
    """The corpora seqc can prepare, and whether each is prepared."""
    for name, spec in CORPORA.items():
        typer.echo(
            f"{name}: {spec.description}\n  {state(name, cache_dir)}\n"
            f"  --source: {spec.source_help}"
        )


@APP.command("encode")
@guarded
def encode_cmd(
    spec: FileArg,
    experiment: ExpOpt,
    set_: SetOpt = None,
    task: TaskOpt = None,
    cache_dir: TokenizerCacheOpt = None,
    workers: Annotated[
        int | None,
        typer.Option("--workers", min=1, help="Processes that tokenise (default: CPUs, ≤ 4)."),
    ] = None,
) -> None:
    """Tokenise an experiment's splits once into the cache (what its first run would do), with
    its progress and throughput: every later run, process and resume reads the arrays."""
    from seqc.cli.encode_progress import EncodeProgress
    from seqc.data.pipeline import InputPipeline
    from seqc.resolve.experiment import resolve
    from seqc.resolve.program import load_program

    resolved = resolve(load_program(spec), experiment, set_)
    tasks = [task] if task else list(resolved.tasks)
    kwargs = {"cache_dir": cache_dir} if cache_dir is not None else {}
    for name in tasks:
        with EncodeProgress(name) as progress:
            pipeline = InputPipeline.for_task(
                resolved, name, workers=workers, progress=progress.update, **kwargs
            )
        for note in pipeline.notes:
            typer.echo(f"note: {note}", err=True)
        typer.echo(pipeline.summary())
        typer.echo(progress.describe())
