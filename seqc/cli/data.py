"""`seqc data ...`: preparing the corpora the example specs read.

Mounted by `seqc.cli` as the `data` sub-command. A data error (unknown corpus, source not
reachable) prints its message and hint and exits with code 2, as spec errors do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from seqc.data.prepare import CORPORA, describe, prepare, state
from seqc.spec.errors import SeqcError

data_app = typer.Typer(
    help="Prepare the corpora the example specs train on (into .cache/data/NAME).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

CacheOpt = Annotated[
    Path | None,
    typer.Option(
        "--cache-dir",
        help="Folder holding one sub-folder per corpus. [default: .cache/data]",
        show_default=False,
    ),
]


@data_app.command("prepare")
def prepare_cmd(
    name: Annotated[str, typer.Argument(help=f"Corpus: {', '.join(CORPORA)}.")],
    cache_dir: CacheOpt = None,
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
    try:
        result = prepare(name, cache_dir, force=force, source=source)
    except SeqcError as e:
        typer.echo(e.render(), err=True)
        raise typer.Exit(2) from None
    typer.echo(describe(result))


@data_app.command("list")
def list_cmd(cache_dir: CacheOpt = None) -> None:
    """The corpora seqc can prepare, and whether each is prepared."""
    for name, spec in CORPORA.items():
        typer.echo(
            f"{name}: {spec.description}\n  {state(name, cache_dir)}\n"
            f"  --source: {spec.source_help}"
        )
