"""The King James Bible and the Reina-Valera 1909, aligned verse by verse, for en->es
translation.

Source: the SWORD modules of Debian's `sword-text-kjv` (`engKJV2006eb`) and `sword-text-sparv`
(`spaRV1909eb`), both public domain, both in KJV versification, exported with `diatheke -f OSIS`.
Each verse comes out as `Book C:V: text` with OSIS markup; the reference is searched anywhere in
the line because diatheke prints some headings (psalm titles, and a stale one it repeats) before
it. Notes and titles are dropped, other tags stripped, entities unescaped, and the pilcrow (a
paragraph mark, not text) removed.

Pairs are joined by reference. A pair whose character-length ratio is outside 0.5-2 is dropped:
those are almost all versification differences (a psalm title counted as verse 1 in one text
only), where the two sides do not translate each other. Split by book, not verse: neighbouring
verses share names and phrasing. Dev and test each hold an Old Testament narrative, a short
prophet or poem, and a New Testament book (about 3% of pairs each).
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from seqc.data.corpora.output import write_lines
from seqc.data.errors import DataError, display_path
from seqc.data.report import DropReport

NAME = "bible-en-es"
SOURCE_MODULE = "engKJV2006eb"
TARGET_MODULE = "spaRV1909eb"
PACKAGES = "diatheke sword-text-kjv sword-text-sparv"
KEY = "Gen 1:1-Rev 22:21"
DEV_BOOKS: tuple[str, ...] = ("Ruth", "Lamentations", "Mark")
TEST_BOOKS: tuple[str, ...] = ("Esther", "Jonah", "Acts")
MIN_RATIO, MAX_RATIO = 0.5, 2.0
FILES: tuple[str, ...] = ("train.tsv", "dev.tsv", "test.tsv")

Ref = tuple[str, int, int]
"""(book, chapter, verse), the book as diatheke spells it ("I Samuel", "Revelation of John")."""

_REF = re.compile(
    r"(?:^|(?<=\s))(?P<book>(?:I{1,3} )?[A-Z][A-Za-z]*(?: (?:of )?[A-Z][A-Za-z]*)*)"
    r" (?P<chapter>\d+):(?P<verse>\d+): "
)
_MODULE_LINE = re.compile(r"^\s*\(\w+\)\s*$")  # diatheke's closing "(engKJV2006eb)"
_DROPPED_ELEMENTS = re.compile(r"<(note|title)\b[^>]*?(?:/>|>.*?</\1\s*>)", re.S)
_TAG = re.compile(r"<[^>]*>")
_SPACE = re.compile(r"\s+")


def clean(raw: str) -> str:
    """Plain text of one verse's OSIS: notes and titles dropped, tags stripped."""
    text = _DROPPED_ELEMENTS.sub(" ", raw)
    text = html.unescape(_TAG.sub("", text)).replace("\u00b6", " ")
    return _SPACE.sub(" ", text).strip()


def parse_osis(text: str) -> dict[Ref, str]:
    """Reference -> cleaned verse text, in the order diatheke printed them. A line without a
    reference continues the verse before it; anything before the first reference is ignored."""
    raw: dict[Ref, list[str]] = {}
    current: Ref | None = None
    for line in text.splitlines():
        if _MODULE_LINE.match(line):
            continue
        m = _REF.search(line)
        if m is None:
            if current is not None:
                raw[current].append(line)
            continue
        current = (m["book"], int(m["chapter"]), int(m["verse"]))
        raw.setdefault(current, []).append(line[m.end() :])
    return {ref: clean(" ".join(parts)) for ref, parts in raw.items()}


def ref_text(ref: Ref) -> str:
    return f"{ref[0]} {ref[1]}:{ref[2]}"


def align(
    source: dict[Ref, str], target: dict[Ref, str], drops: DropReport
) -> list[tuple[Ref, str, str]]:
    """(reference, source, target) for each verse both texts have, in source order; verses
    missing on one side, empty, or with a length ratio outside 0.5-2 are counted in `drops`."""
    pairs = []
    for ref, src in source.items():
        tgt = target.get(ref)
        if tgt is None:
            drops.add("missing-in-target", ref_text(ref))
        elif not src or not tgt:
            drops.add("empty-verse", ref_text(ref))
        elif not MIN_RATIO <= len(src) / len(tgt) <= MAX_RATIO:
            drops.add("length-ratio", ref_text(ref))
        else:
            pairs.append((ref, src, tgt))
    for ref in target.keys() - source.keys():
        drops.add("missing-in-source", ref_text(ref))
    return pairs


def split_of(book: str) -> str:
    if book in DEV_BOOKS:
        return "dev"
    if book in TEST_BOOKS:
        return "test"
    return "train"


def export(module: str, run: Callable[..., Any] = subprocess.run) -> str:
    """The whole module as diatheke's OSIS output; a DataError saying what to install when
    diatheke or the module is missing."""
    exe = shutil.which("diatheke")
    install = f"install them with `apt-get install -y {PACKAGES}` (Debian/Ubuntu)"
    offline = (
        f"or export elsewhere with `diatheke -b MODULE -f OSIS -k '{KEY}' > MODULE.osis` for "
        f"{SOURCE_MODULE} and {TARGET_MODULE} and pass that folder with --source"
    )
    if exe is None:
        raise DataError(
            "`diatheke` is not installed: it exports the SWORD Bible modules",
            code="source-unavailable",
            hint=f"{install}, {offline}",
        )
    try:
        proc = run(
            [exe, "-b", module, "-f", "OSIS", "-k", KEY],
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
            timeout=900,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise DataError(f"diatheke failed: {e}", code="source-unavailable") from None
    if proc.returncode != 0 or not _REF.search(proc.stdout or ""):
        raise DataError(
            f"diatheke printed no verses of the SWORD module {module}",
            code="source-unavailable",
            found=(proc.stderr or proc.stdout or "no output").strip()[:200] or "no output",
            hint=f"the module comes with the Debian packages {PACKAGES}: {install}",
        )
    return str(proc.stdout)


def _load(module: str, source: Path | None) -> str:
    if source is None:
        return export(module)
    path = Path(source) / f"{module}.osis"
    if not path.is_file():
        raise DataError(
            f"no exported {module} text here",
            code="source-unavailable",
            path=display_path(path),
            hint=f"write it with `diatheke -b {module} -f OSIS -k '{KEY}' > {path.name}`",
        )
    return path.read_text(encoding="utf-8", errors="replace")


def build(out: Path, source: Path | None = None) -> dict[str, Any]:
    """Write train/dev/test.tsv (English \\t Spanish) into `out`; the manifest's body.
    `source`: a folder holding `<module>.osis` exports instead of running diatheke."""
    en = parse_osis(_load(SOURCE_MODULE, source))
    es = parse_osis(_load(TARGET_MODULE, source))
    drops = DropReport()
    pairs = align(en, es, drops)
    splits: dict[str, list[str]] = {"train": [], "dev": [], "test": []}
    books: dict[str, list[str]] = {"train": [], "dev": [], "test": []}
    for (book, _, _), src, tgt in pairs:
        split = split_of(book)
        splits[split].append(f"{src}\t{tgt}")
        if not books[split] or books[split][-1] != book:
            books[split].append(book)
    files = {split: write_lines(out / f"{split}.tsv", lines) for split, lines in splits.items()}
    return {
        "source": {
            "sword": {"source": SOURCE_MODULE, "target": TARGET_MODULE},
            "debian": PACKAGES,
            "license": "public domain",
            "verses": {"source": len(en), "target": len(es)},
        },
        "splits": files,
        "books": books,
        "dropped": drops.to_json(),
    }
