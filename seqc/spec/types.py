"""Parameter types of the .seq language.

A type is a small immutable value: it can check a literal value, print itself the way a user
writes it (`list[int]`, `size`), and be parsed back from that text. Both the built-in catalogue
(declared in Python) and user layers (declared in .seq) use the same types, so one checker covers
both.

A numeric type may carry a `Range` (`int > 0`, `float in [0, 1)`): the values a param accepts.
Beyond any range, every value must be one the backends can hold: an int fits int32 (step
counters, widths and ids are int32 tensors), a float is finite, a size fits int64 bytes. These are
checked where the value is written (`seqc.resolve.conform.conform`), so `d = 0` or `lr = 1e999`
fails at its line instead of as a crash or a NaN loss mid-run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

DTYPES = ("float32", "float16", "bfloat16", "int32", "int64", "bool")

INT_LIMIT = 2**31
"""Every int is in [-2**31, 2**31): what an int32 tensor, a step counter or a seed holds."""

SIZE_LIMIT = 2**63
"""Every byte size is below 2**63: what an int64 holds."""


@dataclass(frozen=True)
class Range:
    """The values a numeric param accepts: `> 0`, `>= 1`, `< 1` or an interval `in [0, 1)`.

    A range refines a type; it is checked on values, never in static assignability (a param
    `d: int` may be passed where `int > 0` is expected, and is checked once its value is known).
    """

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, value: float) -> bool:
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return self.high is None or not (
            value > self.high or (self.high_open and value == self.high)
        )

    @property
    def empty(self) -> bool:
        """No value fits (`in [1, 0]`, `in (0, 0]`): a declaration error."""
        if self.low is None or self.high is None:
            return False
        return self.low > self.high or (self.low == self.high and (self.low_open or self.high_open))

    def __str__(self) -> str:
        if self.low is not None and self.high is not None:
            open_, close = "(" if self.low_open else "[", ")" if self.high_open else "]"
            return f"in {open_}{show_bound(self.low)}, {show_bound(self.high)}{close}"
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {show_bound(self.low)}"
        if self.high is not None:
            return f"{'<' if self.high_open else '<='} {show_bound(self.high)}"
        return "any value"


def show_bound(x: float) -> str:
    """A bound as a user reads it: `0`, `0.5`, `1e-08`, and `2**31` rather than 2147483648."""
    if isinstance(x, int) and abs(x) >= 2**16:
        for k in range(16, 64):
            if abs(x) == 2**k:
                return f"{'-' if x < 0 else ''}2**{k}"
            if x == 2**k - 1:
                return f"2**{k} - 1"
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e16:
        return str(int(x))
    return repr(x)


POSITIVE = Range(low=0, low_open=True)
"""> 0: widths, counts, lengths, rates that divide or take a log."""
NON_NEGATIVE = Range(low=0)
""">= 0: intervals where 0 means "never", learning rates, penalties."""
PROBABILITY = Range(0, 1)
"""in [0, 1]."""
FRACTION = Range(0, 1, high_open=True)
"""in [0, 1): dropout rates, label smoothing, decay rates of running means (1 would never move)."""


def at_least(n: float) -> Range:
    return Range(low=n)


def between(low: float, high: float, *, low_open: bool = False, high_open: bool = False) -> Range:
    return Range(low, high, low_open, high_open)


@dataclass(frozen=True)
class Type:
    """A param type. `name`: a scalar name, or `list`, `map`, `enum`, `kind`, `union`.

    `range`: for int, float and size, the values accepted (see `Range`). It is left out of
    equality: two types that differ only in range are the same type for the static checks.
    """

    name: str
    args: tuple[Type, ...] = ()
    choices: tuple[str, ...] = ()
    range: Range | None = field(default=None, compare=False)

    def within(self, range_: Range) -> Type:
        """This type with its numeric values limited to `range_`; through a union (`float |
        schedule`, `int | none`) the range applies to the numeric alternatives."""
        if self.name in RANGED:
            return replace(self, range=range_)
        if self.name == "union" and any(a.name in RANGED for a in self.args):
            args = tuple(a.within(range_) if a.name in RANGED else a for a in self.args)
            return replace(self, args=args)
        raise ValueError(f"a range applies to int, float and size, not {self}")

    def __str__(self) -> str:
        if self.range is not None:
            return f"{self.name} {self.range}"
        if self.name == "list":
            return f"list[{self.args[0]}]"
        if self.name == "map":
            return f"map[{self.args[0]}, {self.args[1]}]"
        if self.name == "enum":
            return " | ".join(f'"{c}"' for c in self.choices)
        if self.name == "kind":
            return self.choices[0]
        if self.name == "union":
            return " | ".join(str(a) for a in self.args)
        return self.name


INT = Type("int")
FLOAT = Type("float")
BOOL = Type("bool")
STR = Type("str")
SIZE = Type("size")
"""A byte size written as a string with a unit ("2GiB", "512MB") or a plain int of bytes."""
DTYPE = Type("dtype")
LAYER = Type("layer")
"""A reference to a sibling layer by name (weight tying: `Softmax(..., tie = embed)`)."""
ANY = Type("any")

SCALARS = {t.name: t for t in (INT, FLOAT, BOOL, STR, SIZE, DTYPE, LAYER, ANY)}

RANGED = ("int", "float", "size")
"""The types a range may refine."""


def list_of(elem: Type) -> Type:
    return Type("list", (elem,))


def map_of(key: Type, value: Type) -> Type:
    return Type("map", (key, value))


def one_of(*choices: str) -> Type:
    return Type("enum", choices=tuple(choices))


def kind(namespace: str) -> Type:
    """A call (or bare name) of a kind from a catalogue namespace, e.g. `schedule`."""
    return Type("kind", choices=(namespace,))


def union(*types: Type) -> Type:
    return Type("union", tuple(types))


def optional(t: Type) -> Type:
    return union(t, Type("none"))


def parse_type(text: str) -> Type | None:
    """Parse a user-written type (`int`, `list[float]`, `map[str, int]`); None if unknown."""
    text = text.strip()
    if text in SCALARS:
        return SCALARS[text]
    for outer, arity in (("list", 1), ("map", 2)):
        if text.startswith(outer + "[") and text.endswith("]"):
            inner = [p.strip() for p in _split_top(text[len(outer) + 1 : -1])]
            if len(inner) != arity:
                return None
            parsed = [parse_type(p) for p in inner]
            if any(p is None for p in parsed):
                return None
            return Type(outer, tuple(p for p in parsed if p is not None))
    return None


def _split_top(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return parts


_UNITS = {
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
}


def parse_size(text: str) -> int | None:
    """Bytes in "2GiB", "1.5 GB", "512"; None when the text is not a size."""
    s = text.strip()
    num = s.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ").strip()
    unit = s[len(s.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")) :] or "B"
    if unit not in _UNITS:
        return None
    try:
        value = float(num)
    except ValueError:
        return None
    value *= _UNITS[unit]
    if not math.isfinite(value) or value < 0:  # "1e999GiB", "nan MB"
        return None
    return int(value)


SIZE_UNITS = tuple(_UNITS)
