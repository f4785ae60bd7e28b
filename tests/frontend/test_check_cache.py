"""Verdicts of `seqc check`: an unchanged program that passed is answered without a check, and
anything its outcome depends on (any file's text, the experiment asked for, the overrides, the
import roots) makes it check again."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

import seqc.compiler.check as check_module
from seqc.cli import app
from seqc.compiler import check_cache
from seqc.compiler.check_cache import CheckSummary, check_file
from seqc.resolve.program import SEQC_PATH
from seqc.spec import parse_cache

LIB = """seqc 1

layer Block(d: int) {
  norm = LayerNorm(d)
  forward (x: float32[B, T, d]) -> float32[B, T, d] {
    return x + norm(x)
  }
}
"""

MAIN = """seqc 1
import "lib.seq"

input corpus {
  train = text("train.txt")
  tokenizer = chars()
}

model Net(vocab: int, d: int = 32) {
  embed = Embedding(vocab, d)
  block = Block(d)
  out = Softmax(vocab, d)
  forward (ids: int32[B, T]) -> float32[B, T, vocab] {
    return out(block(embed(ids)))
  }
}

task lm {
  input = corpus
  model = Net(vocab = input.vocab_size)
  loss = cross_entropy
}

experiment base {
  tasks = [lm]
  train { steps = 10 }
}
"""

runner = CliRunner()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv(parse_cache.ENV, str(folder))
    return folder


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    folder = tmp_path / "spec"
    folder.mkdir()
    (folder / "seqc.toml").write_text("")
    (folder / "lib.seq").write_text(LIB)
    (folder / "main.seq").write_text(MAIN)
    return folder / "main.seq"


class Checks:
    """Counts full checks; a verdict hit runs none."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = check_module.check_program

        def counted(*args: object, **kwargs: object) -> object:
            self.count += 1
            return real(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(check_module, "check_program", counted)


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> Checks:
    return Checks(monkeypatch)


def _verdicts(cache: Path) -> list[Path]:
    return sorted((cache / "checks").glob("*.json"))


def test_an_unchanged_program_is_answered_from_its_verdict(
    cache: Path, spec: Path, checks: Checks
) -> None:
    first = check_file(spec)
    assert first == CheckSummary(files=2, layers=2, tasks=1, experiments=1)
    assert checks.count == 1 and len(_verdicts(cache)) == 1
    assert check_file(spec) == first
    assert checks.count == 1  # nothing checked the second time
    result = runner.invoke(app, ["check", str(spec)])
    assert result.exit_code == 0, result.output
    assert "2 file(s), 2 layer(s), 1 task(s), 1 experiment(s) checked" in result.output
    assert checks.count == 1


def test_an_edited_import_is_checked_again_and_its_error_shown(
    cache: Path, spec: Path, checks: Checks
) -> None:
    check_file(spec)
    lib = spec.parent / "lib.seq"
    lib.write_text(LIB.replace("LayerNorm(d)", "LayerNrm(d)"))
    result = runner.invoke(app, ["check", str(spec)])
    assert result.exit_code == 2
    assert "lib.seq:4:" in result.output and "LayerNorm" in result.output  # did you mean
    assert checks.count == 2
    lib.write_text(LIB + "\n# a comment changes the text, so the digest\n")
    assert check_file(spec).layers == 2
    assert checks.count == 3


def test_a_failed_check_leaves_no_verdict(cache: Path, spec: Path) -> None:
    spec.write_text(MAIN.replace("steps = 10", "stepz = 10"))
    for _ in range(2):
        result = runner.invoke(app, ["check", str(spec)])
        assert result.exit_code == 2
        assert "main.seq:" in result.output
    assert _verdicts(cache) == []


def test_experiment_and_overrides_are_part_of_the_question(
    cache: Path, spec: Path, checks: Checks
) -> None:
    check_file(spec)
    check_file(spec, "base")
    assert checks.count == 2
    result = runner.invoke(app, ["check", str(spec), "-e", "base", "--set", 'lm.model.d="x"'])
    assert result.exit_code == 2, result.output
    assert check_file(spec, "base", ["lm.model.d=64"]).experiments == 1
    assert check_file(spec, "base", ["lm.model.d=64"]).experiments == 1
    assert checks.count == 4  # the failing override, then one check of d=64
    assert len(_verdicts(cache)) == 3


def test_import_roots_are_part_of_the_question(
    cache: Path, spec: Path, checks: Checks, monkeypatch: pytest.MonkeyPatch
) -> None:
    check_file(spec)
    monkeypatch.setenv(SEQC_PATH, os.pathsep.join([str(spec.parent.parent), "/nonexistent"]))
    check_file(spec)
    assert checks.count == 2


def test_the_verdict_names_the_text_that_was_checked(
    cache: Path, spec: Path, checks: Checks, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file saved while a check runs: the verdict vouches for the text read, so the new text
    is checked next time."""
    real = check_module.check_program

    def edit_during_check(*args: object, **kwargs: object) -> object:
        (spec.parent / "lib.seq").write_text(LIB.replace("LayerNorm(d)", "Lay(d)"))
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(check_module, "check_program", edit_during_check)
    check_file(spec)
    monkeypatch.setattr(check_module, "check_program", real)
    result = runner.invoke(app, ["check", str(spec)])
    assert result.exit_code == 2 and "Lay" in result.output


@pytest.mark.parametrize("damage", [b"", b"{not json", b'{"question": 1}', b"\xff\xfe"])
def test_a_damaged_verdict_is_a_miss(
    cache: Path, spec: Path, checks: Checks, damage: bytes
) -> None:
    check_file(spec)
    (verdict,) = _verdicts(cache)
    verdict.write_bytes(damage)
    assert check_file(spec).files == 2
    assert checks.count == 2
    assert check_file(spec).files == 2  # rewritten by the check
    assert checks.count == 2


def test_no_verdicts_when_the_cache_is_off(
    spec: Path, checks: Checks, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(parse_cache.ENV, "off")
    check_file(spec)
    check_file(spec)
    assert checks.count == 2


def test_another_seqc_source_is_a_miss(
    cache: Path, spec: Path, checks: Checks, monkeypatch: pytest.MonkeyPatch
) -> None:
    check_file(spec)
    monkeypatch.setattr(check_cache, "_salt", lambda: "another seqc")
    check_file(spec)
    assert checks.count == 2


def test_a_verdict_hit_imports_neither_the_parser_nor_pydantic(spec: Path, cache: Path) -> None:
    """What makes `seqc check` of an unchanged program quick: the second process imports only
    the command line's own libraries (typer imports pydantic for its own parameter parsing, so
    the test looks at seqc's modules and Lark)."""
    import subprocess
    import sys

    env = {**os.environ, parse_cache.ENV: str(cache)}
    probe = (
        "import sys; from seqc.cli import app\n"
        "try:\n    app(['check', sys.argv[1]])\nexcept SystemExit:\n    pass\n"
        "loaded = [m for m in sys.modules if m.startswith(('seqc.spec.ir', 'seqc.resolve.'\n"
        "    'experiment', 'seqc.spec.parser', 'lark'))]\n"
        "print('LOADED', sorted(loaded))\n"
    )
    for expected in (True, False):  # the first process checks, the second reads the verdict
        run = subprocess.run(
            [sys.executable, "-c", probe, str(spec)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "experiment(s) checked" in run.stdout, run.stdout + run.stderr
        loaded = run.stdout.split("LOADED", 1)[1].strip()
        assert (loaded != "[]") is expected, loaded
