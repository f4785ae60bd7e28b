"""Errors are part of seqc's interface.

Each error names its phase (`parse`, `resolve`, `check`, ...) and a stable `code` that tests and
tools can match on, points at a span, and renders the offending line with a caret, what was
expected, what was found, and a "did you mean" when a close name exists. The CLI prints these and
exits with code 2; a Python traceback reaching a user is a bug.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field

from seqc.spec.ir import Span

_SOURCES: dict[str, list[str]] = {}
"""Lines of every file read in this process, so any later pass can render a caret excerpt."""


def remember_source(path: str, text: str) -> None:
    _SOURCES[path] = text.splitlines()


def source_line(path: str, line: int) -> str | None:
    lines = _SOURCES.get(path)
    if lines is None:
        return None
    return lines[line - 1] if 0 < line <= len(lines) else None


def did_you_mean(name: str, candidates: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The closest candidate to a misspelt name, if any is close enough."""
    pool = sorted(set(candidates))
    close = difflib.get_close_matches(name, pool, n=1, cutoff=cutoff)
    if close:
        return close[0]
    lowered = {c.lower(): c for c in pool}
    if name.lower() in lowered:
        return lowered[name.lower()]
    # Short names defeat the ratio (`ml` vs `lm`): accept a pure transposition of letters.
    anagrams = [c for c in pool if sorted(c) == sorted(name)]
    return anagrams[0] if len(anagrams) == 1 else None


@dataclass
class Note:
    """A secondary location (e.g. the first declaration of a duplicate name)."""

    span: Span
    message: str


@dataclass
class SeqcError(Exception):
    """Base of all user-facing errors. `phase` and `code` identify the kind of error."""

    message: str
    span: Span | None = None
    code: str = "error"
    expected: str | None = None
    found: str | None = None
    suggestion: str | None = None
    hint: str | None = None
    notes: list[Note] = field(default_factory=list)
    path: str | None = None
    phase = "error"

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.render()

    @property
    def location(self) -> str:
        if self.span is not None:
            return str(self.span)
        return self.path or "<seqc>"

    def render(self) -> str:
        """Plain-text rendering: location, message, caret excerpt, expected/found, hints."""
        out = [f"{self.location}: {self.phase} error [{self.code}]: {self.message}"]
        if self.span is not None:
            out.extend(_excerpt(self.span))
        if self.expected is not None:
            out.append(f"  expected: {self.expected}")
        if self.found is not None:
            out.append(f"  found:    {self.found}")
        if self.suggestion is not None:
            out.append(f"  did you mean `{self.suggestion}`?")
        if self.hint is not None:
            out.append(f"  hint: {self.hint}")
        for note in self.notes:
            out.append(f"{note.span}: note: {note.message}")
            out.extend(_excerpt(note.span))
        return "\n".join(out)


def _excerpt(span: Span) -> list[str]:
    line = source_line(span.file, span.line)
    if line is None:
        return []
    width = 1
    if span.end_line == span.line and span.end_col > span.col:
        width = span.end_col - span.col
    gutter = f"{span.line:>5} | "
    caret = " " * (len(gutter) - 2) + "| " + " " * (span.col - 1) + "^" * width
    return [gutter + line.expandtabs(1), caret]


class ParseError(SeqcError):
    phase = "parse"


class ResolveError(SeqcError):
    phase = "resolve"


class CheckError(SeqcError):
    """A type, reference or shape problem found by the front end's checks."""

    phase = "check"


class UsageError(SeqcError):
    """A bad command-line argument (an unknown experiment, a bad --set)."""

    phase = "usage"


class FileError(SeqcError):
    """A missing or unreadable file."""

    phase = "file"


class EmitError(SeqcError):
    """An op of the graph that a backend could not run or trace, located at its layer's line."""

    phase = "emit"


class ExportError(SeqcError):
    """A model that could not become a deployment artifact (ONNX, TFLite, SavedModel), or an
    artifact that failed its gate; located at the layer's line where one is known."""

    phase = "export"


class DeviceError(SeqcError):
    """Devices a spec or a plan asks for that this process does not have."""

    phase = "device"


def no_checkpoint(directory: object) -> FileError:
    """The error of a checkpoint store with nothing in it (either backend's)."""
    return FileError(
        f"no checkpoint in {directory}",
        path=str(directory),
        code="no-checkpoint",
        hint="train first, or drop --resume",
    )
