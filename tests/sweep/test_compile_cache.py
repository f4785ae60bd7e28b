"""The compiled programs a sweep's trials share (`seqc.run.sweep.compile_cache`): the trial's
environment names the sweep's cache (and leaves a user's own alone), and a torn entry that a
killed trial left is removed when the sweep starts, while whole ones and ones that may still
be being written stay."""

from __future__ import annotations

import importlib.util
import os
import time
import zlib
from pathlib import Path

from seqc.run.sweep import compile_cache


def test_a_trial_is_given_the_sweeps_cache(tmp_path: Path) -> None:
    env = compile_cache.trial_env(tmp_path, {"PATH": "/bin"})
    assert env["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / "xla")
    assert env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"  # small programs too
    assert env["JAX_COMPILATION_CACHE_MAX_SIZE"] == str(compile_cache.LIMIT)  # filelock is here
    assert env["PATH"] == "/bin"


def test_a_users_own_cache_is_kept(tmp_path: Path) -> None:
    env = compile_cache.trial_env(tmp_path, {"JAX_COMPILATION_CACHE_DIR": "/mine"})
    assert env == {"JAX_COMPILATION_CACHE_DIR": "/mine"}


def test_torn_entries_are_dropped_once_settled(tmp_path: Path) -> None:
    folder = tmp_path / "xla"
    folder.mkdir()
    data = zlib.compress(os.urandom(4096))
    entries = {
        "whole": data,
        "torn": data[: len(data) // 2],
        "garbage": b"not a compressed stream",
        "fresh-torn": data[:100],
    }
    for name, payload in entries.items():
        (folder / f"{name}-cache").write_bytes(payload)
    (folder / "torn-atime").write_bytes(b"12345678")  # JAX's access times are not entries
    old = time.time() - 2 * compile_cache.SETTLED_S
    for name in ("whole", "torn", "garbage"):
        os.utime(folder / f"{name}-cache", (old, old))
    assert compile_cache.drop_torn(tmp_path) == 2
    left = sorted(p.name for p in folder.iterdir())
    assert left == ["fresh-torn-cache", "torn-atime", "whole-cache"]
    assert compile_cache.drop_torn(tmp_path / "no-sweep-here") == 0


def test_whole_tells_a_stream_from_a_torn_one() -> None:
    data = zlib.compress(b"x" * 10_000)
    assert compile_cache.whole(data) is True
    assert compile_cache.whole(data[:-3]) is False
    assert compile_cache.whole(data + b"tail") is False
    # a zstd frame: torn where `zstandard` can read it, else unknown (and so kept)
    unknown = None if importlib.util.find_spec("zstandard") is None else False
    assert compile_cache.whole(compile_cache.ZSTD_MAGIC + b"...") is unknown
