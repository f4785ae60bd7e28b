"""Errors raised while reading, tokenising and preparing data.

Why a phase of its own: a data problem (a bad line in a corpus, a corpus not prepared yet) is the
user's to fix, like a spec error, so it renders the same way (location, message, expected/found,
hint) and the CLI turns it into exit code 2 instead of a traceback. The location is `file:line`
of the offending line, not a spec span: the spec is fine, the file is not.
"""

from __future__ import annotations

import os
from pathlib import Path

from seqc.spec.errors import SeqcError


class DataError(SeqcError):
    """Bad or missing data: an undecodable line, a missing column, an empty corpus."""

    phase = "data"


def display_path(path: str | Path) -> str:
    """A path as a user would type it: relative to the cwd when inside it, else absolute."""
    p = Path(path)
    try:
        rel = os.path.relpath(p)
    except ValueError:  # another drive on Windows
        return str(p)
    return str(p) if rel.startswith("..") else rel


def where(path: str | Path, line: int | None = None) -> str:
    """`file:line` (or just `file`) for error locations and drop reports."""
    shown = display_path(path)
    return shown if line is None else f"{shown}:{line}"
