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
from seqc.cli.options import DataCacheOpt
from seqc.data.prepare import CORPORA, describe, prepare, state

APP = typer.Typer(
    name="data",
    help="Prepare the corpora the example specs train on (into .cache/data/NAME).",
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
