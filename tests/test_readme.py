"""The README's tour of the language is a real spec: it must keep parsing and checking."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from seqc.compiler.check import check_program
from seqc.resolve.program import load_program
from seqc.spec.parser import parse_text
from seqc.spec.printer import format_spec

ROOT = Path(__file__).resolve().parents[1]


def _tour() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## A tour of the language", 1)[1]
    match = re.search(r"```\n(.*?)```", section, re.S)
    assert match, "the tour's code block is missing"
    return match.group(1)


def test_readme_tour_checks(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "examples" / "common", tmp_path / "common")
    (tmp_path / "lm").mkdir()
    spec = tmp_path / "lm" / "tour.seq"
    spec.write_text(_tour())
    program = load_program(spec)
    resolved = check_program(program)
    assert [r.name for r in resolved] == ["lm.shakespeare.tiny", "lm.shakespeare.small"]
    small = resolved[1]
    assert small.get("lm.model.d") == 512
    assert small.get("lm.model.ff") == 2048  # the default `4 * d` follows the override
    assert small.get("train.steps") == 20000


def test_readme_tour_formats_to_the_same_program() -> None:
    spec = parse_text(_tour(), "tour.seq")
    again = parse_text(format_spec(spec), "tour.seq")
    assert format_spec(again) == format_spec(spec)
