"""What the multi-process tests share: a process's children, a check that a test left none
of the processes it started running, and a child process on forced CPU devices."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from seqc.spec.parse_cache import ENV as PARSE_CACHE


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


def on_forced_devices(code: str, folder: Path, *args: str, devices: int = 4) -> dict:
    """Run `code` (a Python program) in a child process that JAX starts with `devices` CPU
    devices (`--xla_force_host_platform_device_count`, which must be set before JAX starts),
    its spec parses cached in `folder`; what the child printed last, as JSON."""
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={devices}"
    env = os.environ | {"XLA_FLAGS": flags, PARSE_CACHE: str(folder / "parse-cache")}
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
