"""The real `seqc serve` process on a free localhost port: it reports ready, decodes concurrent
requests in fewer model calls than requests, and on SIGTERM answers what is in flight and exits
0. A bad artifact folder is the usual located error before any port is opened."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from served_artifacts import Served, free_port, wait_ready

SEQC = [sys.executable, "-m", "seqc.cli"]


def _metric(url: str, prefix: str) -> float:
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith(prefix):
            return float(line.split()[-1])
    return 0.0


def _wait_in_flight(url: str, model: str, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while _metric(url, f'seqc_in_flight{{model="{model}"}}') < 1:
        assert time.monotonic() < deadline, "the request never reached the server"
        time.sleep(0.02)


def test_the_server_batches_concurrent_requests_and_drains_on_sigterm(arts: Served) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = [*SEQC, "serve", str(arts.artifact("mt")), str(arts.artifact("lm")), "--name", "mt"]
    args += ["--name", "lm", "--port", str(port), "--max-delay-ms", "400"]
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy()
    )
    try:
        wait_ready(proc, url)
        sentences = [f"{'abcdefgh'[i % 8]}{'hgfedcba'[i % 7]}" for i in range(16)]

        def translate(s: str) -> list[str]:
            r = httpx.post(f"{url}/v1/models/mt/translate", json={"text": [s]}, timeout=30)
            assert r.status_code == 200, r.text
            return r.json()["translations"]

        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(translate, sentences))
        assert all(len(a) == 1 for a in answers)
        calls = _metric(url, 'seqc_model_calls_total{model="mt"}')
        assert calls < len(sentences) / 2, calls
        with ThreadPoolExecutor(1) as pool:
            late = pool.submit(translate, "abcdefg")
            _wait_in_flight(url, "mt")  # waiting out its batch's delay when the signal comes
            proc.send_signal(signal.SIGTERM)
            assert len(late.result(timeout=30)) == 1
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_missing_artifact_is_a_located_error_before_serving(tmp_path: Path) -> None:
    result = subprocess.run(
        [*SEQC, "serve", str(tmp_path / "nothing"), "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "no artifact at" in result.stderr and "seqc export" in result.stderr
