"""Counting what the data layer leaves out, and why.

Why: silently dropping examples (too long for every bucket, blank lines in a TSV file, pairs
filtered by a corpus builder) is how a training set quietly shrinks by half. Every drop is counted
by reason, with the first few `file:line` locations, so a run can print one line saying what was
lost and a user can open the file at the right place.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

MAX_EXAMPLES = 3
"""Locations kept per reason: enough to find the pattern, few enough to print."""


@dataclass
class DropReport:
    """Dropped examples counted by reason, with a few locations of each."""

    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    max_examples: int = MAX_EXAMPLES

    def add(self, reason: str, location: str | None = None, n: int = 1) -> None:
        """Count `n` drops for `reason`; remember `location` if few are kept so far."""
        self.counts[reason] += n
        kept = self.examples.setdefault(reason, [])
        if location is not None and len(kept) < self.max_examples:
            kept.append(location)

    def merge(self, other: DropReport) -> None:
        """Add another report's counts and locations into this one."""
        for reason, n in other.counts.items():
            self.counts[reason] += n
            kept = self.examples.setdefault(reason, [])
            for loc in other.examples.get(reason, []):
                if len(kept) < self.max_examples:
                    kept.append(loc)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def __bool__(self) -> bool:
        return self.total > 0

    def __str__(self) -> str:
        if not self:
            return "dropped nothing"
        parts = []
        for reason, n in sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0])):
            locs = self.examples.get(reason, [])
            more = ", ..." if n > len(locs) and locs else ""
            shown = f" (e.g. {', '.join(locs)}{more})" if locs else ""
            parts.append(f"{n} {reason}{shown}")
        return f"dropped {self.total}: " + "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "counts": dict(sorted(self.counts.items())),
            "examples": {k: list(v) for k, v in sorted(self.examples.items()) if v},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DropReport:
        """A report as `to_json` wrote it (an encoded split records its reader's drops)."""
        report = cls()
        report.counts.update({str(k): int(v) for k, v in (data.get("counts") or {}).items()})
        report.examples = {str(k): list(v) for k, v in (data.get("examples") or {}).items()}
        return report
