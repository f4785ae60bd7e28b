"""`seqc check` on the editor's buffers, as LSP diagnostics, and their quick fixes.

A check runs what `seqc check FILE` runs (load the program with its imports, check every layer,
input and task, resolve every experiment) on the buffers' texts, and stops at the first error,
as the command does. The error goes to the file it is in: an error in an imported file is shown
in that file, and at the import line of the buffer that led to it, so it is seen even when the
imported file is not open. A "did you mean" travels in the diagnostic's data and comes back as
a quick fix that replaces the misspelt word.
"""

from __future__ import annotations

import difflib
import gc
import re
from dataclasses import dataclass, field
from pathlib import Path

from lsprotocol import types
from pygls.workspace import Workspace

from seqc.lsp.documents import (
    Analysis,
    Lines,
    overlay,
    path_of,
    resolved,
    text_of,
    uri_of,
)
from seqc.spec.errors import CheckError, SeqcError, clip, too_deep
from seqc.spec.files import peek_spec
from seqc.spec.printable import printable

SOURCE = "seqc"


def message(e: SeqcError) -> str:
    """The error as `seqc check` words it, without the location and the caret excerpt (the
    editor shows the place itself); `printable`, as the CLI prints it."""
    return "\n".join([f"{e.phase} error: {e.text()}", *e.detail_lines()])


@dataclass
class Outcome:
    """One check of one buffer: diagnostics by target URI, and what it learnt."""

    diagnostics: dict[str, list[types.Diagnostic]] = field(default_factory=dict)
    analysis: Analysis = field(default_factory=Analysis)
    internal: str | None = None
    """A traceback, when seqc itself failed (a bug, logged by the server)."""


def root_path(uri: str) -> Path:
    """The path a buffer is checked as; an untitled buffer as a file in the working folder."""
    return path_of(uri) or Path.cwd() / "untitled.seq"


def check(uri: str, workspace: Workspace, previous: Analysis | None = None) -> Outcome:
    """Check one buffer (and whatever it imports, open buffers read from the editor)."""
    from seqc.compiler.check import check_program
    from seqc.resolve.program import load_program

    doc = workspace.get_text_document(uri)
    path = root_path(uri)
    texts = overlay(workspace)
    key = resolved(path)
    if key is not None:
        texts[key] = doc.source
    outcome = Outcome()
    analysis = outcome.analysis
    analysis.version = doc.version
    analysis.last_program = previous.last_program if previous else None
    analysis.files = set(previous.files) if previous else set()
    if key is not None:
        analysis.files.add(key)
    error: SeqcError | None = None
    try:
        program = load_program(str(path), texts)
        analysis.program = analysis.last_program = program
        analysis.files = {key} if key is not None else set()
        for f in program.files:
            p = resolved(Path(f.path) if Path(f.path).is_absolute() else Path.cwd() / f.path)
            if p is not None:
                analysis.files.add(p)
        check_program(program)
    except SeqcError as e:
        error = e
    except RecursionError as e:
        error = too_deep(e, str(path))  # the CLI's net for the same failure, located alike
    except Exception:  # a bug in seqc: say so at the top of the buffer, log the traceback
        import traceback

        outcome.internal = traceback.format_exc()
        error = CheckError(
            "seqc failed on this file (an internal error; the server's log has the traceback)",
            path=str(path),
            code="internal",
        )
    finally:
        gc.unfreeze()  # the parser freezes what it built; a server must free old versions
    outcome.diagnostics[uri] = []
    if error is not None:
        _place(error, uri, path, texts, workspace, outcome)
    return outcome


def _place(
    e: SeqcError,
    uri: str,
    path: Path,
    texts: dict[Path, str],
    workspace: Workspace,
    outcome: Outcome,
) -> None:
    """Turn an error into the diagnostics it makes: at its own place, and at the import line
    that reaches it when that place is in another file."""
    encoding = workspace.position_encoding
    if e.span is None:
        target = uri
        rng = types.Range(
            start=types.Position(line=0, character=0), end=types.Position(line=0, character=0)
        )
    else:
        target = uri_of(e.span.file, workspace)
        if target == uri:
            lines = Lines(workspace.get_text_document(uri).source, encoding)
        else:
            lines = Lines(text_of(target, workspace), encoding)
        rng = lines.span_range(e.span)
    related = []
    for note in e.notes:
        note_uri = uri_of(note.span.file, workspace)
        note_lines = Lines(text_of(note_uri, workspace), encoding)
        related.append(
            types.DiagnosticRelatedInformation(
                location=types.Location(uri=note_uri, range=note_lines.span_range(note.span)),
                message=printable(clip(note.message), lines=True),
            )
        )
    diag = types.Diagnostic(
        range=rng,
        message=message(e),
        severity=types.DiagnosticSeverity.Error,
        code=e.code,
        source=SOURCE,
        related_information=related or None,
        data={"suggestion": e.suggestion} if e.suggestion else None,
    )
    outcome.diagnostics.setdefault(target, []).append(diag)
    if target != uri and e.span is not None:
        via = _import_leading_to(path, workspace.get_text_document(uri).source, e.span.file, texts)
        if via is not None:
            lines = Lines(workspace.get_text_document(uri).source, encoding)
            outcome.diagnostics[uri].append(
                types.Diagnostic(
                    range=types.Range(start=lines.at_offset(via[0]), end=lines.at_offset(via[1])),
                    message=f"an imported file has an error: {printable(str(e.span))}: {e.text()}",
                    severity=types.DiagnosticSeverity.Error,
                    code=e.code,
                    source=SOURCE,
                    related_information=[
                        types.DiagnosticRelatedInformation(
                            location=types.Location(uri=target, range=rng), message=e.text()
                        )
                    ],
                )
            )


_IMPORT = re.compile(r'^[ \t]*import[ \t]+"([^"\n]*)"', re.M)
MAX_FILES = 500
"""How many files the search for the import that leads to an error may read."""


def _import_leading_to(
    root: Path, text: str, file: str, texts: dict[Path, str]
) -> tuple[int, int] | None:
    """The offsets of the import statement of `text` through which the program reached `file`
    (directly or through further imports), read from the imports' text alone."""
    goal = resolved(Path(file) if Path(file).is_absolute() else Path.cwd() / file)
    if goal is None:
        return None
    for m in _IMPORT.finditer(text):
        start = resolved(root.parent / m.group(1))
        if start is None:
            continue
        seen: set[Path] = set()
        todo = [start]
        while todo and len(seen) < MAX_FILES:
            p = todo.pop()
            if p == goal:
                return m.start(), m.end()
            if p in seen:
                continue
            seen.add(p)
            body = texts.get(p)
            if body is None:  # bounded: a pipe or a device is never read
                body = (peek_spec(p) or "") if p.suffix == ".seq" else ""
            for n in _IMPORT.finditer(body):
                q = resolved(p.parent / n.group(1))
                if q is not None:
                    todo.append(q)
    return None


class Publisher:
    """Diagnostics by target file, merged over the buffers whose checks found them: a file
    shows what its own check and the checks of the buffers importing it say, without one check
    wiping out another's."""

    def __init__(self) -> None:
        self.found: dict[str, dict[str, list[types.Diagnostic]]] = {}
        """target URI -> checked buffer's URI -> diagnostics."""

    def update(self, source: str, by_target: dict[str, list[types.Diagnostic]]) -> list[str]:
        """Record one check's diagnostics; return the targets whose list changed."""
        changed = []
        for target, sources in self.found.items():
            if source in sources and target not in by_target:
                del sources[source]
                changed.append(target)
        for target, diags in by_target.items():
            self.found.setdefault(target, {})[source] = diags
            changed.append(target)
        return changed

    def drop(self, source: str) -> list[str]:
        """Forget a closed buffer's checks; return the targets whose list changed."""
        return self.update(source, {})

    def merged(self, target: str) -> list[types.Diagnostic]:
        out: list[types.Diagnostic] = []
        keys = set()
        for diags in self.found.get(target, {}).values():
            for d in diags:
                k = (d.range.start.line, d.range.start.character, d.code, d.message)
                if k not in keys:
                    keys.add(k)
                    out.append(d)
        return out


_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_WORD = re.compile(rf'{_NAME}|"[^"\n]*"')
_DOTTED = re.compile(rf"{_NAME}(?:\.{_NAME})*")


def quick_fixes(uri: str, text: str, params: types.CodeActionParams, encoding: str | None) -> list:
    """A "did you mean" of each diagnostic in the request, as an edit of the misspelt word.

    An error's range may cover more than the word (an unknown field's is the whole `train.stpes
    = 5`), so the edit replaces the word inside it that is closest to the suggestion: a name, or
    the last part of an import's path. A dotted suggestion (an experiment, a sweep's path
    `lm.model.layers`) replaces a whole dotted name; a call (a sweep's `logintrange(64, 256)`)
    replaces the error's range, which is the expression it corrects."""
    lines = Lines(text, encoding)
    actions = []
    for diag in params.context.diagnostics:
        data = diag.data if isinstance(diag.data, dict) else {}
        suggestion = data.get("suggestion")
        if diag.source != SOURCE or not isinstance(suggestion, str):
            continue
        lo, hi = lines.offset(diag.range.start), lines.offset(diag.range.end)
        if "(" in suggestion:  # an expression: the error's range is what it replaces
            actions.append(_fix(uri, diag, diag.range, suggestion))
            continue
        dotted = bool(_DOTTED.fullmatch(suggestion)) and "." in suggestion
        dotted = dotted and '"' not in text[lo:hi]  # not an import's `file.seq`
        best: tuple[float, int, int] | None = None
        for m in (_DOTTED if dotted else _WORD).finditer(text, lo, max(hi, lo + 1)):
            start, end = m.start(), m.end()
            word = m.group()
            if word.startswith('"'):  # an import's path: its last part
                inner = word[1:-1] if word.endswith('"') and len(word) > 1 else word[1:]
                cut = inner.rfind("/") + 1
                start, end = start + 1 + cut, start + 1 + len(inner)
                word = inner[cut:]
            if word == suggestion:
                continue
            score = difflib.SequenceMatcher(None, word.lower(), suggestion.lower()).ratio()
            if best is None or score > best[0]:
                best = (score, start, end)
        if best is None or best[0] < 0.3:
            continue
        rng = types.Range(start=lines.at_offset(best[1]), end=lines.at_offset(best[2]))
        actions.append(_fix(uri, diag, rng, suggestion))
    return actions


def _fix(uri: str, diag: types.Diagnostic, rng: types.Range, text: str) -> types.CodeAction:
    return types.CodeAction(
        title=f"Change to `{printable(text)}`",
        kind=types.CodeActionKind.QuickFix,
        diagnostics=[diag],
        is_preferred=True,
        edit=types.WorkspaceEdit(changes={uri: [types.TextEdit(range=rng, new_text=text)]}),
    )
