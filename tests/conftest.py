"""What every test shares.

Imports resolve only inside the root spec's project and the folders of `SEQC_PATH` (see
`seqc.resolve.program`). Tests write specs into pytest's temporary folders and import across
them (the README's tour in `lm/` imports `../common/`, with no project marker above), so pytest's
base temporary folder is a library root for every test. Tests of the confinement itself set
`SEQC_PATH` as they need.
"""

from __future__ import annotations

import pytest

from seqc.resolve.program import SEQC_PATH


@pytest.fixture(autouse=True)
def _temporary_folders_are_a_library_root(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    monkeypatch.setenv(SEQC_PATH, str(tmp_path_factory.getbasetemp()))
