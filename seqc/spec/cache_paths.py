"""Where seqc's on-disk caches live, and the digest of a source text that keys them.

Kept free of third-party imports: `seqc check` of an unchanged program reads its verdict
(`seqc.compiler.check_cache`) through this module without importing pydantic or Lark.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

ENV = "SEQC_PARSE_CACHE"
"""A folder for the caches, or `off` (also `0`, `false`, `no`, or empty) to disable them."""

_OFF = {"", "0", "off", "false", "no"}


def cache_dir() -> Path | None:
    """The folder of parse entries (verdicts live in its `checks/`), or None when off."""
    setting = os.environ.get(ENV)
    if setting is not None:
        return None if setting.strip().lower() in _OFF else Path(setting).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "seqc" / "parse"


def text_digest(text: str) -> str:
    """The digest of a source text as parsed (after decoding; a byte-order mark is not part of
    it), so a verdict is about the text that was checked, not about whatever bytes held it."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
