"""The order test files are handed to xdist's workers: the longest first.

Why: `make test` runs two workers, a file each at a time (`--dist loadfile`). The suite's wall
time is the later worker's finish, so a 40 s file of process groups handed out last leaves the
other worker idle for most of it. Handing out the longest files first (longest processing time
first, a classic list schedule) keeps both busy to the end. xdist's own default reorders files
by their number of tests, which puts the many quick front-end files first and the few long
process tests last, the worst order for this suite: the Makefile turns it off
(`--no-loadscope-reorder`) so that this order holds.

Each run records every file's seconds (setup, call and teardown of its tests) in
`.cache/test-durations.json`, and the next run orders by them; a file not yet measured goes
first, since it may be long. Without a record (a fresh clone, as CI has) the order is by folder,
slowest folders first (`FOLDERS`). The order only changes which worker runs a file when; no
test sees another outcome.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / ".cache" / "test-durations.json"

FOLDERS = (
    "processes",
    "run",
    "sweep",
    "serve",
    "backends",
    "compiler",
    "data",
    "project",
    "frontend",
)
"""Without a record: the folders from slowest to quickest (groups of processes take 10-40 s a
test; the front end's many tests a few milliseconds each)."""


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _recorded() -> dict[str, dict[str, float]]:
    """The record: each file's `wall` seconds and `cpu` seconds (its worker's and the processes
    its tests started and waited for)."""
    with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
        record = json.loads(RECORD.read_text())
        return {
            str(k): {"wall": float(v["wall"]), "cpu": float(v["cpu"])} for k, v in record.items()
        }
    return {}


def _cpu_seconds() -> float:
    own, children = (
        resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class CpuMeter:
    """On each worker: the CPU seconds spent since the previous report, added to each report
    (so a module fixture's training counts for the file whose test set it up)."""

    def __init__(self) -> None:
        self.last = _cpu_seconds()

    @pytest.hookimpl
    def pytest_collection_finish(self) -> None:
        self.last = _cpu_seconds()  # collecting (importing the test files) is no file's

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item) -> Generator[None, None, None]:
        outcome = yield
        now = _cpu_seconds()
        outcome.get_result().user_properties.append(("cpu_s", now - self.last))
        self.last = now


def order(items: list[pytest.Item], tests: Path) -> None:
    """`items` sorted in place, longest file first; each file's tests keep their order."""
    seconds = {name: v["wall"] for name, v in _recorded().items()}
    unknown = max(seconds.values(), default=0.0) + 1.0

    def folder(item: pytest.Item) -> int:
        name = item.path.relative_to(tests).parts[0]
        return FOLDERS.index(name) if name in FOLDERS else len(FOLDERS)

    def key(item: pytest.Item) -> tuple[float, int, str]:
        name = _file(item.nodeid)
        return (-seconds.get(name, unknown) if seconds else 0.0, folder(item), name)

    items.sort(key=key)


class Recorder:
    """On the controlling process: every file's seconds, written when a run ends.

    A run of some files only (`pytest tests/run`) updates their entries and keeps the others';
    a run that leaves out some tests of a file (`-k`, `-m`, `make test-fast`, a test's node id)
    writes nothing, since its files' figures would be partial."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.wall[_file(report.nodeid)] += report.duration
        self.cpu[_file(report.nodeid)] += dict(report.user_properties).get("cpu_s", 0.0)

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if not self.wall or exitstatus not in (0, 1) or _filtered(session.config):
            return  # an interrupted or filtered run's figures are partial
        record = _recorded()
        for name, wall in self.wall.items():
            record[name] = {"wall": round(wall, 2), "cpu": round(self.cpu[name], 2)}
        with contextlib.suppress(OSError):
            RECORD.parent.mkdir(parents=True, exist_ok=True)
            part = RECORD.with_suffix(f".{os.getpid()}.part")
            part.write_text(json.dumps(dict(sorted(record.items())), indent=1))
            part.replace(RECORD)


def _filtered(config: pytest.Config) -> bool:
    """Whether the run selected tests within files (`-k`, `-m`, `file::test`)."""
    return bool(
        config.option.keyword
        or config.option.markexpr
        or any("::" in str(a) for a in config.args)
        or config.option.lf
    )
