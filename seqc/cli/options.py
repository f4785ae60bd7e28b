"""The arguments and options several commands share, each defined once: one flag, one meaning,
one help text wherever it appears.

`-e/--experiment` comes in two kinds: `ExpOpt`, required (a command that runs one experiment:
`seqc train` without it is a usage error, exit 2, before anything is read), and
`OptionalExpOpt` (`seqc check`: every experiment unless one is named; `seqc decode`: not needed
with `--artifact`). `--cache-dir` names two different folders, so it is two types:
`TokenizerCacheOpt` (the run commands and `seqc data encode`) and `DataCacheOpt` (`seqc data
prepare` and `list`).

This module imports nothing heavy: the front end's commands read it on every start.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

FileArg = Annotated[Path, typer.Argument(help="A .seq file.", show_default=False)]
"""The spec a command reads."""

_EXPERIMENT_HELP = "Registry name of an experiment."

ExpOpt = Annotated[str, typer.Option("-e", "--experiment", help=_EXPERIMENT_HELP)]
"""The experiment a command runs: required."""

OptionalExpOpt = Annotated[str | None, typer.Option("-e", "--experiment", help=_EXPERIMENT_HELP)]
"""An experiment a command may be given (`check`: one of all; `decode`: none with --artifact)."""

SweepOpt = Annotated[
    str | None,
    typer.Option("-s", "--sweep", help="Registry name of a sweep.", show_default=False),
]
"""A sweep a command may be given (`show`: one instead of an experiment)."""

SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a value: --set train.steps=200 (repeatable)."),
]

RunDirOpt = Annotated[
    Path | None,
    typer.Option("--run-dir", help="Run directory (default: runs/<experiment>)."),
]

TokenizerCacheOpt = Annotated[
    Path | None,
    typer.Option("--cache-dir", help="Tokenizers and encoded splits (default .cache/tokenizers)."),
]
"""`--cache-dir` of the commands that read a spec's data: where tokenizers and the encoded
splits are kept (`seqc data encode` too)."""

DataCacheOpt = Annotated[
    Path | None,
    typer.Option(
        "--cache-dir",
        help="Folder holding one sub-folder per corpus. [default: .cache/data]",
        show_default=False,
    ),
]
"""`--cache-dir` of `seqc data`: where prepared corpora are kept."""

BackendOpt = Annotated[
    str | None,
    typer.Option("--backend", help="jax or tf (default: the experiment's `backend`)."),
]

TaskOpt = Annotated[
    str | None,
    typer.Option(
        "--task",
        help="A task of a multi-task experiment (default: its only task; eval and export take "
        "every task).",
    ),
]

CheckpointOpt = Annotated[
    Path | None,
    typer.Option(
        "--checkpoint",
        help="Weights to load: a run directory or checkpoints folder written by either backend "
        "(default: the run directory's).",
    ),
]
