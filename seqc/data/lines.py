"""A data file's lines: decoded in its encoding, numbered, through gzip when it is compressed.

Every reader goes through `read_lines`, so a line number, a decoding error's byte offset, a
byte-order mark and CRLF endings mean the same in every reader, and in a `.gz` file (offsets
count in the decompressed text). Files are read a line at a time (memory flat in their size),
except in the codecs whose newline is not the byte 0x0a (utf-16, utf-32), decoded whole. A
damaged gzip file is `[bad-gzip]` at the line reached; no error quotes a file's bytes.
"""

from __future__ import annotations

import codecs
import gzip
import zlib
from collections.abc import Iterator
from pathlib import Path

from seqc.data.errors import DataError, display_path, where

_WHOLE_FILE_CODECS = ("utf-16", "utf-32")
"""Codecs whose newline is not the single byte 0x0a: these files are decoded whole."""


def _codec(encoding: str, path: Path) -> str:
    try:
        return codecs.lookup(encoding).name
    except LookupError:
        raise DataError(
            f"unknown text encoding `{encoding}`",
            code="bad-encoding",
            path=display_path(path),
            hint="use a Python codec name such as utf-8 or latin-1",
        ) from None


def _decode_error(
    path: Path, line: int, encoding: str, bad: bytes, offset: int, col: int
) -> DataError:
    return DataError(
        f"line {line} is not valid {encoding}",
        code="bad-encoding",
        path=where(path, line),
        found=f"byte 0x{bad[:1].hex()} at byte offset {offset} (byte {col} of the line)",
        hint="convert the file (e.g. `iconv -f latin1 -t utf-8`) or set the reader's `encoding`",
    )


def read_lines(path: Path, encoding: str = "utf-8") -> Iterator[tuple[int, str]]:
    """(line number, text) for each line, without the newline; a DataError at the first line
    that does not decode, with its byte offset. A `.gz` file is decompressed as it is read
    (line numbers and offsets are those of the decompressed text), never whole."""
    codec = _codec(encoding, path)
    if codec.startswith(_WHOLE_FILE_CODECS):
        yield from _read_whole(path, codec, encoding)
        return
    offset = 0
    for lineno, raw in enumerate(_raw_lines(path), 1):
        try:
            text = raw.decode(codec)
        except UnicodeDecodeError as e:
            bad = raw[e.start : e.end]
            err = _decode_error(path, lineno, encoding, bad, offset + e.start, e.start + 1)
            raise err from None
        offset += len(raw)
        text = text.rstrip("\n").rstrip("\r")
        if lineno == 1:
            text = text.removeprefix("\ufeff")  # a byte-order mark is not text
        yield lineno, text


def _read_whole(path: Path, codec: str, encoding: str) -> Iterator[tuple[int, str]]:
    if _is_gzip(path):
        # a UTF-16/32 newline is not one byte, so count lines in what decoded before the damage
        chunks: list[bytes] = []
        try:
            with gzip.open(path, "rb") as f:
                while chunk := f.read(1 << 20):
                    chunks.append(chunk)
        except _GZIP_ERRORS as e:
            read = b"".join(chunks).decode(codec, errors="replace")
            raise _gzip_error(path, read.count("\n") + 1, e) from None
        data = b"".join(chunks)
    else:
        data = path.read_bytes()
    try:
        text = data.decode(codec)
    except UnicodeDecodeError as e:
        line = data[: e.start].decode(codec, errors="replace").count("\n") + 1
        col = e.start - data.rfind(b"\n", 0, e.start)
        bad = data[e.start : e.end]
        raise _decode_error(path, line, encoding, bad, e.start, col) from None
    lines = text.removeprefix("\ufeff").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for lineno, line in enumerate(lines, 1):
        yield lineno, line.rstrip("\r")


_GZIP_ERRORS = (gzip.BadGzipFile, EOFError, zlib.error)
"""What a damaged .gz raises mid-read: a bad header or checksum, a cut-off stream, bad data."""


def _is_gzip(path: Path) -> bool:
    return path.suffix.lower() == ".gz"


def _raw_lines(path: Path) -> Iterator[bytes]:
    """A file's lines as bytes with their newlines, one at a time; a `.gz` file decompressed
    on the fly, its damage a DataError at the line the reading reached."""
    if not _is_gzip(path):
        with path.open("rb") as f:
            yield from f
        return
    reached = 1
    try:
        with gzip.open(path, "rb") as f:
            for raw in f:
                yield raw
                reached += 1
    except _GZIP_ERRORS as e:
        raise _gzip_error(path, reached, e) from None


def _gzip_error(path: Path, line: int, e: Exception) -> DataError:
    if isinstance(e, EOFError):
        found = "the compressed data ends early (a truncated file)"
    elif isinstance(e, gzip.BadGzipFile) and str(e).startswith("Not a gzipped file"):
        found = "bytes that are not a gzip header"  # gzip's own message quotes them: not here
    else:
        found = str(e)  # a CRC or length mismatch, or zlib's complaint: never the file's text
    return DataError(
        f"`{path.name}` cannot be decompressed past line {line - 1}"
        if line > 1
        else f"`{path.name}` is not a readable gzip file",
        code="bad-gzip",
        path=where(path, line),
        found=found,
        hint="the file is damaged or not gzip; recompress it (`gzip -t FILE` tests one)",
    )
