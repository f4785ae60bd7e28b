"""Paths a command will write: every wrong one is a located error before any work, never a
crash after it (`seqc.data.targets`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from seqc.cli import app
from seqc.data.targets import new_folder, output_file, output_folder
from seqc.spec.errors import FileError

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


def _code(fn: object, *args: object) -> str:
    with pytest.raises(FileError) as info:
        fn(*args)  # type: ignore[operator]
    assert "--opt" in info.value.message and info.value.hint
    return info.value.code


def test_a_folder_target_refuses_a_file_on_its_way(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    assert _code(output_folder, tmp_path / "file", "--opt") == "not-a-folder"
    assert _code(output_folder, tmp_path / "file" / "sub", "--opt") == "not-a-folder"
    assert output_folder(tmp_path / "new" / "deeper", "--opt") == tmp_path / "new" / "deeper"
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    assert output_folder(tmp_path / "full", "--opt") == tmp_path / "full"  # may hold things
    assert _code(new_folder, tmp_path / "full", "--opt", "weights") == "exists"
    assert new_folder(tmp_path / "empty", "--opt", "weights") == tmp_path / "empty"


def test_a_file_target_needs_its_folder_a_name_and_a_known_suffix(tmp_path: Path) -> None:
    assert _code(output_file, tmp_path, "--opt", (".png",)) == "is-a-folder"
    assert _code(output_file, tmp_path / "none" / "x.png", "--opt", (".png",)) == "no-folder"
    assert _code(output_file, tmp_path / "x.txt", "--opt", (".png", ".svg")) == "bad-suffix"
    assert _code(output_file, tmp_path / "x", "--opt", (".png",)) == "bad-suffix"
    assert output_file(tmp_path / "x.PNG", "--opt", (".png",)) == tmp_path / "x.PNG"
    assert output_file(tmp_path / "any.name", "--opt") == tmp_path / "any.name"


def test_data_prepare_into_a_file_is_a_located_error(tmp_path: Path) -> None:
    """`seqc data prepare zipf --cache-dir FILE` printed a raw traceback (exit 1): the `data`
    commands were mounted outside the error guard, and the path was not checked."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for where in (blocker, blocker / "sub"):
        result = runner.invoke(app, ["data", "prepare", "zipf", "--cache-dir", str(where)])
        assert result.exit_code == 2, result.output
        assert "not-a-folder" in result.output and "Traceback" not in result.output


def test_commands_check_the_paths_they_write_before_working(tmp_path: Path) -> None:
    """`seqc export --out FILE`, `seqc convert --out FILE`, `seqc place --gantt` into a missing
    folder, with a suffix nothing draws, or at a folder (it wrote DIR.png and said DIR), and
    `--json` into a missing folder: each crashed (exit 3) after its work, or misreported."""
    spec = str(ROOT / "examples" / "lm" / "shakespeare.seq")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    place = ["place", spec, "-e", "lm.shakespeare.quick"]
    cases = [
        (["export", spec, "-e", "lm.shakespeare.quick", "--out", str(blocker)], "not-a-folder"),
        (["convert", str(tmp_path), "--to", "tf", "--out", str(blocker)], "not-a-folder"),
        ([*place, "--gantt", str(tmp_path / "none" / "x.png")], "no-folder"),
        ([*place, "--gantt", str(tmp_path / "out.txt")], "bad-suffix"),
        ([*place, "--gantt", str(tmp_path)], "is-a-folder"),
        ([*place, "--json", str(tmp_path / "none" / "x.json")], "no-folder"),
    ]
    for args, code in cases:
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert f"[{code}]" in result.output and "internal error" not in result.output, args
    drawn = runner.invoke(app, [*place, "--gantt", str(tmp_path / "g.svg")])
    assert drawn.exit_code == 0, drawn.output
    assert (tmp_path / "g.svg").is_file() and f"gantt: {tmp_path / 'g.svg'}" in drawn.output
