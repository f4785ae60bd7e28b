"""What the server's tests share: the session's exported artifacts (`served_artifacts`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from served_artifacts import Served, served


@pytest.fixture(scope="session")
def arts(session_folder: Path, lm_runs) -> Served:
    """A translator (ONNX, TFLite) and the tiny LM (ONNX), exported once per session."""
    return served(session_folder / "served", lm_runs)
