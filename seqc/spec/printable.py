"""User text made safe to show: the one sanitiser for what reaches a terminal, an editor or a log.

A spec is text someone may have sent you, and its strings, names and comments reach the screen in
errors (the caret excerpt, `found:`), in the editor's diagnostics and in the server's log. An
escape sequence there could recolour, clear or rewrite the terminal, a carriage return could
overwrite a line, and a bidirectional override (U+202E) could make a line read otherwise than it
is (Trojan Source). `printable` shows each such character as a visible escape instead.

Standard library only: `seqc check` prints a file name through it on a verdict hit, which loads
nothing else.
"""

from __future__ import annotations

import re

_FORMAT = r"\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029"
"""Bidi marks, embeddings, overrides and isolates (Trojan Source), and the line and paragraph
separators, which some viewers break a line at."""
_UNSAFE = re.compile(rf"[\x00-\x1f\x7f-\x9f{_FORMAT}]")
"""What `printable` escapes: C0 controls (ESC, BEL, CR, ...), DEL, C1 controls (CSI, ...) and
the format characters above."""
_UNSAFE_IN_LINES = re.compile(rf"[\x00-\x09\x0b-\x1f\x7f-\x9f{_FORMAT}]")
"""The same but newlines, for `printable(lines=True)`."""
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(m: re.Match[str]) -> str:
    c = m.group()
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def printable(text: str, lines: bool = False) -> str:
    """`text` safe to print to a terminal or a log: every control character (C0, DEL, C1) and
    every bidirectional or line-separating format character as a visible escape (`\\x1b`,
    `\\u202e`), so a spec, a file name or a value cannot move the cursor, recolour or clear
    the screen, or reorder what a reader sees (Trojan Source). With `lines`, newlines are kept:
    seqc's own messages and hints may run to several lines. The one sanitiser for user text:
    errors (`render`, `detail_lines`), the language server's diagnostics and logs, the CLI."""
    return (_UNSAFE_IN_LINES if lines else _UNSAFE).sub(_escape, text)
