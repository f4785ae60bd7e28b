"""`seqc diff A B`: two experiments, an experiment and its overrides, a run and an experiment,
two runs; and each way the input can be wrong, a located error with exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from seqc.cli import app
from seqc.resolve.experiment import resolve
from seqc.resolve.program import load_program
from seqc.run.rundir.directory import RunDir

ROOT = Path(__file__).resolve().parents[2]
LM = str(ROOT / "examples" / "lm" / "shakespeare.seq")
runner = CliRunner()


def diff(*args: str) -> tuple[int, list[str]]:
    result = runner.invoke(app, ["diff", *args])
    assert "Traceback" not in result.output
    return result.exit_code, result.output.splitlines()


def line(lines: list[str], path: str) -> str:
    return next(s.strip() for s in lines if s.strip().startswith(f"{path}: "))


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory of `lm.shakespeare.quick --set train.steps=3`, as `seqc train` starts one
    (frozen spec, resolved.json, run.json), written by the run directory's code: no training."""
    program = load_program(LM)
    resolved = resolve(program, "lm.shakespeare.quick", ["train.steps=3"])
    run = tmp_path_factory.mktemp("runs") / "quick"
    run.mkdir()
    RunDir(run).start(program, resolved, {"experiment": resolved.name})
    return run


def test_two_experiments_of_one_file() -> None:
    code, lines = diff(LM, "-e", "lm.shakespeare.tiny", "-e", "lm.shakespeare.small")
    assert code == 0
    assert lines[:2] == [f"a: lm.shakespeare.tiny in {LM}", f"b: lm.shakespeare.small in {LM}"]
    assert lines[2].startswith("5 value(s) differ, a -> b")
    steps = line(lines, "train.steps")
    assert steps.startswith("train.steps: 1000 -> 20000   (")
    assert steps.endswith("shakespeare.seq:51:5; " + LM + ":71:3)")
    assert line(lines, "lm.model.d").endswith(f"(default; {LM}:68:3)")


def test_what_an_override_changes() -> None:
    code, lines = diff(LM, "-e", "lm.shakespeare.quick", "--set-b", "train.steps=300")
    assert code == 0
    assert lines[1] == f"b: lm.shakespeare.quick in {LM} --set train.steps=300"
    assert lines[2].startswith("1 value(s) differ")
    assert line(lines, "train.steps") == (
        f"train.steps: 400 -> 300   ({LM}:82:3; --set train.steps=300)"
    )


def test_no_difference_says_so_and_exits_0() -> None:
    code, lines = diff(f"{LM}:lm.shakespeare.quick", LM, "-e", "lm.shakespeare.quick")
    assert code == 0
    assert lines[2] == "no differences: both sides resolve to the same 83 values"


def test_a_run_directory_against_an_experiment(quick_run: Path) -> None:
    code, lines = diff(str(quick_run), f"{LM}:lm.shakespeare.tiny")
    assert code == 0
    assert lines[0] == f"a: {quick_run} (lm.shakespeare.quick)"
    steps = " ".join(line(lines, "train.steps").split())  # the origins' column aligned
    assert steps == f"train.steps: 3 -> 1000 (--set train.steps=3; {LM}:51:5)"
    assert line(lines, "lm.input.buckets").startswith(
        "lm.input.buckets: {64: 32} -> {32: 128, 64: 64, 128: 32}"
    )


def test_two_runs(quick_run: Path, tmp_path: Path) -> None:
    program = load_program(LM)
    other = tmp_path / "other"
    other.mkdir()
    resolved = resolve(program, "lm.shakespeare.quick", ["train.steps=5", "lm.model.dropout=0.2"])
    RunDir(other).start(program, resolved, {"experiment": resolved.name})
    code, lines = diff(str(quick_run), str(other))
    assert code == 0
    assert [s.split(":")[0].strip() for s in lines[3:]] == ["train.steps", "lm.model.dropout"]
    assert line(lines, "lm.model.dropout") == (
        "lm.model.dropout: 0.1 -> 0.2   (default; --set lm.model.dropout=0.2)"
    )
    code, lines = diff(str(quick_run), str(quick_run))
    assert (code, lines[2]) == (0, "no differences: both sides resolve to the same 83 values")


def test_a_missing_spec_is_a_file_error() -> None:
    code, lines = diff("nope.seq", "-e", "a", "-e", "b")
    assert code == 2
    assert lines[0] == "nope.seq: file error [file-not-found]: no such file: nope.seq"


def test_an_unknown_experiment_suggests_one() -> None:
    code, lines = diff(LM, "-e", "lm.shakespeare.tiny", "-e", "lm.shakespeare.qiuck")
    assert code == 2
    assert "[unknown-experiment]: no experiment named `lm.shakespeare.qiuck`" in lines[0]
    assert "  did you mean `lm.shakespeare.quick`?" in lines


def test_a_bad_override_points_at_the_flag() -> None:
    code, lines = diff(LM, "-e", "lm.shakespeare.quick", "--set-b", "lm.model.dd=3")
    assert code == 2
    assert lines[0].startswith("<command line>:1:7: resolve error [unknown-param]")
    assert "  did you mean `d`?" in lines


def test_a_folder_that_is_no_run(tmp_path: Path) -> None:
    code, lines = diff(str(tmp_path), f"{LM}:lm.shakespeare.tiny")
    assert code == 2
    assert lines[0] == (
        f"{tmp_path}: file error [bad-run-record]: {tmp_path} is not a run directory: "
        "it holds no resolved.json"
    )


def test_a_corrupt_record_is_located(tmp_path: Path, quick_run: Path) -> None:
    (tmp_path / "resolved.json").write_text('{"config": {"train": \n')
    code, lines = diff(str(quick_run), str(tmp_path))
    assert code == 2
    assert lines[0].startswith(f"{tmp_path}/resolved.json:2:1: file error [bad-run-record]: ")


def test_neither_a_file_nor_a_run(tmp_path: Path) -> None:
    code, lines = diff(str(tmp_path / "nothing"), f"{LM}:lm.shakespeare.tiny")
    assert code == 2
    assert "[file-not-found]: no such file or run directory" in lines[0]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        ([LM], "missing-option", "compares two experiments of it: give -e twice"),
        ([LM, LM, "-e", "lm.shakespeare.tiny"], "missing-option", "say which experiment"),
        ([f"{LM}:lm.shakespeare.tiny"], "missing-option", "needs a second side"),
        (
            [f"{LM}:lm.shakespeare.tiny", f"{LM}:lm.shakespeare.quick", "-e", "x"],
            "bad-option",
            "-e x names the experiment of no side",
        ),
        ([LM, "-e", "a", "-e", "b", "-e", "c"], "bad-option", "give -e twice"),
    ],
    ids=["no-e", "too-few-e", "one-side", "extra-e", "three-e"],
)
def test_sides_and_experiments_that_do_not_pair(args: list[str], code: str, message: str) -> None:
    status, lines = diff(*args)
    assert status == 2
    assert f"usage error [{code}]" in lines[0] and message in lines[0]


def test_overrides_of_a_run_are_refused(quick_run: Path) -> None:
    status, lines = diff(str(quick_run), f"{LM}:lm.shakespeare.tiny", "--set-a", "train.steps=1")
    assert status == 2
    assert f"{quick_run}: usage error [bad-option]: --set-a overrides an experiment" in lines[0]
