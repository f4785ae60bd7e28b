"""The `seqc` command line: every command, one module per group (`seqc.cli.app` lists them),
under one error guard (`seqc.cli.guard`), printing through `seqc.cli.console`.

`seqc = "seqc.cli:main"` (pyproject) runs `main`; `app` is the Typer app tests invoke."""

from seqc.cli.app import app, main

__all__ = ["app", "main"]
