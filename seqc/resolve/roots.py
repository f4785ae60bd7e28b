"""Where a program's imports may reach: the root spec's project, `SEQC_PATH`, bundled examples.

The rule is explained in `seqc.resolve.program`'s docstring. It lives in this module, with no
third-party imports, because `seqc check` of an unchanged program compares the roots its
cached verdict was reached under (`seqc.compiler.check_cache`) before it imports the parser.
"""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_MARKERS = ("seqc.toml", "pyproject.toml", ".git", "ORIGIN")
"""Files or folders that mark the top of a spec's project (see the module docstring)."""

SEQC_PATH = "SEQC_PATH"
"""The environment variable naming library folders that imports may also reach."""

_SOURCE = Path(__file__).resolve().parents[2]
BUNDLED_EXAMPLES = _SOURCE / "examples" if (_SOURCE / "pyproject.toml").is_file() else None
"""The examples of a source checkout of seqc, or None for an installed package."""


def project_root(folder: Path) -> Path:
    """The nearest folder at or above `folder` holding a project marker, else `folder`."""
    for candidate in (folder, *folder.parents):
        if any((candidate / m).exists() for m in PROJECT_MARKERS):
            return candidate
    return folder


def import_roots(root_spec: Path) -> list[Path]:
    """The folders a program's imports may resolve into, for a resolved root spec path."""
    roots = [project_root(root_spec.parent)]
    for entry in os.environ.get(SEQC_PATH, "").split(os.pathsep):
        if entry.strip():
            roots.append(Path(entry).expanduser().resolve())
    if BUNDLED_EXAMPLES is not None and BUNDLED_EXAMPLES.is_dir():
        roots.append(BUNDLED_EXAMPLES)
    return roots
