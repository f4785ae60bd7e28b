"""Reading a spec file from disk: the one place every command, import and editor read goes through.

A path given to seqc may name anything: `/dev/zero` or `/dev/urandom` (which a plain
`read_text` reads without end, gigabytes a second, in one C call that never returns to the
interpreter, so not even a Python signal handler runs), a named pipe (whose `open` waits for a
writer forever), or a regular file of many gigabytes. So a spec is read here only if it is a
regular file of at most `MAX_SPEC_BYTES`: the file is opened without blocking (a pipe's `open`
returns at once), its kind and size are taken from the open descriptor (not the path, so a file
swapped after a check is still the file checked), and at most `MAX_SPEC_BYTES + 1` bytes are
read (a file that grows while it is read, or a `/proc` file whose size reads as 0, is still
bounded). Anything else is a `FileError` before a byte is read.

Standard library only at import: the `seqc check` verdict lookup reads specs through here and
must not load the IR (pydantic). The errors are imported when one is raised.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from seqc.spec.errors import FileError

MAX_SPEC_BYTES = 16 * 2**20
"""The largest spec file seqc reads (16 MiB). The largest program of the benchmarks is 13.5k
lines in a few hundred KB over many files; a file past this is generated or not a spec, and
parsing it would take minutes."""

_CHUNK = 1 << 20

_KINDS = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
)


@dataclass(frozen=True)
class _Refusal:
    """Why a path was not read, as the fields of the `FileError` it becomes."""

    message: str
    code: str
    hint: str | None = None
    expected: str | None = None
    found: str | None = None

    def error(self, path: Path) -> FileError:
        from seqc.spec.errors import FileError

        return FileError(
            self.message,
            path=str(path),
            code=self.code,
            hint=self.hint,
            expected=self.expected,
            found=self.found,
        )


def _read(path: Path) -> bytes | _Refusal:
    """The file's bytes, or why they were not read."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return _Refusal(f"no such file: {path}", "file-not-found")
    except IsADirectoryError:  # where a folder cannot be opened at all (Windows)
        return _is_dir(path)
    except OSError as e:
        return _Refusal(f"cannot read {path}: {e.strerror}", "unreadable")
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            return _is_dir(path)
        if not stat.S_ISREG(st.st_mode):
            kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a file")
            return _Refusal(
                f"{path} is {kind}, not a regular file",
                "not-a-file",
                expected="a regular file",
                found=kind,
                hint="give seqc the spec file itself: devices, pipes and sockets are never read",
            )
        if st.st_size > MAX_SPEC_BYTES:
            return _too_large(path, f"{st.st_size:,} bytes")
        chunks: list[bytes] = []
        total = 0
        while total <= MAX_SPEC_BYTES:
            chunk = os.read(fd, _CHUNK)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            total += len(chunk)
        return _too_large(path, f"more than {MAX_SPEC_BYTES:,} bytes")
    except OSError as e:
        return _Refusal(f"cannot read {path}: {e.strerror}", "unreadable")
    finally:
        os.close(fd)


def _is_dir(path: Path) -> _Refusal:
    return _Refusal(f"{path} is a directory, not a .seq file", "is-dir")


def _too_large(path: Path, found: str) -> _Refusal:
    return _Refusal(
        f"{path} is larger than a spec file may be",
        "file-too-large",
        expected=f"at most {MAX_SPEC_BYTES:,} bytes ({MAX_SPEC_BYTES // 2**20} MiB)",
        found=found,
        hint="split the spec into files that import each other",
    )


def read_spec(path: str | Path, *, keep_bom: bool = False) -> str:
    """A spec file's text, or a `FileError` (missing, a folder, not a regular file, too large,
    unreadable, not UTF-8). A UTF-8 byte-order mark is dropped, as editors on Windows write
    one, unless `keep_bom` (`seqc fmt` compares the file's text as it is)."""
    p = Path(path)
    data = _read(p)
    if isinstance(data, _Refusal):
        raise data.error(p)
    try:
        return data.decode("utf-8" if keep_bom else "utf-8-sig")
    except UnicodeDecodeError as e:
        raise _not_utf8(p, e) from None


def peek_spec(path: str | Path) -> str | None:
    """A spec file's text with undecodable bytes replaced, or None when `read_spec` would refuse
    it: for what may quietly do without the text (a cache's digest, an editor's line count)."""
    data = _read(Path(path))
    return None if isinstance(data, _Refusal) else data.decode("utf-8-sig", errors="replace")


def _not_utf8(p: Path, e: UnicodeDecodeError) -> FileError:
    """A file that is not UTF-8, located at its first bad byte so an editor can underline it."""
    from seqc.spec.errors import FileError
    from seqc.spec.ir import Span

    data, start = e.object, e.start
    line = data.count(b"\n", 0, start) + 1
    col = len(data[data.rfind(b"\n", 0, start) + 1 : start].decode("utf-8", "replace")) + 1
    return FileError(
        f"{p} is not UTF-8 text (byte {start})",
        span=Span(file=str(p), line=line, col=col, end_line=line, end_col=col + 1),
        path=str(p),
        code="not-utf8",
        hint="save the file as UTF-8",
    )
