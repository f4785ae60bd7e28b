"""Fuzz the front end: N generated and damaged specs through `seqc check`'s path.

Why: the front end runs on every keystroke in an editor, on whatever text is there. Each case is
a valid spec written from the catalogue, then damaged (tokens deleted, swapped and replaced,
truncation, random bytes, nesting thousands deep, huge literals; see
`tests/support/spec_fuzz.py`). A case passes when the front end succeeds or raises a
`SeqcError` within `--limit` seconds; any other exception, or a hang, is a traceback. Every
`--cli-every`-th case also runs the real CLI (`seqc check`, in-process), which must exit 0 or 2
and print no "Traceback".

Failing cases are minimized (lines, then characters, while the same exception is raised) and
printed. The last lines are `name: value` pairs for tools to read:
`fuzz_cases`, `fuzz_tracebacks` (0 is the target), and before them `fuzz_ok`, `fuzz_errors`,
`fuzz_s`.

    python bench/fuzz.py --cases 2000 --seed 0
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for folder in (ROOT, ROOT / "tests" / "support"):  # run as a script from anywhere
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import seed as hypothesis_seed  # noqa: E402
from spec_fuzz import Case, Outcome, fuzz_cases, minimize, run_front_end, write_case  # noqa: E402

PARSE_CACHE_ENV = "SEQC_PARSE_CACHE"  # seqc.spec.parse_cache.ENV


def signature(outcome: Outcome) -> str:
    """The exception's type and innermost frame: what a minimized case must still raise."""
    lines = [line for line in outcome.detail.strip().splitlines() if line.strip()]
    frames = [line.strip() for line in lines if line.strip().startswith("File ")]
    return (frames[-1] if frames else "") + " | " + (lines[-1].split(":")[0] if lines else "")


def run_cli(path: Path) -> str | None:
    """`seqc check PATH` in-process; what went wrong, or None."""
    from typer.testing import CliRunner

    from seqc.cli import app

    result = CliRunner().invoke(app, ["check", str(path)])
    output = result.output + (getattr(result, "stderr", "") or "")
    if result.exit_code not in (0, 2) or "Traceback" in output:
        return f"exit {result.exit_code}\n{output[-3000:]}"
    return None


def fuzz(cases: int, seed: int, limit_s: float, cli_every: int, folder: Path) -> dict:
    counts = {"ok": 0, "error": 0, "crash": 0}
    failures: list[tuple[Case, Outcome]] = []

    @hypothesis_seed(seed)
    @settings(
        max_examples=cases,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=fuzz_cases())
    def one(case: Case) -> None:
        n = sum(counts.values())
        path = write_case(case, folder / str(n))
        outcome = run_front_end(path, limit_s)
        if outcome.status != "crash" and cli_every and n % cli_every == 0:
            problem = run_cli(path)
            if problem is not None:
                outcome = Outcome("crash", "seqc check via the CLI: " + problem)
        counts[outcome.status] += 1
        if outcome.status == "crash":
            failures.append((case, outcome))
            print(f"case {n}: {outcome.detail.strip().splitlines()[-1]}", flush=True)

    one()
    return {"counts": counts, "failures": failures}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=2000, help="how many specs to try")
    parser.add_argument("--seed", type=int, default=0, help="hypothesis seed (reproducible)")
    parser.add_argument("--limit", type=float, default=20.0, help="seconds a case may take")
    parser.add_argument(
        "--cli-every", type=int, default=50, help="run the CLI on every n-th case (0: never)"
    )
    args = parser.parse_args(argv)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="seqc-fuzz-") as tmp:
        # Thousands of one-off files: their parse-cache entries stay out of the user's cache.
        os.environ.setdefault(PARSE_CACHE_ENV, str(Path(tmp) / "parse-cache"))
        result = fuzz(args.cases, args.seed, args.limit, args.cli_every, Path(tmp))
        failures = result["failures"]
        for i, (case, outcome) in enumerate(failures[:10]):
            sig = signature(outcome)

            def still_fails(c: Case, sig: str = sig, i: int = i) -> bool:
                o = run_front_end(write_case(c, Path(tmp) / f"min{i}"), args.limit)
                return o.status == "crash" and signature(o) == sig

            small = minimize(case, still_fails) if outcome.detail.startswith("Traceback") else case
            print(f"\n=== failure {i + 1} of {len(failures)}: {sig}")
            print(small.describe())
            print(outcome.detail.strip()[-3000:])
    seconds = time.perf_counter() - start
    counts = result["counts"]
    total = sum(counts.values())
    print(f"fuzz_ok: {counts['ok']}")
    print(f"fuzz_errors: {counts['error']}")
    print(f"fuzz_s: {seconds:.1f}")
    print(f"fuzz_cases: {total}")
    print(f"fuzz_tracebacks: {counts['crash']}")


if __name__ == "__main__":
    main()
