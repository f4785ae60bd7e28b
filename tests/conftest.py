"""What every test shares.

Imports resolve only inside the root spec's project and the folders of `SEQC_PATH` (see
`seqc.resolve.program`). Tests write specs into pytest's temporary folders and import across
them (the README's tour in `lm/` imports `../common/`, with no project marker above), so pytest's
base temporary folder is a library root for every test. Tests of the confinement itself set
`SEQC_PATH` as they need.

The parse cache (`seqc.spec.parse_cache`) lives in pytest's base temporary folder, not in the
user's cache: every test writes specs at new paths, which would pile up entries there.
"""

from __future__ import annotations

import pytest

from seqc.resolve.program import SEQC_PATH
from seqc.spec.parse_cache import ENV as PARSE_CACHE


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
