"""`seqc check` and `seqc fmt` do not import the run commands' tree (numpy, the data pipeline):
the heavy commands load when the command line names one, and `seqc --help` still lists them."""

from __future__ import annotations

import subprocess
import sys

from typer.testing import CliRunner

from seqc.cli import app
from seqc.cli.app import HEAVY_COMMANDS


def test_heavy_commands_are_data_and_the_run_commands() -> None:
    from seqc.cli.app import LAZY_COMMANDS as COMMANDS

    assert ("data", *COMMANDS) == HEAVY_COMMANDS


def test_each_lazy_command_is_in_the_module_the_table_names() -> None:
    """`seqc.cli.app.LAZY_COMMANDS` says where each command lives; each group module's
    `COMMANDS` holds exactly the commands the table gives it."""
    import importlib

    from seqc.cli.app import LAZY_COMMANDS, LAZY_GROUPS

    for module in set(LAZY_COMMANDS.values()):
        named = {n for n, m in LAZY_COMMANDS.items() if m == module}
        assert set(importlib.import_module(module).COMMANDS) == named, module
    for name, module in LAZY_GROUPS.items():
        assert importlib.import_module(module).APP.info.name == name


def test_help_lists_every_command() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    for name in ("check", "fmt", "list", "show", "layers", "lsp", *HEAVY_COMMANDS):
        assert f" {name} " in result.output


def test_a_heavy_command_runs_through_the_lazy_group() -> None:
    result = CliRunner().invoke(app, ["train", "--help"])
    assert result.exit_code == 0
    assert "--experiment" in result.output


def test_check_does_not_import_the_run_commands() -> None:
    code = (
        "import sys\n"
        "from seqc.cli import app\n"
        "try:\n"
        "    app(['check', 'examples/lm/shakespeare.seq'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = [m for m in ('seqc.cli.train', 'seqc.cli.data', 'numpy', 'jax')"
        " if m in sys.modules]\n"
        "print('heavy:', heavy)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "heavy: []" in done.stdout, done.stdout + done.stderr
