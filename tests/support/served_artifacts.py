"""Exported artifacts for the server's tests, made once per test session (`once`).

A translator (the toy reverser of `tiny_specs.MT_SPEC`, trained 60 steps on JAX) exported to
ONNX and TFLite, and the session's tiny LM exported to ONNX: what `seqc serve` loads. Each is
made by the first test that asks, under a lock every xdist worker sees. `free_port` and
`wait_ready` are for the tests that start a real `seqc serve` process.
"""

from __future__ import annotations

import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from shared_runs import LmRuns, once
from tiny_specs import COMMON, LM_SPEC, MT_SPEC, lm_corpus, mt_pairs
from typer.testing import CliRunner

from seqc.resolve.program import SEQC_PATH


@dataclass(frozen=True)
class Served:
    """The session's artifacts, and the arguments that decode with their runs' checkpoints."""

    mt_spec: list[str]
    mt_run: Path
    lm_spec: list[str]
    lm_run: Path

    def artifact(self, which: str, name: str = "onnx-none") -> Path:
        return (self.mt_run if which == "mt" else self.lm_run) / "export" / name


def _invoke(args: list[str], root: Path) -> None:
    from seqc.cli import app

    with pytest.MonkeyPatch.context() as mp:  # conftest's library root, for a session fixture
        mp.setenv(SEQC_PATH, str(root))
        result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output


def _make_mt(folder: Path) -> None:
    mt_pairs(folder)
    (folder / "mt.seq").write_text(MT_SPEC.format(common=COMMON.as_posix()))
    base = [str(folder / "mt.seq"), "-e", "mt", "--cache-dir", str(folder / "cache")]
    run = str(folder / "run")
    _invoke(["train", *base, "--run-dir", run, "--no-progress"], folder.parent)
    formats = ["--format", "onnx", "--format", "tflite"]
    _invoke(["export", *base, "--run-dir", run, *formats], folder.parent)


def served(root: Path, lm_runs: LmRuns) -> Served:
    mt = once(root / "mt", _make_mt)
    lm = root / "lm"

    def make_lm(folder: Path) -> None:
        lm_corpus(folder)
        (folder / "lm.seq").write_text(LM_SPEC.format(common=COMMON.as_posix()))
        lm_runs.copy(folder / "run")
        base = [str(folder / "lm.seq"), "-e", "tiny", "--cache-dir", str(folder / "cache")]
        run = str(folder / "run")
        _invoke(["export", *base, "--run-dir", run, "--sentences"], folder.parent)

    once(lm, make_lm)
    return Served(
        [str(mt / "mt.seq"), "-e", "mt", "--cache-dir", str(mt / "cache")],
        mt / "run",
        [str(lm / "lm.seq"), "-e", "tiny", "--cache-dir", str(lm / "cache")],
        lm / "run",
    )


def free_port() -> int:
    """A localhost port nothing listens on now, for a `seqc serve` a test starts."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(proc: subprocess.Popen, url: str, limit: float = 60.0) -> None:
    """Until the server at `url` says it is ready; an AssertionError with its stderr if it
    exits first, or if `limit` seconds pass."""
    import httpx

    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"seqc serve exited {proc.returncode}: {proc.stderr.read()}")
        try:
            if httpx.get(f"{url}/v2/health/ready", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError("seqc serve did not become ready")
