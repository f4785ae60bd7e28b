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

from seqc.spec.cache_paths import text_digest
from seqc.spec.ir import Span
from seqc.spec.printable import printable as printable  # re-exported: errors render with it

_SOURCES: dict[str, list[str]] = {}
"""Lines of every file read in this process, so any later pass can render a caret excerpt."""

_TEXTS: dict[str, str] = {}
"""The text of every file read in this process, as read: what a run freezes (`source_text`)."""

_DIGESTS: dict[str, str] = {}
"""The digest of each file's text as it was read, so a verdict about a program names the texts
that were checked, even if a file changes on disk while the check runs."""


def remember_source(path: str, text: str) -> None:
    # lines as the parser counts them: at "\n" only (`splitlines` also breaks at U+2028, U+0085
    # and form feeds, which would shift every excerpt after one)
    _SOURCES[path] = [line.removesuffix("\r") for line in text.split("\n")]
    _TEXTS[path] = text
    _DIGESTS[path] = text_digest(text)


def source_text(path: str) -> str | None:
    """The text last read from `path` in this process: what was parsed, whatever the file on
    disk holds by now (an edit made while a run starts must not reach its frozen spec)."""
    return _TEXTS.get(path)


def source_digest(path: str) -> str | None:
    """The digest of the text last read from `path` in this process (`text_digest`)."""
    return _DIGESTS.get(path)


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
        """Plain-text rendering: location, message, caret excerpt, expected/found, hints. Every
        field passes through `printable`: nothing a spec or a file name holds drives a
        terminal."""
        out = [f"{printable(self.location)}: {self.phase} error [{self.code}]: {self.text()}"]
        if self.span is not None:
            out.extend(_excerpt(self.span))
        out.extend(self.detail_lines("  "))
        for note in self.notes:
            out.append(
                f"{printable(str(note.span))}: note: {printable(clip(note.message), lines=True)}"
            )
            out.extend(_excerpt(note.span))
        return "\n".join(out)

    def text(self) -> str:
        """The message, clipped to `TEXT_WIDTH` and made `printable` (its own lines kept)."""
        return printable(clip(self.message), lines=True)

    def detail_lines(self, indent: str = "") -> list[str]:
        """The expected, found, did-you-mean and hint lines, each clipped to `TEXT_WIDTH` and
        made `printable`: what the CLI prints under the excerpt and an editor shows under the
        message. `found` and the suggestion quote the spec, so their newlines are escaped too:
        a value cannot forge a line of its own."""
        out = []
        if self.expected is not None:
            out.append(f"{indent}expected: {printable(clip(self.expected), lines=True)}")
        if self.found is not None:
            out.append(f"{indent}found:    {printable(clip(self.found))}")
        if self.suggestion is not None:
            out.append(f"{indent}did you mean `{printable(clip(self.suggestion))}`?")
        if self.hint is not None:
            out.append(f"{indent}hint: {printable(clip(self.hint), lines=True)}")
        return out


EXCERPT_WIDTH = 120
"""The most characters of a source line an excerpt shows: a longer line (a generated spec, a
1 MB line) is cut to a window around the caret, marked with `...` where it was cut."""

_CUT = "..."

TEXT_WIDTH = 2_000
"""The most characters of a message, expected, found or hint: they quote the spec's values,
and a 1 MB string in a spec makes a 1 MB `found:` line otherwise. Far above any message seqc
writes itself (a conversion error with its explanation runs to 600)."""


def clip(text: str, limit: int = TEXT_WIDTH) -> str:
    """`text` cut to `limit` characters, saying how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}{_CUT} ({len(text):,} characters in all)"


def shows_source(file: str) -> bool:
    """Whether an excerpt may quote this file's lines: only .seq specs and seqc's own pseudo
    sources (`<command line>`). A file that is not a spec (an import of `/etc/shadow`, a data
    file) is never echoed in an error, whatever made seqc read it."""
    return file.endswith(".seq") or (file.startswith("<") and file.endswith(">"))


def _excerpt(span: Span) -> list[str]:
    line = source_line(span.file, span.line) if shows_source(span.file) else None
    if line is None:
        return []
    line = line.expandtabs(1)
    start = span.col - 1
    width = 1
    if span.end_line == span.line and span.end_col > span.col:
        width = span.end_col - span.col
    if len(line) > EXCERPT_WIDTH:
        # A window that starts a third of the width before the caret, within the line.
        left = max(0, min(start - EXCERPT_WIDTH // 3, len(line) - EXCERPT_WIDTH))
        right = left + EXCERPT_WIDTH
        head = _CUT if left > 0 else ""
        tail = _CUT if right < len(line) else ""
        line = head + line[left:right] + tail
        width = max(1, min(width, right - start))
        start = start - left + len(head)
    # Escapes widen the line: the caret moves by what they add before it and under it.
    marked = line[start : start + width]
    width = len(printable(marked)) + max(0, width - len(marked))
    start = len(printable(line[:start])) + max(0, start - len(line))
    gutter = f"{span.line:>5} | "
    caret = " " * (len(gutter) - 2) + "| " + " " * start + "^" * width
    return [gutter + printable(line), caret]


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


def no_step(directory: object, step: int, held: Iterable[int]) -> FileError:
    """The error of a step that a checkpoint store does not hold (either backend's): the steps
    it does hold, and how to name one."""
    steps = sorted(held)
    return FileError(
        f"no checkpoint of step {step} in {directory}",
        path=str(directory),
        code="no-checkpoint",
        found=f"steps {', '.join(map(str, steps))}" if steps else "no checkpoint at all",
        hint=f"name a step it holds (the newest is {steps[-1]})" if steps else "train first",
    )


def unloadable_model(path: object, runtime: str, error: BaseException) -> FileError:
    """The error of an artifact's model file that its runtime cannot load (truncated, or not a
    model at all) though its manifest's sha256 matches: the file, the runtime's reason, the fix."""
    reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return FileError(
        f"{runtime} cannot load the model file {path}",
        path=str(path),
        code="bad-model",
        found=reason,
        hint="the file is truncated or is not a model this runtime reads; export the artifact "
        "again (seqc export SPEC -e EXP --run-dir RUN --format FORMAT)",
    )


def too_deep(e: RecursionError, path: str | None) -> SeqcError:
    """A spec nested past what a pass can recurse through, located as well as can be.

    The parser refuses syntax nested deeper than `MAX_NESTING` and imports chained deeper than
    `MAX_IMPORT_DEPTH`, each at its line; this is the net under the other passes (user layers
    that contain each other thousands deep). The place is the innermost source span any frame
    of the recursion was working on, else `path` (the spec file a command was given). The CLI
    and the language server both put it under every pass.
    """
    span = None
    tb = e.__traceback__
    while tb is not None:  # outermost to innermost: the last span found is the deepest
        for value in tb.tb_frame.f_locals.values():
            try:
                found = value if isinstance(value, Span) else getattr(value, "span", None)
            except Exception:  # a property that fails: not a node of ours
                continue
            if isinstance(found, Span):
                span = found
        tb = tb.tb_next
    return CheckError(
        "the spec nests too deeply to process",
        span=span,
        path=path,
        code="too-deep",
        hint="layers, values or imports nest thousands deep: flatten the chain, e.g. with "
        "`repeat(n)` for a stack of identical layers",
    )
