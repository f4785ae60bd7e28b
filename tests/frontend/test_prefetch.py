"""The forked parse helper (`seqc.resolve.prefetch`): it fills the parse cache with the later
imports while the loader parses the earlier ones, it never changes what a load reports, and no
process outlives a load.

The helper only starts in a process with one Python thread, and pytest-xdist's workers run
threads, so each test runs its probe in a fresh interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from seqc.resolve import prefetch
from seqc.spec import parse_cache

LAYER = """layer {name}(d: int, heads: int = 4, dropout: float = 0.1) {{
  "A generated block: attention then an MLP."
  norm1 = LayerNorm(d)
  attn = SelfAttention(d, heads, dropout = dropout)
  norm2 = LayerNorm(d)
  mlp = FeedForward(d, 4 * d, dropout = dropout)  # position-wise
  forward (x: float32[B, T, d]) -> float32[B, T, d] {{
    x = x + attn(norm1(x))
    return x + mlp(norm2(x))
  }}
}}
"""

N_FILES = 4
LAYERS_PER_FILE = 80  # about 30 KB a file: 120 KB in all, over prefetch.MIN_BYTES


def _program(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "seqc.toml").write_text("")
    imports = []
    for f in range(N_FILES):
        body = "\n".join(LAYER.format(name=f"F{f}L{i}") for i in range(LAYERS_PER_FILE))
        (folder / f"part{f}.seq").write_text(f"seqc 1\n\n{body}")
        imports.append(f'import "part{f}.seq"')
    main = folder / "main.seq"
    main.write_text("seqc 1\n\n" + "\n".join(imports) + "\n")
    return main


def _python(code: str, cache: Path, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, parse_cache.ENV: str(cache), **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="the helper needs two cores and Linux",
)
def test_the_helper_parses_the_later_files_into_the_cache(tmp_path: Path) -> None:
    main = _program(tmp_path / "spec")
    assert sum(p.stat().st_size for p in main.parent.glob("part*.seq")) > prefetch.MIN_BYTES
    probe = """
from pathlib import Path
from seqc.resolve import prefetch
from seqc.spec import parse_cache
from seqc.spec.parser import parse_file
paths = [Path(f"part{f}.seq") for f in range(4)]
helper = prefetch.start(paths, parse_file)
assert helper is not None, "no helper started"
helper.wait()
held = [parse_cache.holds(p.read_text(), str(p)) for p in paths]
print("HELD", held, sorted(str(p) for p in helper.paths))
"""
    run = _python(probe, tmp_path / "cache", main.parent)
    assert run.returncode == 0, run.stderr
    # the later half, by size, and nothing else (the loader parses the rest itself)
    assert "HELD [False, False, True, True] ['part2.seq', 'part3.seq']" in run.stdout, run.stdout


def test_a_load_with_the_helper_equals_one_without(tmp_path: Path) -> None:
    main = _program(tmp_path / "spec")
    probe = f"""
import hashlib, os
from seqc.resolve.program import load_program
p = load_program({str(main)!r})
ir = repr([f.model_dump() for f in p.files]).encode()
print("FILES", [f.path for f in p.files], len(p.layers), hashlib.sha256(ir).hexdigest())
try:
    os.waitpid(-1, os.WNOHANG)
    print("CHILD LEFT")
except ChildProcessError:
    print("NO CHILDREN")
"""
    runs = [
        _python(probe, tmp_path / f"cache{mode}", main.parent, SEQC_PARALLEL_PARSE=mode)
        for mode in ("1", "0")
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr
        assert "NO CHILDREN" in run.stdout
    assert runs[0].stdout == runs[1].stdout  # the same IR, spans included
    assert f"] {N_FILES * LAYERS_PER_FILE} " in runs[0].stdout


@pytest.mark.parametrize("broken", ["part0.seq", "part3.seq"])
def test_an_error_in_any_import_is_reported_as_without_the_helper(
    tmp_path: Path, broken: str
) -> None:
    """part3 is the helper's: it fails there silently and the loader reports the error; part0
    is the loader's own: the helper is stopped and reaped before the error propagates."""
    main = _program(tmp_path / "spec")
    path = main.parent / broken
    path.write_text(path.read_text().replace("norm2 = LayerNorm(d)", "norm2 = LayerNorm(d", 7))
    outputs = []
    for mode in ("1", "0"):
        run = subprocess.run(
            [sys.executable, "-m", "seqc.cli", "check", "main.seq"],
            env={**os.environ, parse_cache.ENV: str(tmp_path / f"c{mode}"), prefetch.ENV: mode},
            cwd=main.parent,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 2, run.stdout + run.stderr
        assert "Traceback" not in run.stderr
        outputs.append(run.stderr)
    assert outputs[0] == outputs[1]
    assert f"{broken}:8:3: parse error" in outputs[0]


def test_no_helper_where_forking_is_unsafe_or_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
    monkeypatch.delitem(sys.modules, "jax", raising=False)
    if sys.platform.startswith("linux"):
        assert prefetch.enabled()
    monkeypatch.setenv(prefetch.ENV, "0")
    assert not prefetch.enabled()
    monkeypatch.setenv(prefetch.ENV, "1")
    monkeypatch.setattr(threading, "active_count", lambda: 3)  # the language server, xdist
    assert not prefetch.enabled()
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    monkeypatch.setitem(sys.modules, "jax", sys)  # a training process: native threads
    assert not prefetch.enabled()
    monkeypatch.delitem(sys.modules, "jax")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert not prefetch.enabled()
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setenv(parse_cache.ENV, "off")
    assert not prefetch.enabled()
