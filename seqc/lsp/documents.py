"""The editor's buffers as seqc sees them: paths, the overlay of unsaved texts, positions.

Spans count lines and columns from 1, in characters, with lines ended by `\\n` only (Lark's
counting). LSP counts from 0 in the code units the client chose (UTF-16 unless it asked
otherwise). `Lines` converts between the two on the text the span was made from, so a column
after an emoji or a CJK name still lands on the right character.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lsprotocol import types
from pygls.uris import from_fs_path, to_fs_path
from pygls.workspace import Workspace

from seqc.spec import ir
from seqc.spec.files import peek_spec

SUFFIX = ".seq"


def path_of(uri: str) -> Path | None:
    """The file a `file:` URI names; None for other schemes (an untitled buffer)."""
    if not uri.startswith("file:"):
        return None
    fs = to_fs_path(uri)
    return Path(fs) if fs else None


def resolved(path: Path) -> Path | None:
    """`path` with symlinks followed, as the program loader keys files; None if it cannot be."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a symlink loop
        return None


def open_seq_docs(workspace: Workspace) -> dict[str, Path]:
    """The open `.seq` buffers that are files: URI to path."""
    out = {}
    for uri in list(workspace.text_documents):
        path = path_of(uri)
        if path is not None and path.suffix == SUFFIX:
            out[uri] = path
    return out


def overlay(workspace: Workspace) -> dict[Path, str]:
    """Resolved path to buffer text of every open `.seq` file: what `load_program` reads
    instead of the disk, so unsaved edits to an imported file count too."""
    out = {}
    for uri, path in open_seq_docs(workspace).items():
        key = resolved(path)
        if key is not None:
            out[key] = workspace.get_text_document(uri).source
    return out


def uri_of(file: str, workspace: Workspace) -> str:
    """The URI of the file a span names: the open buffer's own URI when one shows that file
    (the client may have opened it through a symlink), else the file's."""
    path = Path(file)
    if not path.is_absolute():
        path = Path.cwd() / path  # the loader shows paths relative to the working directory
    key = resolved(path)
    for uri, open_path in open_seq_docs(workspace).items():
        if open_path == path or (key is not None and resolved(open_path) == key):
            return uri
    return from_fs_path(str(key or path)) or path.as_uri()


def text_of(uri: str, workspace: Workspace) -> str:
    """A buffer's text, or the file's on disk when it is not open ("" when unreadable)."""
    if uri in workspace.text_documents:
        return workspace.get_text_document(uri).source
    path = path_of(uri)
    if path is None:
        return ""
    return peek_spec(path) or ""  # bounded: a pipe or a device is never read


class Lines:
    """A text split as the parser counts lines, with conversions to and from LSP positions."""

    def __init__(self, text: str, encoding: str | None = None) -> None:
        self.text = text
        self.lines = text.split("\n")
        self.encoding = encoding or types.PositionEncodingKind.Utf16
        self._starts = [0]
        for line in self.lines[:-1]:
            self._starts.append(self._starts[-1] + len(line) + 1)

    def _units(self, s: str) -> int:
        if self.encoding == types.PositionEncodingKind.Utf32:
            return len(s)
        if self.encoding == types.PositionEncodingKind.Utf8:
            return len(s.encode("utf-8", "surrogatepass"))
        return len(s.encode("utf-16-le", "surrogatepass")) // 2

    def position(self, line: int, col: int) -> types.Position:
        """LSP position of a 0-based line and character column (clamped into the text)."""
        line = min(max(line, 0), len(self.lines) - 1)
        text = self.lines[line]
        col = min(max(col, 0), len(text))
        return types.Position(line=line, character=self._units(text[:col]))

    def column(self, pos: types.Position) -> tuple[int, int]:
        """0-based line and character column of an LSP position."""
        line = min(max(pos.line, 0), len(self.lines) - 1)
        text = self.lines[line]
        units = 0
        for i, ch in enumerate(text):
            if units >= pos.character:
                return line, i
            units += self._units(ch)
        return line, len(text)

    def offset(self, pos: types.Position) -> int:
        """Character offset into the text of an LSP position."""
        line, col = self.column(pos)
        return self._starts[line] + col

    def at_offset(self, offset: int) -> types.Position:
        """LSP position of a character offset."""
        offset = min(max(offset, 0), len(self.text))
        lo, hi = 0, len(self._starts) - 1
        while lo < hi:  # the last line starting at or before the offset
            mid = (lo + hi + 1) // 2
            if self._starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return self.position(lo, offset - self._starts[lo])

    def span_range(self, span: ir.Span) -> types.Range:
        """The LSP range of a span (1-based, end exclusive); at least one character wide so an
        editor shows it."""
        start = self.position(span.line - 1, span.col - 1)
        end_line, end_col = span.end_line - 1, span.end_col - 1
        if (end_line, end_col) <= (span.line - 1, span.col - 1):
            end_line, end_col = span.line - 1, span.col
        return types.Range(start=start, end=self.position(end_line, end_col))

    def whole(self) -> types.Range:
        """The range of the whole text."""
        return types.Range(
            start=types.Position(line=0, character=0),
            end=self.position(len(self.lines) - 1, len(self.lines[-1])),
        )


@dataclass
class Analysis:
    """What the last check of one buffer found. `program` is None when it failed to load;
    `last_program` is the newest that loaded, so completion and navigation keep working on a
    buffer that does not parse mid-edit. `files`: resolved paths of every file the program
    read, to re-check this buffer when one of them changes."""

    version: int | None = None
    program: object | None = None
    last_program: object | None = None
    files: set[Path] = field(default_factory=set)
    resolved: dict[str, object] = field(default_factory=dict)
    """Experiments resolved for hover, by name, for this version of the text."""
