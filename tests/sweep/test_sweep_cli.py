"""`seqc sweep`'s usage errors: each a located message and exit 2, before anything trains."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import sweep_spec
from typer.testing import CliRunner

from seqc.cli import app as cli


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["sweep", *args])
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["{spec}"], "-s SWEEP is required"),
        (["{spec}", "-s", "tiny.lr", "--workers", "0"], "--workers must be at least 1"),
        (["{spec}", "-s", "tiny.lr", "--trials", "0"], "--trials must be at least 1"),
        (["{spec}", "-s", "tiny.lrr"], "did you mean `tiny.lr`?"),
        (["{folder}/nope.seq", "-s", "tiny.lr"], "no such spec file"),
        (["show"], "show which sweep?"),
        (["show", "{folder}"], "holds no sweep"),
        (["{spec}", "-s", "tiny.lr", "--storage", "nosuch://x"], "cannot open the sweep storage"),
    ],
)
def test_bad_arguments_are_usage_errors(tmp_path: Path, args: list[str], says: str) -> None:
    spec = sweep_spec(tmp_path)
    code, output = _run(*(a.format(spec=spec, folder=tmp_path) for a in args))
    assert code == 2, output
    assert says in output
    assert "Traceback" not in output
