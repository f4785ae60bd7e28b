"""What every test shares.

Imports resolve only inside the root spec's project and the folders of `SEQC_PATH` (see
`seqc.resolve.program`). Tests write specs into pytest's temporary folders and import across
them (the README's tour in `lm/` imports `../common/`, with no project marker above), so pytest's
base temporary folder is a library root for every test. Tests of the confinement itself set
`SEQC_PATH` as they need.

The parse cache (`seqc.spec.parse_cache`) lives in pytest's base temporary folder, not in the
user's cache: every test writes specs at new paths, which would pile up entries there.

XLA's compiled programs are kept in one folder every worker and every `seqc` process a test
starts shares (JAX's persistent compilation cache): dozens of tests train the same small models,
each in a fresh process that would compile the same programs again. The cache only skips
recompiling what is byte-for-byte the same program, so no test sees another outcome; it took
`tests/run/test_run_reliability.py` from 80 s to 29 s. TensorFlow's `jit_compile` functions get
the same (its persistent cache). The folders are new for every session and removed at its end;
what they compiled is kept for the next sessions in `.cache/xla-tests` (`tests/support/
xla_cache.py`).

Several files read a trained run of the same tiny LM: `lm_runs` trains each once per session
(`tests/support/shared_runs.py`) and the tests take copies.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import cpu_record
import pytest
import xla_cache
from shared_runs import LmRuns

from seqc.resolve.program import SEQC_PATH
from seqc.spec.parse_cache import ENV as PARSE_CACHE

if TYPE_CHECKING:
    from toy_decoding import ToyModels

JAX_CACHE = "JAX_COMPILATION_CACHE_DIR"
FAST_COMPILE = "--xla_backend_optimization_level=0"
"""XLA's CPU code generation without LLVM's optimisation passes, for every test's programs
(JAX's and TF's `jit_compile`). Why: a test runs its tiny programs for a few steps, so
compiling is most of their cost; this took the train steps of `tests/backends/test_lazy_rows.py`
from 13.6 s to 8.0 s of compiling. XLA's own passes still run, and LLVM's do not reorder
floating-point arithmetic without fast-math, which XLA leaves off: the suite's assertions, exact
ones included, hold as before."""
_OWN_CACHE = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    """The session's compilation caches, made once by the controlling process: xdist's workers
    and the processes tests start inherit the variables."""
    cpu_record.register(config)
    if os.environ.get(JAX_CACHE) or hasattr(config, "workerinput"):
        return
    folder = xla_cache.start()
    config.stash[_OWN_CACHE] = str(folder)
    os.environ[JAX_CACHE] = str(folder / "jax")
    flag = f"--tf_xla_persistent_cache_directory={folder / 'tf'}"
    os.environ["TF_XLA_FLAGS"] = f"{os.environ.get('TF_XLA_FLAGS', '')} {flag}".strip()
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "-1"
    # no GPU autotuning cache: its folder, named in the compile options, would be in every
    # entry's key, and the session's folder is new each time
    os.environ["JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES"] = "none"
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {FAST_COMPILE}".strip()


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = config.stash.get(_OWN_CACHE, None)
    if folder:
        xla_cache.keep(Path(folder))


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


@pytest.fixture(scope="session")
def session_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder every xdist worker of the session sees, for what they make once between them."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's folder, above each worker's own
    return root / "shared"


@pytest.fixture(scope="session")
def lm_runs(session_folder: Path) -> LmRuns:
    """Runs of the tiny LM trained once for the whole session, every xdist worker included:
    `lm_runs.copy(tmp_path / "run", "train.steps=2")` (see `tests/support/shared_runs.py`)."""
    return LmRuns(session_folder / "lm-runs")


@pytest.fixture(scope="session")
def toy_models(session_folder: Path) -> ToyModels:
    """The decoding tests' toy models, trained once for the session (`toy_decoding.ToyModels`)."""
    from toy_decoding import ToyModels  # TensorFlow: imported when a test asks

    return ToyModels(session_folder / "toy-models")


TESTS = Path(__file__).resolve().parent

FRAMEWORK_FREE = {
    "frontend": {"*"},
    "compiler": {
        "moe_plan",
        "pipeline_plan",
        "placement_algorithms",
        "placement_graph",
        "typed_config",
    },
    "data": {
        "augment",
        "data_bucketing",
        "data_readers",
        "gzip_readers",
        "proposal",
        "score_groups",
        "spoken_verses",
        "targets",
    },
    "project": {"autograph_off", "extras", "private_names", "readme"},
    "serve": {"batcher", "params"},
    "sweep": {"compile_cache", "ledger", "study", "sweep_cli", "trial_signals"},
    "lm": {"fusion", "rescore"},
}
"""The test files (`test_NAME.py`) that load no ML framework in the test process, by folder
(`"*"`: all of it): `make test-fast` runs them (`-m "not framework"`), for the edit loop. Every
other test is marked `framework`: all of `backends/`, `run/` and `processes/`, and the rest of
the mixed folders."""

MULTIPROCESS = {"processes"}
"""The folders whose tests start groups of training processes (marked `multiprocess` too)."""

FRAMEWORKS = ("jax", "tensorflow", "onnxruntime", "ai_edge_litert")


def _framework_free(path: Path) -> bool:
    folder = path.relative_to(TESTS).parts[0]
    free = FRAMEWORK_FREE.get(folder, set())
    return "*" in free or path.stem.removeprefix("test_") in free


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under `make test-fast` the other files are not even imported: their imports would load
    the frameworks this tier goes without (and take seconds per worker)."""
    if os.environ.get("SEQC_TEST_FAST") != "1" or collection_path.suffix != ".py":
        return None
    if not collection_path.name.startswith("test_") or TESTS not in collection_path.parents:
        return None
    return not _framework_free(collection_path) or None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if not _framework_free(item.path):
            item.add_marker(pytest.mark.framework)
        if item.path.relative_to(TESTS).parts[0] in MULTIPROCESS:
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
