"""One encoded split on disk: token ids in flat arrays, read through memory maps.

A split's folder holds, per side of an example (`source`, and `target` where the reader has
one), `SIDE.tokens` (int32 ids of every example in file order, each followed by eos) and
`SIDE.offsets` (int64, one more than the examples: example i's ids are
`tokens[offsets[i]:offsets[i + 1]]`), plus `lines` (int32, each example's line in its file)
and `meta.json` (counts, which file holds which examples, the drops the reader made, the sha256
of the texts as read, and a CRC-32 and a size per array file). Why this form and not records
(ArrayRecord, TFRecord): an LM packs its stream into fixed windows that cross line boundaries,
which is one slice of a flat array, and every batch is a few slices, read in microseconds
with no decoding; a record per line would cost a call per line, more than the line's
tokens are worth at ~10 per line. Grain (`seqc.data.shards.loader`) reads any random-access
source, which this is.

Nothing here is trusted for being there: `open_split` checks the format, the seqc version
and the cache key recorded at encoding, each file's size and its CRC-32 (about a second per
GB), and says what failed; the caller encodes the split again. A split is written into a
staging folder and renamed into place whole (`encode`), so a crash leaves no half of one.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = 1
"""Bumped whenever the layout changes: older folders are encoded again, never misread."""
META = "meta.json"
SIDES = ("source", "target")
CRC_CHUNK = 1 << 24


def seqc_version() -> str:
    try:
        return metadata.version("seqc")
    except metadata.PackageNotFoundError:
        return "unknown"


def crc32_file(path: Path) -> int:
    """CRC-32 of a file, in 16 MiB chunks."""
    crc = 0
    with path.open("rb") as f:
        while chunk := f.read(CRC_CHUNK):
            crc = zlib.crc32(chunk, crc)
    return crc


class DamagedSplit(Exception):
    """An encoded split that failed a check; `str()` says which and why."""


@dataclass
class EncodedSplit:
    """A split's arrays, memory-mapped read-only, and its record."""

    folder: Path
    meta: dict[str, Any]
    tokens: dict[str, np.ndarray]
    offsets: dict[str, np.ndarray]
    lines: np.ndarray

    @property
    def examples(self) -> int:
        return int(self.meta["examples"])

    @property
    def sides(self) -> tuple[str, ...]:
        return tuple(self.tokens)

    def ids(self, side: str, i: int) -> np.ndarray:
        """Example i's ids on one side, eos included (a view into the map)."""
        off = self.offsets[side]
        return self.tokens[side][int(off[i]) : int(off[i + 1])]

    def lengths(self, side: str) -> np.ndarray:
        """Ids per example on one side, eos included (int64, in memory: 8 bytes an example)."""
        return np.diff(self.offsets[side])

    def location(self, i: int) -> str:
        """`file:line` of example i, as the reader reported it."""
        files = self.meta["files"]
        ends = np.cumsum([f["examples"] for f in files])
        k = int(np.searchsorted(ends, i, side="right"))
        return f"{files[k]['path']}:{int(self.lines[i])}"


def array_files(sides: tuple[str, ...]) -> list[str]:
    """The array files of a split with these sides, in a fixed order."""
    return [f"{s}.{part}" for s in sides for part in ("tokens", "offsets")] + ["lines"]


def open_split(folder: Path, key: str) -> EncodedSplit:
    """The encoded split in `folder`, if it is the one of `key`, whole and of this seqc;
    `DamagedSplit` saying what is wrong otherwise (FileNotFoundError if there is none)."""
    try:
        meta = json.loads((folder / META).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as e:
        raise DamagedSplit(f"its {META} is unreadable ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise DamagedSplit(f"it is of another format ({meta.get('format')!r}, not {FORMAT})")
    if meta.get("seqc") != seqc_version():
        raise DamagedSplit(f"it was written by seqc {meta.get('seqc')}, not {seqc_version()}")
    if meta.get("key") != key:
        raise DamagedSplit("it was encoded from other files or with another tokenizer")
    sides = tuple(s for s in SIDES if s in meta.get("sides", ()))
    n = int(meta["examples"])
    arrays: dict[str, np.ndarray] = {}
    for name in array_files(sides):
        path = folder / name
        want = meta["arrays"][name]
        try:
            size = path.stat().st_size
        except OSError:
            raise DamagedSplit(f"{name} is missing") from None
        if size != want["bytes"]:
            raise DamagedSplit(f"{name} has {size:,} bytes, not the {want['bytes']:,} written")
        if crc32_file(path) != want["crc32"]:
            raise DamagedSplit(f"{name} fails its CRC-32 check: its bytes changed on disk")
        dtype = np.int64 if name.endswith(".offsets") else np.int32
        arrays[name] = np.memmap(path, dtype=dtype, mode="r") if size else np.zeros(0, dtype)
    for side in sides:
        off = arrays[f"{side}.offsets"]
        if len(off) != n + 1 or (n and int(off[-1]) != len(arrays[f"{side}.tokens"])):
            raise DamagedSplit(f"{side}.offsets does not match {side}.tokens")
    return EncodedSplit(
        folder,
        meta,
        {s: arrays[f"{s}.tokens"] for s in sides},
        {s: arrays[f"{s}.offsets"] for s in sides},
        arrays["lines"],
    )
