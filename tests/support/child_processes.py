"""What the multi-process tests share: a process's children, and a check that a test left none
of the processes it started running."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest


def children(pid: int) -> list[int]:
    """The pids of `pid`'s direct children."""
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in found.split()]


@pytest.fixture(autouse=True)
def no_strays() -> Iterator[None]:
    """No process a test started outlives it (import it into a test module to apply it)."""
    before = set(children(os.getpid()))
    yield
    stray = set(children(os.getpid())) - before
    assert not stray, f"processes left running: {sorted(stray)}"
