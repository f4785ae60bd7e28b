"""The client's byte stream cut into LSP messages, recovering from frames that lie about their size.

LSP frames each JSON message with headers: `Content-Length: N\\r\\n` (other headers allowed),
an empty line, then N bytes of body. pygls trusts N: a `Content-Length: 5` before a 30-byte
body leaves 25 bytes that it reads as the start of the next header, so that header never
matches and no later message is ever read; a `Content-Length: 1000` before a short body waits
for 1000 bytes, swallowing the frames after it. Either way the server is alive and never
answers again, `shutdown` included.

`Frames` recovers instead, on one fact: no JSON text holds `Content-Length: <digits>\\r\\n`.
Outside a string those letters are not JSON, and inside a string a raw carriage return or line
feed is not allowed (JSON escapes them). So such a header line inside what a frame declares as
its body proves the declared length wrong, and marks where the next frame starts:

- A body that does not parse as JSON (the length was too short, or the bytes are garbage) is
  dropped, and reading resumes at the next `Content-Length` after that frame's own header.
- A body still incomplete when a header line appears inside it (the length was too long) is
  dropped at once, without waiting for bytes that may never come, and reading resumes at that
  header: the next frame, which the declared length had swallowed, is read as sent.
- A header block with no `Content-Length`, one over `MAX_BODY`, or more than `MAX_HEADER`
  bytes with no end is dropped alike.

A body that is JSON but not a message the protocol knows is not a framing error: the frame is
consumed and the error reported, as pygls does. Each drop is reported once, with its reason,
for the server to log. A valid frame is never dropped: the header search only runs inside bytes
that are not a valid body. What a lying frame carried is lost (the client made the error; a
request in it gets no answer), but every frame after it is answered.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MAX_HEADER = 4096
"""The longest header block read (a client sends two short lines)."""

MAX_BODY = 512 * 2**20
"""The largest body a frame may declare: the text of the largest spec (16 MiB), escaped as
JSON, is far below it; a larger claim is a broken frame, not a message to wait for."""

_NAME = re.compile(rb"content-length", re.I)
_HEADER_LINE = re.compile(rb"content-length[ \t]{0,16}:[ \t]{0,16}(\d{1,20})\r\n", re.I)
"""A `Content-Length` header line: never inside valid JSON (see the module docstring)."""
_LINE = re.compile(rb"([!#-'*+.0-9A-Z^-z|~-]+)[ \t]*:[ \t]*([^\r\n]*)")
"""Any header line: a token, a colon, a value."""
_OVERLAP = 96
"""How far back a new chunk's scan for a header line starts: longer than `_HEADER_LINE`'s
longest match, so a line split between two chunks is still found."""


@dataclass(frozen=True)
class Dropped:
    """Bytes that were not a frame, and why."""

    reason: str
    size: int


@dataclass(frozen=True)
class Unreadable:
    """A frame whose body is JSON that the protocol could not read as a message."""

    error: Exception


class Frames:
    """Feed the stream's bytes as they come; take the messages (decoded by `decode`, which
    raises `json.JSONDecodeError` or `UnicodeDecodeError` for a body that is not JSON) and
    reports of what was dropped."""

    def __init__(self, decode: Callable[[bytes], Any] = json.loads) -> None:
        self.decode = decode
        self.buf = bytearray()
        self.length: int | None = None
        """The declared body length, once a frame's headers are read."""
        self.start = 0
        """Where the body begins in `buf`, once a frame's headers are read."""
        self.scanned = 0
        """How far the incomplete body was searched for a header line."""
        self.why: str | None = None
        """Why bytes are being skipped (looking for the next header), if they are."""
        self.skipped = 0

    def feed(self, data: bytes) -> list[Any]:
        """The messages (and `Dropped` and `Unreadable` reports) that `data` completes."""
        self.buf += data
        out: list[Any] = []
        while self._step(out):
            pass
        return out

    def close(self) -> Dropped | None:
        """At the end of the stream: what was left unread, if anything."""
        size = self.skipped + len(self.buf)
        why = self.why or "the stream ended inside a frame"
        self.buf.clear()
        self.why, self.skipped, self.length = None, 0, None
        return Dropped(why, size) if size else None

    # ------------------------------------------------------------------------------ states
    def _step(self, out: list[Any]) -> bool:
        """Make one move; False when more bytes are needed."""
        if self.why is not None:
            return self._resync(out)
        if self.length is None:
            return self._headers()
        return self._body(out)

    def _headers(self) -> bool:
        blank = 0  # stray blank lines between frames are harmless
        while blank < len(self.buf) and self.buf[blank] in b"\r\n\t ":
            blank += 1
        del self.buf[:blank]
        end = self.buf.find(b"\r\n\r\n", 0, MAX_HEADER + 4)
        if end < 0:
            if len(self.buf) > MAX_HEADER:
                return self._bad("no end of headers")
            return False
        length = None
        for line in bytes(self.buf[:end]).split(b"\r\n"):
            m = _LINE.fullmatch(line)
            if m is None:
                return self._bad("bytes that are not a header")
            if m.group(1).lower() == b"content-length":
                if not m.group(2).strip().isdigit():
                    return self._bad("a Content-Length that is not a number")
                length = int(m.group(2))
        if length is None:
            return self._bad("headers without a Content-Length")
        if length > MAX_BODY:
            return self._bad(f"a Content-Length of {length:,} bytes, over {MAX_BODY:,}")
        self.length, self.start = length, end + 4
        self.scanned = self.start
        return True

    def _body(self, out: list[Any]) -> bool:
        length = self.length or 0
        end = self.start + length
        if len(self.buf) < end:
            # Incomplete: a header line in it means the declared length swallowed a frame.
            m = _HEADER_LINE.search(self.buf, max(self.start, self.scanned - _OVERLAP))
            self.scanned = len(self.buf)
            if m is None:
                return False
            self._drop_until(
                m.start(),
                f"a frame declared {length:,} bytes but the next frame starts after "
                f"{m.start() - self.start:,}",
                out,
            )
            return True
        body = bytes(self.buf[self.start : end])
        try:
            message = self.decode(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            return self._bad(f"a frame's {length:,}-byte body is not JSON ({e})")
        except Exception as e:  # JSON, but not a message: the frame itself was sound
            message = Unreadable(e)
        del self.buf[:end]
        self.length = None
        out.append(message)
        return True

    def _bad(self, why: str) -> bool:
        """Drop the frame at the front of the buffer: skip to the next `Content-Length` after
        its own."""
        self.length, self.why = None, why
        del self.buf[:1]
        self.skipped += 1
        return True

    def _resync(self, out: list[Any]) -> bool:
        m = _NAME.search(self.buf)
        if m is None:  # keep what could be the start of the name
            keep = len(b"content-length") - 1
            cut = max(0, len(self.buf) - keep)
            self.skipped += cut
            del self.buf[:cut]
            return False
        why, self.why = self.why or "", None
        self._drop_until(m.start(), why, out)
        return True

    def _drop_until(self, index: int, why: str, out: list[Any]) -> None:
        out.append(Dropped(why, self.skipped + index))
        del self.buf[:index]
        self.skipped, self.length = 0, None
