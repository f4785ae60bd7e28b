"""The decode strategy a run uses when its task names none: built from the catalogue.

Why: the catalogue (`seqc.spec.catalogue.training`, `declare("decode", "greedy", ...)`) is the
only table of defaults; a strategy written out by hand at a use site restates them and drifts
(greedy was written four times with three different `max_length`s). Every default strategy is
`default_strategy()`; a use site that decodes for a different length on purpose says so by
name (`max_length=...` with a constant that documents why), and the catalogue fills the rest.
"""

from __future__ import annotations

from seqc.compiler.config import DecodeConfig
from seqc.data.calls import make_call

DEFAULT_KIND = "greedy"
"""What a task without `decode = ...` decodes with: the most likely token at each step."""


def default_strategy(max_length: int | None = None) -> DecodeConfig:
    """`greedy(...)` with every param at the catalogue's default (`max_length` 64), but for a
    `max_length` given here, as the resolver would bind `greedy(max_length = N)` in a spec."""
    if max_length is None:
        return DecodeConfig.of(make_call("decode", DEFAULT_KIND))
    return DecodeConfig.of(make_call("decode", DEFAULT_KIND, max_length=max_length))
