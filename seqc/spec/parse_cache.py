"""A content-hash cache of parsed spec files, like Python's `.pyc`.

`parse_file` asks here before it parses: an entry holds the IR of one file, valid while the
file's text, the grammar and the front end's source (parser, IR, this module) are unchanged,
so a program whose files did not change loads without parsing. One entry per path, replaced
when the file changes, under `$XDG_CACHE_HOME/seqc/parse/` (default `~/.cache/seqc/parse/`).
`SEQC_PARSE_CACHE` names another folder, or `off` turns the cache off.

The cache is an optimisation and never an error: an entry that is missing, stale, truncated or
unreadable is ignored (and rebuilt by the next parse); a folder that cannot be written is
skipped. Entries are written to a temporary file and renamed, so a reader never sees half of
one. A file with a syntax error is never cached (its parse raises before `store`).

The IR is pickled; nodes are restored with `ir.trusted` rather than pydantic's `__setstate__`,
which made loading a large program twice as slow.
"""

from __future__ import annotations

import contextlib
import copyreg
import functools
import gc
import hashlib
import os
import pickle
import sys
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from seqc.spec import ir
from seqc.spec.cache_paths import ENV as ENV  # re-exported: tests and benches name it here
from seqc.spec.cache_paths import cache_dir

FORMAT = b"seqc-parse-1\n"
"""The first bytes of an entry; bumped if the entry layout changes."""

_FRONT_END = ("grammar.lark", "parser.py", "to_ir.py", "ir.py", "parse_cache.py")
"""Files whose text keys every entry: a change to any of them invalidates the cache, without
relying on a version number being bumped while the front end is worked on. `to_ir.py` builds
the nodes from the parse tree: a change there changes the IR as surely as the grammar's."""


def grammar_cache_file() -> str | None:
    """Where Lark keeps its analysis of the grammar (Lark checks it against the grammar)."""
    folder = cache_dir()
    if folder is None:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return str(folder / f"grammar-{_salt().hex()[:16]}.lark")


@functools.cache
def _salt() -> bytes:
    """The digest of the front end's source and Python's version: part of every entry's key."""
    h = hashlib.sha256(FORMAT + repr(sys.version_info[:2]).encode())
    here = Path(__file__).parent
    for name in _FRONT_END:
        try:
            h.update((here / name).read_bytes())
        except OSError:
            h.update(b"?")
    return h.digest()


def _paths(filename: str) -> tuple[Path, Path] | None:
    folder = cache_dir()
    if folder is None:
        return None
    name = hashlib.sha256(_salt() + os.path.abspath(filename).encode()).hexdigest()[:32]
    return folder, folder / f"{name}.ir"


def _key(text: str, filename: str) -> bytes:
    """The entry's key: the file's name (spans name it) and bytes, under the front end's salt."""
    return hashlib.sha256(_salt() + filename.encode() + b"\0" + text.encode()).digest()


def load(text: str, filename: str) -> ir.SpecFile | None:
    """The cached IR of this text at this path, or None when there is no valid entry."""
    paths = _paths(filename)
    if paths is None:
        return None
    try:
        data = paths[1].read_bytes()
    except (OSError, ValueError):
        return None
    head = FORMAT + _key(text, filename)
    if not data.startswith(head):
        return None
    was_enabled = gc.isenabled()
    gc.disable()  # as while parsing (`parser.gc_paused`): the collector would rescan every node
    try:
        spec = pickle.loads(memoryview(data)[len(head) :])
    except Exception:  # truncated, corrupt, or written by a different layout: parse instead
        return None
    finally:
        if was_enabled:
            gc.freeze()
            gc.enable()
    return spec if isinstance(spec, ir.SpecFile) else None


def holds(text: str, filename: str) -> bool:
    """Whether a valid-looking entry for this text at this path exists (its header only is
    read: a program's loader asks this of every import before deciding what to parse)."""
    paths = _paths(filename)
    if paths is None:
        return False
    head = FORMAT + _key(text, filename)
    try:
        with open(paths[1], "rb") as f:
            return f.read(len(head)) == head
    except (OSError, ValueError):
        return False


def store(text: str, filename: str, spec: ir.SpecFile) -> None:
    """Write the entry for this text atomically; any failure leaves the cache as it was."""
    paths = _paths(filename)
    if paths is None:
        return
    folder, path = paths
    tmp = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=folder)
        with os.fdopen(fd, "wb") as f:
            f.write(FORMAT + _key(text, filename))
            _Pickler(f, protocol=pickle.HIGHEST_PROTOCOL).dump(spec)
        os.replace(tmp, path)
        tmp = None
    except (OSError, pickle.PicklingError, RecursionError):
        pass
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


class _Pickler(pickle.Pickler):
    """Pickles IR nodes as (class, field values, fields set), restored by `_restore`.

    A `dispatch_table` entry per IR class rather than a `reducer_override`: the table is looked
    up in C by exact type, with no Python test per object; a span pickles as its five values."""

    dispatch_table = copyreg.dispatch_table.copy()


def _reduce(node: BaseModel) -> Any:
    return _restore, (type(node), node.__dict__, node.__pydantic_fields_set__)


for _cls in vars(ir).values():
    if isinstance(_cls, type) and issubclass(_cls, BaseModel) and _cls.__module__ == ir.__name__:
        _Pickler.dispatch_table[_cls] = _reduce
del _cls


def _reduce_span(span: ir.Span) -> Any:
    # Half the nodes are spans: five values, all required (so all set), rebuilt without a dict.
    d = span.__dict__
    return ir.trusted_span, (d["file"], d["line"], d["col"], d["end_line"], d["end_col"])


_Pickler.dispatch_table[ir.Span] = _reduce_span

_new = object.__new__
_set = object.__setattr__


def _restore(cls: type[BaseModel], values: dict[str, Any], fields_set: set[str]) -> Any:
    node = _new(cls)
    _set(node, "__dict__", values)
    _set(node, "__pydantic_fields_set__", fields_set)
    _set(node, "__pydantic_extra__", None)
    _set(node, "__pydantic_private__", None)
    return node
