"""Provenance: where each resolved value was set, by dotted path.

Every value of a resolved experiment remembers the line that set it, a `--set` override, or the
catalogue's default (an `Origin`). `seqc show --provenance` prints it, and errors found after
resolution (lowering, the run checks) point at it. A call records its args one by one, written
or defaulted, so `train.optimizer.lr.warmup` has an origin of its own.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from seqc.resolve.raw import Raw, RawCall
from seqc.spec import ir
from seqc.spec.kinds import REGISTRY


class Origin(BaseModel):
    """Where a resolved value was set: a catalogue default, a spec line, or a `--set`."""

    model_config = ConfigDict(frozen=True)

    kind: str
    where: str = ""
    span: ir.Span | None = None
    """The line that set it (spec values), for errors found after resolution."""

    def __str__(self) -> str:
        return "default" if self.kind == "default" else self.where


DEFAULT = Origin(kind="default")


def record(
    prov: dict[str, Origin], layers: dict[str, ir.LayerDecl], path: str, raw: Raw, origin: Origin
) -> None:
    """Provenance of a value and, for a call, which of its args were written and which not."""
    below = path + "."
    for key in [k for k in prov if k.startswith(below)]:
        del prov[key]
    prov[path] = origin
    v = raw.value
    if not isinstance(v, RawCall):
        return
    positional, names = _param_names(layers, v.func)
    given = dict(zip(positional, v.args, strict=False))
    given.update({k: a for k, (a, _) in v.kwargs.items()})
    for name in names:
        if name in given:
            record(prov, layers, f"{path}.{name}", given[name], origin)
        else:
            prov[f"{path}.{name}"] = DEFAULT


def _param_names(layers: dict[str, ir.LayerDecl], func: str) -> tuple[list[str], list[str]]:
    """Positional and all param names of a kind, whatever its namespace."""
    if func in layers:
        names = [p.name for p in layers[func].params]
        return names, names
    for ns in REGISTRY.namespaces.values():
        if func in ns:
            return list(ns[func].positional), ns[func].param_names
    return [], []
