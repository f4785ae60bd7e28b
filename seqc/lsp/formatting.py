"""Formatting: what `seqc fmt` prints, as one edit of the whole buffer.

A buffer that does not parse is left as it is (no edits): the formatter rebuilds text from the
IR, and there is no IR of text that does not parse. Its error is a diagnostic already.
"""

from __future__ import annotations

import gc

from lsprotocol import types

from seqc.lsp.documents import Lines
from seqc.spec.errors import SeqcError
from seqc.spec.parser import parse_text
from seqc.spec.printer import format_spec


def format_document(text: str, filename: str, encoding: str | None) -> list[types.TextEdit]:
    try:
        formatted = format_spec(parse_text(text, filename))
    except (SeqcError, RecursionError):
        return []
    finally:
        gc.unfreeze()  # the parser freezes what it built; a server must free old versions
    if formatted == text:
        return []
    return [types.TextEdit(range=Lines(text, encoding).whole(), new_text=formatted)]
