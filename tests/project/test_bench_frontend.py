"""The front-end benchmark's generator, at a tiny size, so the benchmark cannot rot.

Why: bench/frontend.py only reports numbers; if a language change made its generated program
invalid, the first sign would be a crash in whoever runs it next. Checking a small program from
the same generator here keeps it valid with every change to the language or the catalogue.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from seqc.compiler.check import check_program
from seqc.resolve.program import load_program
from seqc.spec.ir import without_spans
from seqc.spec.parser import parse_text
from seqc.spec.printer import format_spec

BENCH = Path(__file__).resolve().parents[2] / "bench" / "frontend.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    """bench/ is a folder of scripts, not a package: load the file by path."""
    spec = importlib.util.spec_from_file_location("bench_frontend", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_generated_program_checks(bench: ModuleType, tmp_path: Path) -> None:
    files = bench.generate(n_layers=20, n_experiments=5, n_files=3)
    main = bench.write(files, tmp_path)
    program = load_program(main)
    resolved = check_program(program)
    assert len(program.files) == 4
    assert sum(1 for d in program.layers.values() if d.kind == "layer") == 20
    assert [r.name for r in resolved] == [f"bench.g0.e{i}" for i in range(5)]
    # The shapes the benchmark claims to exercise are really there.
    assert any(d.extends for d in program.experiments.values())
    assert any(s.repeat is not None for d in program.layers.values() for s in d.sublayers)
    users = {
        s.call.func.id
        for d in program.layers.values()
        for s in d.sublayers
        if getattr(s.call.func, "id", None) in program.layers
    }
    assert users, "no layer calls another user layer"
    last = resolved[-1]
    assert last.chain == tuple(f"bench.g0.e{i}" for i in range(4, -1, -1))
    assert last.get("lm0.model.d") == 64 * 5


def test_generated_program_is_canonical_after_fmt(bench: ModuleType) -> None:
    """The generated text is valid input for the formatter too (same IR after a round trip)."""
    for rel, text in bench.generate(n_layers=9, n_experiments=6, n_files=2).items():
        spec = parse_text(text, rel)
        assert without_spans(parse_text(format_spec(spec), rel)) == without_spans(spec)


def test_bench_main_prints_the_figures(bench: ModuleType, capsys: pytest.CaptureFixture) -> None:
    bench.main(["--layers", "6", "--experiments", "3", "--reps", "1"])
    lines = capsys.readouterr().out.splitlines()
    figures = dict(line.split(": ", 1) for line in lines if line.startswith("frontend_"))
    assert set(figures) >= {
        "frontend_parse_s",
        "frontend_resolve_s",
        "frontend_check_s",
        "frontend_total_s",
        "frontend_layers",
        "frontend_experiments",
    }
    assert figures["frontend_layers"] == "6"
    assert figures["frontend_experiments"] == "3"
    assert float(figures["frontend_total_s"]) > 0
    assert lines[-1].startswith("frontend_experiments: ")
