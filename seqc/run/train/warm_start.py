"""Warm starts: a new run's params taken from another run's checkpoint, by layer-path patterns.

`train { init_from = checkpoint("runs/x", map = {"enc.*": "encoder.*"}) }` loads, for each map
entry in order, every checkpoint tensor whose layer path matches the key into the model param
named by the value, `*` in the value standing for what the key's `*` matched (in order; `*`
matches any characters, dots included). Params that no entry reaches are initialised fresh.

The checkpoint may be either backend's (read through `seqc.backends.weights`, by layer path),
so a TF run can start from a JAX run. Everything that can be wrong with the map is an error at
the spec line before a step runs, never a silently half-loaded model: a key that matches no
tensor, a destination the model lacks, a param reached twice, shapes that differ (all of them
listed, with both shapes). Only params cross; the optimizer starts afresh.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from seqc.backends import registry
from seqc.backends.api import Weights
from seqc.backends.weights import read_weights
from seqc.compiler.config import FromCheckpoint, InitConfig
from seqc.compiler.graph import Param
from seqc.resolve.experiment import ResolvedExperiment
from seqc.spec.errors import CheckError, FileError, SeqcError, did_you_mean
from seqc.spec.ir import Span

__all__ = ["WarmStart", "warm_start"]

SHOWN = 8
"""The most items an error or the summary lists before `... and N more`."""


@dataclass
class WarmStart:
    """What a warm start loaded, from where, and what it left to the initializers."""

    given: dict[str, np.ndarray]
    """Model param name -> its value from the checkpoint (float32), for `Model.init`."""
    loaded: list[tuple[str, str]]
    """(checkpoint tensor, model param) pairs, entry by entry."""
    fresh: list[str]
    """Model params no entry reached (initialised fresh), in the model's order."""
    source: str
    """`checkpoint STEP at FOLDER`, for messages."""
    entries: list[tuple[str, str, int]] = field(default_factory=list)
    """Each map entry (key, value) and how many tensors it loaded."""
    backend: str = ""
    """The backend that wrote the checkpoint."""
    step: int = 0
    path: str = ""
    """The checkpoint folder, absolute."""
    skipped: list[str] = field(default_factory=list)
    """Why each newer checkpoint could not be read (the newest readable one was taken)."""

    def summary(self) -> str:
        """A few lines for the console: what was loaded by which entry, what is fresh."""
        total = len(self.given) + len(self.fresh)
        lines = [
            f"warm start: {len(self.loaded)} of {total} params loaded from {self.source}"
            + (f" ({registry.title(self.backend)})" if self.backend else "")
        ]
        lines += [
            f'  "{key}" -> "{value}": {_count(n, "tensor")}' for key, value, n in self.entries
        ]
        if self.fresh:
            shown = _compact(self.fresh, set(self.given))
            lines.append(
                f"  {_count(len(self.fresh), 'param')} initialised fresh: "
                + ", ".join(_clipped(shown, SHOWN))
            )
        else:
            lines.append("  no param initialised fresh")
        lines += [f"  passed over: {why}" for why in self.skipped]
        return "\n".join(lines)

    def record(self) -> dict[str, Any]:
        """JSON-ready, for run.json."""
        return {
            "path": self.path,
            "step": self.step,
            "backend": self.backend,
            "map": [{"from": k, "to": v, "tensors": n} for k, v, n in self.entries],
            "loaded": [list(pair) for pair in self.loaded],
            "fresh": list(self.fresh),
            "skipped": list(self.skipped),
        }


def warm_start(resolved: ResolvedExperiment, params: Mapping[str, Param]) -> WarmStart | None:
    """The params `train.init_from` gives the model, checked against its params; None when
    the experiment has no `init_from`."""
    call = resolved.config["train"]["init_from"]
    if call is None:
        return None
    span = resolved.span("train.init_from")
    init = InitConfig.of(call)
    if not isinstance(init, FromCheckpoint):
        raise CheckError(
            f"init_from = {call} is not a warm start seqc knows",
            span=span,
            code="not-implemented",
            hint='use checkpoint("RUN_DIR")',
        )
    map_span = resolved.span("train.init_from.map") or span
    entries = [(str(k), str(v)) for k, v in init.map.items()]
    patterns = [(key, value, _pattern(key, value, map_span)) for key, value in entries]
    weights = _read(resolved, init, span)

    tensors = sorted(weights.params)
    reached: dict[str, tuple[str, str]] = {}  # model param -> (checkpoint tensor, entry)
    loaded: list[tuple[str, str]] = []
    counts: list[tuple[str, str, int]] = []
    missing: list[str] = []
    twice: list[str] = []
    for key, value, regex in patterns:
        matched = [(t, m) for t in tensors if (m := regex.fullmatch(t))]
        if not matched:
            raise _no_match(key, tensors, weights, map_span)
        entry = f'"{key}": "{value}"'
        for tensor, m in matched:
            target = _fill(value, m.groups())
            if target not in params:
                missing.append(f"`{tensor}` -> `{target}`")
            elif target in reached:
                first, first_entry = reached[target]
                twice.append(
                    f"`{target}` from `{first}` (entry {first_entry}) and from `{tensor}` "
                    f"(entry {entry})"
                )
            else:
                reached[target] = (tensor, entry)
                loaded.append((tensor, target))
        counts.append((key, value, len(matched)))

    if missing:
        suggestion = did_you_mean(missing[0].split(" -> ")[1].strip("`"), params)
        raise CheckError(
            f"init_from's map loads tensors of {_source(weights)} into params "
            f"this model does not have:{_listed(missing)}",
            span=map_span,
            code="not-in-model",
            suggestion=suggestion,
            hint='narrow the map to the tensors the model has, e.g. {"encoder.*": "encoder.*"}, '
            "or rename them with the value's pattern",
        )
    if twice:
        raise CheckError(
            f"init_from's map loads a model param twice:{_listed(twice)}",
            span=map_span,
            code="loaded-twice",
            hint="make the map's keys match disjoint tensors",
        )
    wrong = []
    for tensor, target in loaded:
        got = tuple(int(d) for d in weights.params[tensor].shape)
        want = tuple(int(d) for d in params[target].type.shape)
        if got != want:
            wrong.append(
                f"checkpoint tensor `{tensor}` is {list(got)}, model param `{target}` is "
                f"{list(want)}"
            )
    if wrong:
        raise CheckError(
            f"init_from: tensors of {_source(weights)} do not fit the model's "
            f"params:{_listed(wrong)}",
            span=map_span,
            code="shape-mismatch",
            hint="the two models differ in these layers' sizes: load only the layers that "
            "match (narrow the map), or give the model the checkpoint's sizes",
        )

    return WarmStart(
        given={t: np.asarray(weights.params[s], np.float32) for s, t in loaded},
        loaded=loaded,
        fresh=[name for name in params if name not in reached],
        source=_source(weights),
        entries=counts,
        backend=weights.backend,
        step=weights.step,
        path=str(weights.path),
        skipped=list(weights.skipped),
    )


# ------------------------------------------------------------------------------ the checkpoint


def _read(resolved: ResolvedExperiment, init: FromCheckpoint, span: Span | None) -> Weights:
    """The checkpoint's weights; a relative path is looked for in the current directory, then
    beside the spec. A backend's error without a place gets the spec line and the path."""
    written = init.path
    path_span = resolved.span("train.init_from.path") or span
    path = _locate(written, Path(resolved.file).parent, path_span)
    try:
        return read_weights(path, init.step)
    except SeqcError as e:
        if e.span is not None:
            raise
        # The backends' hints speak of --resume and --checkpoint; here the spec names the step.
        hint = _HINTS.get(e.code, e.hint)
        message = f'init_from "{written}": {e.message}'
        raise replace(e, message=message, span=path_span, hint=hint) from e
    except OSError as e:  # a folder that cannot be listed or read
        raise FileError(
            f'init_from "{written}": {path} cannot be read ({e.strerror or type(e).__name__})',
            span=path_span,
            path=str(path),
            code="unreadable",
            hint="check the folder's permissions",
        ) from e


_HINTS = {
    "no-checkpoint": "give a run directory or its checkpoints folder; step = none takes the "
    "newest checkpoint there",
    "bad-checkpoint": "it may be damaged or from another kind of file: name an older one with "
    "step = N",
}


def _locate(written: str, spec_dir: Path, span: Span | None) -> Path:
    path = Path(written).expanduser()
    if path.is_absolute():
        tried = [path]
    else:
        tried = list(dict.fromkeys([Path.cwd() / path, spec_dir.resolve() / path]))
    for place in tried:
        if place.exists():
            return place
    where = " and ".join(str(p) for p in tried)
    raise FileError(
        f'init_from names "{written}", and there is no such folder'
        + ("" if path.is_absolute() else f" (looked in {where})"),
        span=span,
        path=written,
        code="no-checkpoint",
        hint="give a run directory or its checkpoints folder: absolute, relative to the "
        "current directory, or relative to the spec's folder",
    )


def _source(weights: Weights) -> str:
    return f"checkpoint {weights.step} at {weights.path}"


# ------------------------------------------------------------------------------ patterns


def _pattern(key: str, value: str, span: Span | None) -> re.Pattern[str]:
    """The key as a regex whose groups are its `*`s; the value must have as many."""
    if key.count("*") != value.count("*"):
        raise CheckError(
            f'init_from\'s map entry "{key}": "{value}" has {_count(key.count("*"), "`*`")} in '
            f"the checkpoint's pattern and {value.count('*')} in the model's",
            span=span,
            code="bad-pattern",
            expected="the same number of `*` on both sides: each `*` of the value takes what "
            "the key's `*` in the same place matched",
            found=f'"{key}": "{value}"',
        )
    # Lazy groups: with several `*`s, each earlier `*` takes the shortest match.
    return re.compile("(.*?)".join(re.escape(piece) for piece in key.split("*")))


def _fill(value: str, captures: tuple[str, ...]) -> str:
    pieces = value.split("*")
    return pieces[0] + "".join(c + p for c, p in zip(captures, pieces[1:], strict=True))


def _no_match(key: str, tensors: list[str], weights: Weights, span: Span | None) -> CheckError:
    # Suggest whole names and their folders (`encoder.*`), which a misspelt key resembles.
    folders = {
        ".".join(t.split(".")[:i]) + ".*" for t in tensors for i in range(1, t.count(".") + 1)
    }
    shown = ", ".join(_clipped(tensors, SHOWN))
    return CheckError(
        f'init_from\'s map key "{key}" matches no tensor of {_source(weights)}',
        span=span,
        code="no-match",
        found=f"{_count(len(tensors), 'tensor')}: {shown}",
        suggestion=did_you_mean(key, folders | set(tensors)),
        hint="a key is a layer path of the checkpoint; `*` matches any characters, dots "
        "included (seqc show --graph lists a spec's params)",
    )


# ------------------------------------------------------------------------------ text


def _compact(fresh: Iterable[str], loaded: set[str]) -> list[str]:
    """Fresh param names, each layer whose params are all fresh written once as `layer.*`."""
    out: list[str] = []

    def walk(prefix: str, names: list[str]) -> None:
        if prefix and not any(n in loaded for n in names):
            out.append(names[0] if len(names) == 1 else f"{prefix}.* ({len(names)})")
            return
        depth = prefix.count(".") + 1 if prefix else 0
        groups: dict[str, list[str]] = {}
        for n in names:
            groups.setdefault(".".join(n.split(".")[: depth + 1]), []).append(n)
        for sub, group in groups.items():
            if any(n not in loaded for n in group):
                walk(sub, group)

    walk("", list(fresh) + sorted(loaded))
    return out


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _clipped(items: list[str], limit: int) -> list[str]:
    return items[:limit] + ([f"... and {len(items) - limit} more"] if len(items) > limit else [])


def _listed(lines: list[str]) -> str:
    return "".join(f"\n  - {line}" for line in _clipped(lines, SHOWN))
