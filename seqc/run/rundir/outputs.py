"""Text outputs that line up with their inputs: one line per source, written atomically.

Why a module of its own: `seqc decode --output` and `seqc eval`'s hypotheses are read by other
tools (sacreBLEU, `paste`, `wc -l`), which pair line N of one file with line N of another. So a
written line never holds a line break, and a file appears whole or not at all: it is written
under a hidden temporary name beside its destination and renamed into place, so an interrupted
run never leaves a half file that looks complete.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from seqc.data.staging import staging_dir
from seqc.spec.errors import FileError

BREAKS = str.maketrans({"\r": " ", "\n": " "})
"""What a reader splits lines on (text mode reads `\\r` as a break too)."""


def one_line(text: str) -> str:
    """`text` as one line: a line break inside a hypothesis would shift every later line."""
    return text.translate(BREAKS)


def _mode(path: Path) -> int:
    """The permissions a new file gets (the umask's), or those of the file it replaces:
    `mkstemp` makes its files private, which a shared output should not stay."""
    if path.exists():
        return path.stat().st_mode & 0o777
    return 0o666 & ~_umask()


def unwritable_output(path: Path, e: OSError) -> FileError:
    """The error of an output file seqc cannot write (a missing folder, no permission...)."""
    why = "it is a directory" if path.is_dir() else e.strerror or str(e)
    return FileError(
        f"cannot write {path}: {why}",
        path=str(path),
        code="output-unwritable",
        hint="choose another --output path, or make its folder writable",
    )


class LineFile:
    """A text file written line by line under a temporary name and renamed into place by
    `commit` (a `with` block commits when it ends without an error, else removes the temporary
    file). Opened at once, so an unwritable path fails before any work is done."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines = 0
        if path.is_dir():
            raise unwritable_output(path, IsADirectoryError(21, "Is a directory"))
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        except OSError as e:
            raise unwritable_output(path, e) from None
        self._tmp = Path(tmp)
        self._file: IO[str] | None = os.fdopen(fd, "w", encoding="utf-8", newline="\n")

    def write(self, line: str) -> None:
        """One line; its own line breaks become spaces."""
        assert self._file is not None, "written after commit or abort"
        try:
            self._file.write(one_line(line) + "\n")
        except OSError as e:
            self.abort()
            raise unwritable_output(self.path, e) from None
        self.lines += 1

    def commit(self) -> None:
        """Flush to disk and rename into place: the file is whole from now on."""
        assert self._file is not None, "committed twice"
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None
            os.chmod(self._tmp, _mode(self.path))
            os.replace(self._tmp, self.path)
        except OSError as e:
            self.abort()
            raise unwritable_output(self.path, e) from None

    def abort(self) -> None:
        """Drop what was written; the destination keeps what it held before."""
        if self._file is not None:
            self._file.close()
            self._file = None
        self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if kind is None:
            self.commit()
        else:
            self.abort()


def write_folder(folder: Path, files: dict[str, Iterable[str] | str]) -> None:
    """A folder of files, replacing any folder of that name as a whole: built beside it under a
    hidden name, then renamed into place, so its files always belong to one run. A file is a
    string (written as is) or lines (one `one_line` each). Raises OSError."""
    tmp = staging_dir(folder.parent, folder.name)
    old = None
    try:
        for name, content in files.items():
            text = (
                content
                if isinstance(content, str)
                else "".join(one_line(line) + "\n" for line in content)
            )
            with (tmp / name).open("w", encoding="utf-8", newline="\n") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, 0o777 & ~_umask())
        if folder.exists():  # a directory cannot be renamed over a full one: move it away first
            old = staging_dir(folder.parent, folder.name)
            os.replace(folder, old / folder.name)
        os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and (old / folder.name).exists() and not folder.exists():
            os.replace(old / folder.name, folder)  # put the previous results back
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def _umask() -> int:
    """The process's umask (read by setting it, then set back)."""
    umask = os.umask(0)
    os.umask(umask)
    return umask
