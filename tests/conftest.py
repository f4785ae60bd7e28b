"""What every test shares.

Imports resolve only inside the root spec's project and the folders of `SEQC_PATH` (see
`seqc.resolve.program`). Tests write specs into pytest's temporary folders and import across
them (the README's tour in `lm/` imports `../common/`, with no project marker above), so pytest's
base temporary folder is a library root for every test. Tests of the confinement itself set
`SEQC_PATH` as they need.

The parse cache (`seqc.spec.parse_cache`) lives in pytest's base temporary folder, not in the
user's cache: every test writes specs at new paths, which would pile up entries there.

XLA's compiled programs are kept for the session in one folder every worker and every `seqc`
process a test starts shares (JAX's persistent compilation cache): dozens of tests train the same
small models, each in a fresh process that would compile the same programs again. The cache only
skips recompiling what is byte-for-byte the same program, so no test sees another outcome; it
took `tests/test_run_reliability.py` from 80 s to 29 s. The folder is new for every session and
removed at its end.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from seqc.resolve.program import SEQC_PATH
from seqc.spec.parse_cache import ENV as PARSE_CACHE

JAX_CACHE = "JAX_COMPILATION_CACHE_DIR"
_OWN_CACHE = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    """The session's compilation cache, made once by the controlling process: xdist's workers
    and the processes tests start inherit the variables."""
    if os.environ.get(JAX_CACHE) or hasattr(config, "workerinput"):
        return
    folder = tempfile.mkdtemp(prefix="seqc-test-xla-")
    config.stash[_OWN_CACHE] = folder
    os.environ[JAX_CACHE] = folder
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "-1"


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = config.stash.get(_OWN_CACHE, None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(autouse=True)
def _temporary_folders_are_a_library_root(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    monkeypatch.setenv(SEQC_PATH, str(tmp_path_factory.getbasetemp()))


@pytest.fixture(autouse=True)
def _the_parse_cache_is_temporary(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    monkeypatch.setenv(PARSE_CACHE, str(tmp_path_factory.getbasetemp() / "parse-cache"))


FRAMEWORK_FREE = {
    *(
        f"test_{name}.py"
        for name in [
            "catalogue",
            "check_cache",
            "check_coverage",
            "cli",
            "cli_lazy",
            "confinement",
            "errors",
            "extras",
            "fmt",
            "fuzz",
            "hostile_inputs",
            "limits",
            "lsp",
            "lsp_editors",
            "parse_cache",
            "prefetch",
            "properties",
            "ranges",
            "readme",
            "resolve",
            "unbreakable",
            "placement_algorithms",
            "placement_graph",
            "data_bucketing",
            "data_readers",
            "proposal",
            "targets",
            "typed_config",
        ]
    )
}
"""The test files that load no ML framework in the test process: `make test-fast` runs them
(`-m "not framework"`), for the edit loop. Every other test is marked `framework`."""

MULTIPROCESS = {
    "test_multiprocess.py",
    "test_run_faults.py",
    "test_spmd.py",
    "test_tf_sync.py",
    "test_tf_async.py",
}
"""The test files that start groups of training processes (marked `multiprocess` too)."""

FRAMEWORKS = ("jax", "tensorflow", "onnxruntime", "ai_edge_litert")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        name = item.path.name
        if name not in FRAMEWORK_FREE:
            item.add_marker(pytest.mark.framework)
        if name in MULTIPROCESS:
            item.add_marker(pytest.mark.multiprocess)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under `make test-fast` (SEQC_TEST_FAST=1) a framework loaded by a test is a failure:
    the file belongs out of FRAMEWORK_FREE, or the code under test imports too much."""
    if os.environ.get("SEQC_TEST_FAST") != "1":
        return
    import sys

    loaded = [m for m in FRAMEWORKS if m in sys.modules]
    if loaded:
        print(f"\nmake test-fast: the framework-free tier loaded {', '.join(loaded)}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
