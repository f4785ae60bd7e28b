"""`seqc.resolve.diff`: how two resolved experiments, or a run and an experiment, differ, value
by value, with where each side set its value (the library `seqc diff` and `seqc sweep show`
print with)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny_specs import COMMON, LM_SPEC

from seqc.resolve.diff import (
    Difference,
    ResolvedSide,
    differences,
    experiment_record,
    format_differences,
)
from seqc.resolve.experiment import ResolvedExperiment, resolve
from seqc.resolve.program import Program, load_program
from seqc.run.rundir.directory import RunDir
from seqc.run.rundir.record import RESOLVED, from_run_dir
from seqc.spec.errors import FileError

ROOT = Path(__file__).resolve().parents[2]
LM = ROOT / "examples" / "lm" / "shakespeare.seq"

SGD = """
experiment tiny.sgd extends tiny {
  train.optimizer = sgd(lr = 0.5, momentum = 0.9)
  train.steps = 40
}
"""
"""An experiment whose optimizer is another kind: each side has args the other lacks."""


@pytest.fixture(scope="module")
def shakespeare() -> Program:
    return load_program(LM)


@pytest.fixture
def tiny(tmp_path: Path) -> Program:
    """`LM_SPEC` (adam) and `tiny.sgd`, written in a temporary folder."""
    spec = tmp_path / "lm.seq"
    spec.write_text(LM_SPEC.format(common=COMMON.as_posix()) + SGD)
    return load_program(spec)


def side(program: Program, name: str, *overrides: str) -> ResolvedSide:
    return ResolvedSide.from_experiment(resolve(program, name, list(overrides)))


def by_path(diffs: list[Difference]) -> dict[str, Difference]:
    return {d.path: d for d in diffs}


def test_two_experiments_differ_where_the_child_sets_values(shakespeare: Program) -> None:
    found = by_path(
        differences(
            side(shakespeare, "lm.shakespeare.tiny"), side(shakespeare, "lm.shakespeare.small")
        )
    )
    assert list(found) == [
        "description",
        "train.steps",
        "lm.model.d",
        "lm.model.layers",
        "lm.model.heads",
    ]
    steps = found["train.steps"]
    assert (steps.a, steps.b) == ("1000", "20000")
    assert steps.a_origin.endswith("shakespeare.seq:51:5")  # `steps = 1000` in tiny
    assert steps.b_origin.endswith("shakespeare.seq:71:3")  # `train.steps = 20000` in small
    d = found["lm.model.d"]
    assert (d.a, d.b, d.a_origin) == ("256", "512", "default")
    assert found["description"].b == '"8-layer, 512-wide Transformer LM"'  # as .seq text


def test_a_dict_with_number_keys_is_one_value(shakespeare: Program) -> None:
    found = by_path(
        differences(
            side(shakespeare, "lm.shakespeare.tiny"), side(shakespeare, "lm.shakespeare.quick")
        )
    )
    buckets = found["lm.input.buckets"]
    assert (buckets.a, buckets.b) == ("{32: 128, 64: 64, 128: 32}", "{64: 32}")
    assert not any(p.startswith("lm.input.buckets.") for p in found)
    peak = found["train.optimizer.lr.peak"]  # the arg of a call inside a call
    assert (peak.a, peak.b) == ("0.001", "0.003")


def test_set_overrides_are_differences_with_their_flag_as_origin(shakespeare: Program) -> None:
    base = side(shakespeare, "lm.shakespeare.quick")
    tried = side(shakespeare, "lm.shakespeare.quick", "train.steps=300", "lm.model.d=64")
    assert differences(base, tried) == [
        Difference(
            "train.steps", "400", "300", base.origins["train.steps"], "--set train.steps=300"
        ),
        Difference("lm.model.d", "128", "64", base.origins["lm.model.d"], "--set lm.model.d=64"),
    ]


def test_an_experiment_does_not_differ_from_itself(shakespeare: Program) -> None:
    quick = side(shakespeare, "lm.shakespeare.quick")
    assert differences(quick, quick) == []
    assert format_differences([]) == []


def test_a_path_one_side_lacks_is_absent_there(tiny: Program) -> None:
    found = differences(side(tiny, "tiny"), side(tiny, "tiny.sgd"))
    paths = [d.path for d in found]
    kind = found[0]
    assert (kind.path, kind.a, kind.b) == ("train.optimizer", "adam(...)", "sgd(...)")
    assert by_path(found)["train.optimizer.lr"].b == "0.5"
    peak = by_path(found)["train.optimizer.lr.peak"]
    assert (peak.b, peak.b_origin) == (None, "")  # sgd's lr is a number, no schedule
    momentum = by_path(found)["train.optimizer.momentum"]
    assert (momentum.a, momentum.a_origin, momentum.b) == (None, "", "0.9")
    # b's own args come where b has them: after `lr` and the args of a's `lr`
    assert paths.index("train.optimizer.lr.warmup") < paths.index("train.optimizer.momentum")
    assert paths.index("train.optimizer.momentum") < paths.index("train.optimizer.beta1")
    assert "train.optimizer.weight_decay" not in paths  # both kinds have it, at 0.0


def test_format_gives_one_line_per_difference_with_both_origins() -> None:
    diffs = [
        Difference("train.steps", "1000", "300", "default", "a.seq:41:3"),
        Difference("train.optimizer.momentum", None, "0.9", "", "--set train.optimizer=sgd(...)"),
        Difference(
            "distribution.devices", "[" + "cpu(), " * 20 + "cpu()]", "[]", "b.seq:2:1", "default"
        ),
    ]
    lines = format_differences(diffs)
    width = len("train.optimizer.momentum: <absent> -> 0.9")  # the widest line short enough
    assert lines[0] == f"{'train.steps: 1000 -> 300':<{width}}   (default; a.seq:41:3)"
    assert lines[1] == (
        "train.optimizer.momentum: <absent> -> 0.9   (-; --set train.optimizer=sgd(...))"
    )
    assert lines[2].endswith("-> []   (b.seq:2:1; default)")  # too long to pad: not padded


def test_format_shows_control_characters_as_escapes() -> None:
    """A record is a file anyone may hand you: nothing in it drives the terminal."""
    lines = format_differences([Difference("description", '"a\x1b[2Jb"', '"c"', "x\rx", "d")])
    assert lines == ['description: "a\\x1b[2Jb" -> "c"   (x\\rx; d)']


def write_run(folder: Path, program: Program, resolved: ResolvedExperiment) -> Path:
    """A run directory as `seqc train` starts it (its frozen spec, `resolved.json`, `run.json`),
    written by the run directory's own code, with no training."""
    folder.mkdir(parents=True)
    RunDir(folder).start(program, resolved, {"experiment": resolved.name})
    return folder


def test_a_run_directory_reads_back_as_its_experiment(tmp_path: Path, tiny: Program) -> None:
    resolved = resolve(tiny, "tiny", ["train.steps=3"])
    run = write_run(tmp_path / "run", tiny, resolved)
    assert json.loads((run / RESOLVED).read_text()) == experiment_record(resolved)
    from_run = from_run_dir(run)
    assert from_run.label == f"{run} (tiny)"
    from_spec = ResolvedSide.from_experiment(resolved)
    assert (from_run.values, from_run.origins) == (from_spec.values, from_spec.origins)
    assert from_run.values["lm.model.vocab"] == "<tiny.vocab_size>"  # known once data is read
    against = differences(from_run, side(tiny, "tiny"))
    assert [(d.path, d.a, d.b, d.a_origin) for d in against] == [
        ("train.steps", "3", "20", "--set train.steps=3")
    ]


def test_a_run_of_the_example_keeps_its_buckets_whole(tmp_path: Path, shakespeare: Program) -> None:
    run = write_run(tmp_path / "run", shakespeare, resolve(shakespeare, "lm.shakespeare.quick"))
    found = by_path(differences(from_run_dir(run), side(shakespeare, "lm.shakespeare.tiny")))
    assert found["lm.input.buckets"].a == "{64: 32}"


@pytest.mark.parametrize(
    ("content", "where", "message"),
    [
        (None, "{run}", "it holds no resolved.json"),
        ('{"config": ', "{run}/resolved.json:1:12", "is not JSON"),
        ("[1, 2]", "{run}/resolved.json", "it holds a JSON array, not an object"),
        ('{"name": "x"}', "{run}/resolved.json", "it has no `config` object"),
        ('{"config": {}, "provenance": [1]}', "{run}/resolved.json", "`provenance` is not"),
        (b"\xff\xfe", "{run}/resolved.json", "cannot be read"),
    ],
    ids=["no-record", "not-json", "not-an-object", "no-config", "bad-provenance", "not-utf8"],
)
def test_a_folder_that_is_no_run_is_a_located_error(
    tmp_path: Path, content: str | bytes | None, where: str, message: str
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    if isinstance(content, bytes):
        (run / RESOLVED).write_bytes(content)
    elif content is not None:
        (run / RESOLVED).write_text(content)
    with pytest.raises(FileError) as caught:
        from_run_dir(run)
    assert caught.value.code == "bad-run-record"
    assert caught.value.location == where.format(run=run)
    assert message in caught.value.message


def test_a_missing_run_directory_or_a_file_is_no_run(tmp_path: Path) -> None:
    with pytest.raises(FileError) as caught:
        from_run_dir(tmp_path / "nothing")
    assert caught.value.code == "file-not-found"
    (tmp_path / "f.txt").write_text("")
    with pytest.raises(FileError) as caught:
        from_run_dir(tmp_path / "f.txt")
    assert caught.value.code == "not-a-folder"
