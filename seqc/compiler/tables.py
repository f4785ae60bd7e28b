"""Reports as plain data: a heading, lines, a table and lines after it, every cell text.

Why: the compiler computes what `seqc show --graph`, `--passes` and `--sharding` report, but
laying it out on a terminal is the command line's (`seqc.cli.console.print_section`), so the
compiler imports no console library and a test or another front end reads the same figures.
Text is printed as written, never read as markup."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Table:
    """Rows of cells under named columns; `right`: the columns aligned right (figures)."""

    columns: tuple[str, ...]
    rows: list[tuple[str, ...]] = field(default_factory=list)
    right: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Section:
    """One report: `heading` (shown bold) and `rest` on its first line, then `lines`, `table`
    and `after`."""

    heading: str
    rest: str = ""
    lines: list[str] = field(default_factory=list)
    table: Table | None = None
    after: list[str] = field(default_factory=list)


def show_bytes(n: float) -> str:
    """`512 B`, `1.50 MiB`: a size as the sharding messages and `seqc show --sharding` print it."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"
