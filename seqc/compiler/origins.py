"""Where a resolved value was set, for an error found after resolution to point at.

`ResolvedExperiment.span` gives the spec line of a value, and nothing for a `--set` override;
an error about an overridden value would then have no place at all. Resolution remembers the
command line as a source whose Nth line is the Nth `--set` (`seqc.resolve.experiment`), so the
override can be pointed at like a spec line, with its caret excerpt.
"""

from __future__ import annotations

from seqc.resolve.experiment import ResolvedExperiment
from seqc.spec.errors import Note, source_line
from seqc.spec.ir import Span

COMMAND_LINE = "<command line>"
"""The source name `--set` overrides are parsed under (`seqc.resolve.experiment`)."""


def where(resolved: ResolvedExperiment, *paths: str) -> Span | None:
    """Where the first of `paths` that someone set was set: its spec line, or its `--set`.
    None when every path holds its default (a path inside a value set as a whole, such as
    `train.optimizer.lazy_rows` in `optimizer = adam(...)`, is where that value was set)."""
    for path in paths:
        origin = resolved.origin(path)
        if origin.span is not None:
            return origin.span
        if origin.kind == "override":
            span = _override_span(origin.where)
            if span is not None:
                return span
    return None


def _override_span(text: str) -> Span | None:
    """The span of `--set path=value` (as `Origin.where` words it) on the command line: the
    `path=value` part, as a spec statement spans its whole line."""
    line = 1
    while (found := source_line(COMMAND_LINE, line)) is not None:
        if found == text:
            start = len("--set ") + 1
            return Span(
                file=COMMAND_LINE, line=line, col=start, end_line=line, end_col=len(text) + 1
            )
        line += 1
    return None


def notes_at(
    resolved: ResolvedExperiment, primary: Span | None, *said: tuple[str, str]
) -> list[Note]:
    """A note at each (path, message) whose value was set somewhere other than `primary`: the
    other side of a conflict."""
    out = []
    for path, message in said:
        span = where(resolved, path)
        if span is not None and span != primary:
            out.append(Note(span, message))
    return out
