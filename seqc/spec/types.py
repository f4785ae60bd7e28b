"""Parameter types of the .seq language.

A type is a small immutable value: it can check a literal value, print itself the way a user
writes it (`list[int]`, `size`), and be parsed back from that text. Both the built-in catalogue
(declared in Python) and user layers (declared in .seq) use the same types, so one checker covers
both.
"""

from __future__ import annotations

from dataclasses import dataclass

DTYPES = ("float32", "float16", "bfloat16", "int32", "int64", "bool")


@dataclass(frozen=True)
class Type:
    """A param type. `name`: a scalar name, or `list`, `map`, `enum`, `kind`, `union`."""

    name: str
    args: tuple[Type, ...] = ()
    choices: tuple[str, ...] = ()

    def __str__(self) -> str:
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
    if value < 0:
        return None
    return int(value * _UNITS[unit])


SIZE_UNITS = tuple(_UNITS)
