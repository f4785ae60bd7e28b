"""The front end under the grammar-aware fuzzer of `tests/support/spec_fuzz.py`.

A few hundred generated specs, valid and damaged, through what `seqc check FILE` does: each run
succeeds or raises a `SeqcError`, in bounded time. `bench/fuzz.py` runs the same generator for
thousands of cases. Runs are derandomized and keep no example database, so CI sees the same
cases every time; a failure prints the case's files and how they were damaged.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, note, settings
from spec_fuzz import (
    NESTINGS,
    OPS,
    Case,
    Mutation,
    Spec,
    fuzz_cases,
    run_front_end,
    spec_files,
    valid_specs,
    write_case,
)
from typer.testing import CliRunner

from seqc.cli import app

PARSE_CACHE_ENV = "SEQC_PARSE_CACHE"  # seqc.spec.parse_cache.ENV


def fuzz_settings(n: int) -> settings:
    return settings(
        max_examples=n,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One folder for the module's cases; their parse-cache entries stay in it."""
    path = tmp_path_factory.mktemp("fuzz")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(PARSE_CACHE_ENV, str(path / "parse-cache"))
        yield path


class Counter:
    def __init__(self) -> None:
        self.n = 0

    def next(self) -> int:
        self.n += 1
        return self.n


counter = Counter()


def run(case: Case, folder: Path):
    return run_front_end(write_case(case, folder / str(counter.next())))


def test_valid_specs_mostly_check(folder: Path) -> None:
    """The generator writes what the language accepts: if this fraction falls, the mutations
    below start from garbage and test only the parser's first error."""
    outcomes = []

    @fuzz_settings(60)
    @given(spec=valid_specs())
    def one(spec: Spec) -> None:
        note(spec.root)
        outcome = run(Case(spec_files(spec)), folder)
        assert outcome.status != "crash", outcome.detail
        outcomes.append(outcome)

    one()
    ok = sum(o.status == "ok" for o in outcomes)
    errors = "\n".join(o.detail.splitlines()[0] for o in outcomes if o.status == "error")
    assert ok >= 0.9 * len(outcomes), errors


@fuzz_settings(300)
@given(case=fuzz_cases())
def test_damaged_specs_fail_only_with_seqc_errors(case: Case, folder: Path) -> None:
    note(case.describe())
    outcome = run(case, folder)
    assert outcome.status != "crash", outcome.detail


@fuzz_settings(12)
@given(case=fuzz_cases())
def test_seqc_check_exits_0_or_2_without_a_traceback(case: Case, folder: Path) -> None:
    path = write_case(case, folder / f"cli{counter.next()}")
    note(case.describe())
    result = CliRunner().invoke(app, ["check", str(path)])
    assert result.exit_code in (0, 2), result.output
    assert "Traceback" not in result.output and "internal error" not in result.output


# ------------------------------------------------------------------------- the mutations work


def test_every_nesting_mutation_nests_past_the_limit(folder: Path) -> None:
    """All but the last of `NESTINGS` go thousands deep; each is refused (or, for parentheses,
    read as the value inside) without a crash, wherever it lands in a valid spec."""
    spec = spec_files(Spec(VALID))
    for i in range(len(NESTINGS)):
        for at in (0.1, 0.5, 0.9):
            m = Mutation("nest", at, size=i)
            outcome = run(Case({**spec, "spec.seq": m.apply(spec["spec.seq"])}, (m,)), folder)
            assert outcome.status != "crash", f"{m}\n{outcome.detail}"


def test_mutations_change_the_text() -> None:
    data = VALID.encode()
    for op in OPS:
        m = Mutation(op, 0.3, 0.7, size=5, blob=b"\xff")
        assert m.apply(data) != data, op


VALID = """\
seqc 1
input words {
  train = text("train.txt")
  tokenizer = words(vocab_size = 1000)
}
model Net(vocab: int, d: int > 0 = 16) {
  embed = Embedding(vocab, d)
  attn = SelfAttention(d, 4, causal = true)
  out = Softmax(vocab, d, tie = embed)
  forward (x: int32[B, T]) -> float32[B, T, vocab] {
    h = attn(embed(x))
    return out(h)
  }
}
task lm {
  input = words
  model = Net(vocab = input.vocab_size)
}
experiment exp.base {
  tasks = [lm]
  train { optimizer = adam(lr = 1e-3); steps = 10 }
}
"""


def test_the_sample_valid_spec_checks(folder: Path) -> None:
    assert run(Case(spec_files(Spec(VALID))), folder).status == "ok"
