"""Reading examples from the files an `input` block names.

A reader call from the spec (`text(path)`, `tsv(path, source, target)`, `jsonl(path, source,
target)`, `audio_manifest(path, audio, text)`) becomes a list of `Example`s, each remembering its
file and line so that any later complaint (too long, undecodable, malformed) can point at the
place to fix.

Speech: an `audio_manifest` is JSON Lines, one utterance per line with a wav path and its
transcript. Its examples have the wav's path as `source`, the transcript as `target`, and the
checked wav header as `audio` (an `AudioClip`: path, samples, rate); a relative wav path is
relative to the manifest's folder, so a corpus folder can be moved whole. Every wav's header is
read when the manifest is (a few milliseconds per thousand files), so a missing file, a wrong
sample rate or a stereo file is an error at the manifest's `file:line` before any training.

Why the readers are strict: a corpus with a few malformed lines usually means the file is not
what the spec thinks it is (wrong delimiter, wrong column, wrong encoding), and training on
half-parsed data fails much later and much less clearly. So a malformed line is an error naming
`file:line`; only harmless lines (blank lines in TSV/JSONL files) are skipped, and those are
counted in a `DropReport`. An error describes the line (its columns and their lengths, the
JSON decoder's complaint and column) but never quotes it: a spec names its data files, and a
spec from elsewhere could name `/etc/shadow` as one.

Paths are relative to a base directory the caller chooses (the spec file's directory, or the
cwd); several may be given, tried in order, and a missing file names every place looked at.
TSV files are split on the delimiter only: no quoting, as in the corpora seqc prepares. Every
row of a TSV file has the same number of columns as its first row (the header, if it has one):
a row with another count is an error at its `file:line`, because a stray delimiter in a text
would otherwise move or cut the columns the reader takes, silently.
"""

from __future__ import annotations

import glob
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seqc.data.audio import AudioClip, wav_info
from seqc.data.calls import call_args
from seqc.data.errors import DataError, display_path
from seqc.data.lines import read_lines
from seqc.data.report import DropReport
from seqc.resolve.values import CallValue
from seqc.spec.errors import FileError, did_you_mean

Scalar = str | int | float | bool
"""A JSON line's field that `Example.fields` keeps."""

READER_KINDS: tuple[str, ...] = ("text", "tsv", "jsonl", "audio_manifest")
AUDIO_READER_KINDS: tuple[str, ...] = ("audio_manifest",)

_GLOB_CHARS = frozenset("*?[")


@dataclass(frozen=True, slots=True)
class Example:
    """One example: a source text and, for sequence-to-sequence data, a target text. For
    speech, the source is the wav's path, the target the transcript, and `audio` the checked
    wav (its samples are read per batch, not kept here)."""

    source: str
    target: str | None = None
    file: str = ""
    line: int = 0
    audio: AudioClip | None = None
    fields: Mapping[str, Scalar] | None = None
    """A JSON line's other scalar fields (a speech manifest's `voice`, `engine`, `rate`): what
    `seqc eval --by FIELD` groups its scores by. None for the line-based readers."""

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}" if self.file else "<memory>"


BaseDirs = Path | str | Sequence[Path | str]


ORIGIN = "ORIGIN"
"""A file at the top of a frozen copy of a spec tree (a run directory's `spec/`) naming the
folder the tree was copied from: data paths relative to the original spec resolve there too."""


def spec_bases(spec_dir: Path) -> list[Path]:
    """Where a spec's relative data paths are looked up: next to the spec, in the cwd (where
    `seqc data prepare` writes), and, for a frozen copy, next to the spec it was copied from."""
    bases = [spec_dir, Path.cwd()]
    for root in [spec_dir, *spec_dir.parents]:
        marker = root / ORIGIN
        if marker.is_file():
            original = Path(marker.read_text(encoding="utf-8").strip())
            bases.append(original / spec_dir.relative_to(root))
            break
    return bases


def _bases(base_dir: BaseDirs | None) -> list[Path]:
    if base_dir is None:
        return [Path.cwd()]
    if isinstance(base_dir, Path | str):
        return [Path(base_dir)]
    return [Path(b) for b in base_dir] or [Path.cwd()]


def resolve_paths(pattern: str, base_dir: BaseDirs | None = None) -> list[Path]:
    """The files a reader's `path` names (a path or a glob), relative to the first base dir
    where anything matches; a FileError naming every place looked at if none does."""
    bases = _bases(base_dir)
    is_glob = any(c in _GLOB_CHARS for c in pattern)
    tried: list[Path] = []
    for base in bases:
        full = Path(pattern).expanduser()
        if not full.is_absolute():
            full = base / full
        tried.append(full)
        if is_glob:
            found = sorted(Path(p) for p in glob.glob(str(full), recursive=True))
            files = [p for p in found if p.is_file()]
            if files:
                return files
        elif full.is_file():
            return [full]
        elif full.is_dir():
            raise FileError(
                f"`{pattern}` is a directory, not a data file",
                code="not-a-file",
                path=display_path(full),
                hint="name a file, or a glob such as `dir/*.txt`",
            )
        if full.is_absolute() and Path(pattern).is_absolute():
            break  # an absolute path means the same thing from every base
    raise FileError(
        f"data file `{pattern}` not found" if not is_glob else f"no file matches `{pattern}`",
        code="missing-data",
        path=display_path(tried[0]),
        expected="an existing file",
        found="looked at " + ", ".join(display_path(p) for p in tried),
        hint=_missing_hint(tried, bases),
    )


def _missing_hint(tried: list[Path], bases: list[Path]) -> str:
    """Point at `seqc data prepare NAME` when a path is inside a prepared-corpus folder,
    preferring the place the command writes to by default (`.cache/data` in the cwd)."""
    from seqc.data.prepare import CORPORA  # late: prepare imports the corpus builders

    default_root = (Path.cwd() / ".cache" / "data").resolve()
    commands: list[str] = []
    for path in tried:
        parts = path.parts
        for i in range(len(parts) - 3):
            if parts[i] == ".cache" and parts[i + 1] == "data" and parts[i + 2] in CORPORA:
                root = Path(*parts[: i + 2])
                name = parts[i + 2]
                if root.resolve() == default_root:
                    return f"run `seqc data prepare {name}` to build this corpus"
                commands.append(f"seqc data prepare {name} --cache-dir {display_path(root)}")
                break
    if commands:
        return f"run `{commands[0]}` to build this corpus"
    where_ = " or ".join(display_path(b) for b in bases)
    return f"paths in an input block are relative to {where_}"


def read_text(path: Path, *, encoding: str = "utf-8", skip_empty: bool = True) -> Iterator[Example]:
    """One example per line, the line being the source; blank lines skipped if asked."""
    shown = display_path(path)
    for lineno, line in read_lines(path, encoding):
        if skip_empty and not line.strip():
            continue
        yield Example(line, None, shown, lineno)


def read_tsv(
    path: Path,
    *,
    source: int = 0,
    target: int | None = 1,
    delimiter: str = "\t",
    header: bool = False,
    encoding: str = "utf-8",
    drops: DropReport | None = None,
) -> Iterator[Example]:
    """Source (and target) columns of each delimited line; blank lines are counted and skipped,
    a line with too few columns, or another count than the first row's, is an error."""
    shown = display_path(path)
    if len(delimiter) != 1:
        raise DataError(
            f"a tsv delimiter is one character, got {delimiter!r}",
            code="bad-delimiter",
            path=shown,
        )
    for name, col in (("source", source), ("target", target)):
        if col is not None and col < 0:
            raise DataError(f"tsv `{name}` column must be >= 0, got {col}", code="bad-column")
    need = max(source, -1 if target is None else target) + 1
    cols_doc = f"source = {source}" + ("" if target is None else f", target = {target}")
    width: tuple[int, int] | None = None  # (columns, line) of the first row
    for lineno, line in read_lines(path, encoding):
        if header and lineno == 1:
            width = (len(line.split(delimiter)), lineno)
            continue
        if not line.strip():
            if drops is not None:
                drops.add("blank-line", f"{shown}:{lineno}")
            continue
        cols = line.split(delimiter)
        if width is not None and len(cols) != width[0] and len(cols) >= need:
            raise DataError(
                f"line {lineno} has {len(cols)} columns, line {width[1]} has {width[0]}",
                code="ragged-columns",
                path=f"{shown}:{lineno}",
                expected=f"{width[0]} columns separated by {delimiter!r}, as on line {width[1]}",
                found=_columns(cols),
                hint="a text with the delimiter in it moves the columns: remove it, or choose "
                "another `delimiter` for the tsv(...) reader",
            )
        width = width or (len(cols), lineno)
        if len(cols) < need:
            raise DataError(
                f"line {lineno} has {len(cols)} column(s), the reader needs {need} ({cols_doc})",
                code="too-few-columns",
                path=f"{shown}:{lineno}",
                expected=f"at least {need} columns separated by {delimiter!r}",
                found=_columns(cols),
                hint="check the delimiter and the column indices of the tsv(...) reader",
            )
        yield Example(cols[source], None if target is None else cols[target], shown, lineno)


def _json_objects(
    path: Path, encoding: str, drops: DropReport | None, example: str
) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """(line number, `file:line`, object) of each non-blank line of a JSON Lines file; blank
    lines counted and skipped, anything but a JSON object an error at its line."""
    shown = display_path(path)
    for lineno, line in read_lines(path, encoding):
        loc = f"{shown}:{lineno}"
        if not line.strip():
            if drops is not None:
                drops.add("blank-line", loc)
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(
                f"line {lineno} is not valid JSON: {e.msg} at column {e.colno}",
                code="invalid-json",
                path=loc,
                found=f"a line of {len(line)} characters",
                hint="a .jsonl file holds one JSON object per line",
            ) from None
        if not isinstance(obj, dict):
            raise DataError(
                f"line {lineno} is a JSON {type(obj).__name__}, not an object",
                code="invalid-json",
                path=loc,
                expected=f"an object such as {example}",
            )
        yield lineno, loc, obj


def read_jsonl(
    path: Path,
    *,
    source: str = "source",
    target: str | None = "target",
    encoding: str = "utf-8",
    drops: DropReport | None = None,
) -> Iterator[Example]:
    """Source (and target) fields of one JSON object per line; blank lines counted and skipped."""
    shown = display_path(path)
    example = '{"source": "...", "target": "..."}'
    for lineno, loc, obj in _json_objects(path, encoding, drops, example):
        src = _field(obj, source, "source", loc, lineno)
        tgt = None if target is None else _field(obj, target, "target", loc, lineno)
        yield Example(src, tgt, shown, lineno, fields=_scalars(obj, (source, target)))


def read_audio_manifest(
    path: Path,
    *,
    audio: str = "audio",
    text: str = "text",
    sample_rate: int = 16_000,
    encoding: str = "utf-8",
    drops: DropReport | None = None,
) -> Iterator[Example]:
    """One utterance per JSON object: the wav named by field `audio` (relative to the
    manifest's folder), checked against `sample_rate`, and the transcript in field `text`."""
    shown = display_path(path)
    example = '{"audio": "wavs/0001.wav", "text": "..."}'
    for lineno, loc, obj in _json_objects(path, encoding, drops, example):
        rel = _field(obj, audio, "audio", loc, lineno)
        transcript = _field(obj, text, "transcript", loc, lineno)
        wav = Path(rel).expanduser()
        if not wav.is_absolute():
            wav = path.parent / wav
        clip = wav_info(wav, sample_rate, location=loc)
        yield Example(
            display_path(wav), transcript, shown, lineno, clip, _scalars(obj, (audio, text))
        )


def _scalars(obj: dict[str, Any], taken: tuple[str | None, ...]) -> dict[str, Scalar] | None:
    """A JSON object's scalar fields other than those the reader took (None if there are none):
    nested values are left out, since a score is grouped by a value, not by a structure."""
    kept = {
        k: v for k, v in obj.items() if k not in taken and isinstance(v, str | int | float | bool)
    }
    return kept or None


_FIELD_HINTS: dict[str, str] = {
    "target": "set target = none on the jsonl(...) reader for source-only data",
    "audio": "name the wav path's field with the audio_manifest(...) reader's `audio`",
    "transcript": "name the transcript's field with the audio_manifest(...) reader's `text`",
}


def _field(obj: dict[str, Any], name: str, role: str, loc: str, lineno: int) -> str:
    if name not in obj:
        keys = sorted(obj)
        raise DataError(
            f"line {lineno} has no field `{name}` (the {role})",
            code="missing-field",
            path=loc,
            expected=f"a field `{name}`",
            found=f"an object of {len(keys)} field(s)" if keys else "an empty object",
            suggestion=did_you_mean(name, keys),
            hint=_FIELD_HINTS.get(role),
        )
    value = obj[name]
    if not isinstance(value, str):
        raise DataError(
            f"line {lineno}: field `{name}` is a JSON {type(value).__name__}, not a string",
            code="bad-field",
            path=loc,
            expected="a JSON string",
        )
    return value


def _columns(cols: list[str]) -> str:
    """A row's shape, not its text (errors never quote a data file): `3 columns of 5, 4 and 8
    characters`."""
    if len(cols) > 8:
        return f"{len(cols)} columns"
    sizes = [str(len(c)) for c in cols]
    listed = sizes[0] if len(sizes) == 1 else ", ".join(sizes[:-1]) + " and " + sizes[-1]
    return f"{len(cols)} column{'s' if len(cols) > 1 else ''} of {listed} characters"


def has_target(reader: CallValue) -> bool:
    """Whether a reader yields targets (sequence-to-sequence data, transcripts) or sources
    only."""
    if is_audio(reader):
        return True
    return reader.kind != "text" and call_args(reader).get("target") is not None


def is_audio(reader: CallValue) -> bool:
    """Whether a reader yields speech (wav + transcript) rather than text."""
    return reader.kind in AUDIO_READER_KINDS


def read_examples(
    reader: CallValue, base_dir: BaseDirs | None = None, drops: DropReport | None = None
) -> list[Example]:
    """Every example a reader call names, over all files its path matches, in file order.

    An empty result is an error: training on nothing fails later with a far less clear message.
    """
    files = reader_files(reader, base_dir)
    return list(iter_examples(reader, base_dir, drops, files))


def reader_files(reader: CallValue, base_dir: BaseDirs | None = None) -> list[Path]:
    """The files a reader call reads, in the order it reads them."""
    if reader.kind not in READER_KINDS:
        raise DataError(
            f"unknown reader kind `{reader.kind}`",
            code="unknown-kind",
            expected=f"one of {', '.join(READER_KINDS)}",
            suggestion=did_you_mean(reader.kind, READER_KINDS),
        )
    return resolve_paths(call_args(reader)["path"], base_dir)


def iter_examples(
    reader: CallValue,
    base_dir: BaseDirs | None = None,
    drops: DropReport | None = None,
    files: Sequence[Path] | None = None,
) -> Iterator[Example]:
    """`read_examples`, one example at a time: memory flat in the corpus size (what encoding
    a corpus larger than memory into shards reads). The emptiness check comes at the end."""
    args = call_args(reader)
    files = list(files) if files is not None else reader_files(reader, base_dir)
    count = 0
    for path in files:
        for example in _read_one(reader.kind, path, args, drops):
            count += 1
            yield example
    if not count:
        names = ", ".join(display_path(p) for p in files)
        raise DataError(
            f"no examples in `{args['path']}`",
            code="empty-corpus",
            path=display_path(files[0]),
            found=f"{len(files)} file(s) with no usable line: {names}",
            hint="the corpus may be unprepared or truncated; rebuild it or fix the path",
        )


def _read_one(
    kind: str, path: Path, args: dict[str, Any], drops: DropReport | None
) -> Iterator[Example]:
    if kind == "text":
        return read_text(path, encoding=args["encoding"], skip_empty=args["skip_empty"])
    if kind == "audio_manifest":
        return read_audio_manifest(
            path,
            audio=args["audio"],
            text=args["text"],
            sample_rate=args["sample_rate"],
            encoding=args["encoding"],
            drops=drops,
        )
    if kind == "tsv":
        return read_tsv(
            path,
            source=args["source"],
            target=args["target"],
            delimiter=args["delimiter"],
            header=args["header"],
            encoding=args["encoding"],
            drops=drops,
        )
    return read_jsonl(
        path,
        source=args["source"],
        target=args["target"],
        encoding=args["encoding"],
        drops=drops,
    )
