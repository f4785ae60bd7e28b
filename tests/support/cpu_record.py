"""Each test file's CPU, for deciding where the suite's time goes: `SEQC_TEST_CPU=FILE make test`.

Why CPU and not wall time: the suite runs two files side by side on two cores, so a file's wall
time depends on its neighbour, while the CPU it burns (its own and that of the processes it
waits for, `RUSAGE_CHILDREN`) does not, much. The limit on `make test`'s wall time is reached by
cutting CPU: no order of files beats total CPU / 2.

Each worker appends one JSON line per test file to FILE when it finishes:
`{"file": ..., "cpu_s": ..., "wall_s": ..., "tests": ...}`. The time a file's module-scoped
fixtures take is in it (set up in its first test, torn down in its last); importing the file
is not. `python tests/support/cpu_record.py FILE` prints the files by CPU, most first.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path

import pytest

ENV = "SEQC_TEST_CPU"


def _cpu() -> float:
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


class CpuRecord:
    """Sums each test's CPU and wall time into its file's totals."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.cpu: dict[str, float] = defaultdict(float)
        self.wall: dict[str, float] = defaultdict(float)
        self.tests: dict[str, int] = defaultdict(int)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, None, None]:
        cpu, wall = _cpu(), time.perf_counter()
        yield
        name = item.nodeid.split("::")[0]
        self.cpu[name] += _cpu() - cpu
        self.wall[name] += time.perf_counter() - wall
        self.tests[name] += 1

    def pytest_sessionfinish(self) -> None:
        lines = [
            json.dumps(
                {
                    "file": name,
                    "cpu_s": round(self.cpu[name], 2),
                    "wall_s": round(self.wall[name], 2),
                    "tests": self.tests[name],
                }
            )
            for name in self.cpu
        ]
        with self.out.open("a") as sink:  # workers append whole lines, each in one write
            sink.write("".join(line + "\n" for line in lines))


def register(config: pytest.Config) -> None:
    """Records when `SEQC_TEST_CPU` names a file (in every xdist worker, not the controller)."""
    out = os.environ.get(ENV)
    if out and (hasattr(config, "workerinput") or not config.getoption("numprocesses", None)):
        config.pluginmanager.register(CpuRecord(Path(out)), "seqc-cpu-record")


def report(path: Path) -> str:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows.sort(key=lambda row: -row["cpu_s"])
    total = sum(row["cpu_s"] for row in rows)
    lines = [
        f"{row['cpu_s']:8.1f} {row['wall_s']:8.1f} {row['tests']:5d}  {row['file']}" for row in rows
    ]
    return "\n".join(["     cpu     wall tests  file", *lines, f"{total:8.1f} total CPU (s)"])


if __name__ == "__main__":
    print(report(Path(sys.argv[1])))
