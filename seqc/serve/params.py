"""A request's decode options (`parameters` of an inference request) as a `DecodeConfig`.

Why here and strict: the options change what is decoded, so one the server does not know
(`beams` for `beam`), a wrong type or a value outside where the strategy is defined is the
client's error (400, naming the parameter), never ignored. Without options a model decodes with
its artifact's strategy (the task's `decode`, recorded in the manifest), as `seqc decode
--artifact` does, so the server's answer and the command's are the same.

    beam          int >= 1      beam search of that width (1: greedy)
    length_penalty float >= 0   GNMT's alpha, with beam
    temperature   float > 0     sampling at that temperature
    top_k         int >= 0      sampling from the k likeliest (0: all)
    top_p         float (0, 1]  sampling from the likeliest mass p
    seed          int           sampling's seed (the same seed, the same text)
    max_length    int >= 1      tokens at most (capped by --max-decode-length)
    nbest         int >= 1      the n best hypotheses of beam search (n <= beam), best first,
                                each with its log-probability
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from seqc.compiler.config import Beam, DecodeConfig, Greedy, Sample
from seqc.data.calls import make_call
from seqc.serve.errors import bad

DECODE_OPTIONS = (
    "beam",
    "length_penalty",
    "temperature",
    "top_k",
    "top_p",
    "seed",
    "max_length",
    "nbest",
)
"""The decode options a request may give."""

SERVER_OPTIONS = ("sample_rate",)
"""Options that are not about decoding, read by the routes."""

MAX_BEAM = 64


def _int(params: Mapping[str, Any], name: str, low: int, high: int | None = None) -> int | None:
    value = params.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(f"`{name}` must be an integer, not {value!r}", f"parameters.{name}")
    if value < low or (high is not None and value > high):
        top = f" and at most {high}" if high is not None else ""
        raise bad(f"`{name}` must be at least {low}{top}, not {value}", f"parameters.{name}")
    return value


def _float(
    params: Mapping[str, Any], name: str, low: float, high: float, *, open_low: bool
) -> float | None:
    value = params.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise bad(f"`{name}` must be a finite number, not {value!r}", f"parameters.{name}")
    if value < low or (open_low and value == low) or value > high:
        left = "(" if open_low else "["
        raise bad(f"`{name}` must be in {left}{low}, {high}], not {value}", f"parameters.{name}")
    return float(value)


def check_known(params: Mapping[str, Any], where: str = "parameters") -> None:
    """A 400 for an option the server does not know, with the ones it does."""
    for name in params:
        if name not in DECODE_OPTIONS and name not in SERVER_OPTIONS:
            known = ", ".join((*DECODE_OPTIONS, *SERVER_OPTIONS))
            raise bad(
                f"unknown parameter `{name}`; known: {known}",
                f"{where}.{name}",
                "unknown-parameter",
            )


def strategy_for(
    base: DecodeConfig, params: Mapping[str, Any], max_decode_length: int
) -> DecodeConfig:
    """The strategy a request asks for: the model's own (`base`), changed by its options."""
    check_known(params)
    beam = _int(params, "beam", 1, MAX_BEAM)
    alpha = _float(params, "length_penalty", 0.0, 10.0, open_low=False)
    temperature = _float(params, "temperature", 0.0, 100.0, open_low=True)
    top_k = _int(params, "top_k", 0)
    top_p = _float(params, "top_p", 0.0, 1.0, open_low=True)
    seed = _int(params, "seed", 0)
    length = _int(params, "max_length", 1, max_decode_length)
    if beam is not None and beam > 1 and temperature is not None:
        raise bad(
            "give `beam` or `temperature`, not both: beam search does not sample", "parameters"
        )
    kind = base.kind
    if beam is not None:
        kind = "beam" if beam > 1 else "greedy"
    elif temperature is not None or top_k is not None or top_p is not None or seed is not None:
        kind = "sample"
    args: dict[str, Any] = {}
    if kind == base.kind:
        args = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
    elif kind in ("greedy", "beam") and getattr(base, "warp", None) is not None:
        args["warp"] = base.warp  # type: ignore[attr-defined]  # the model's, not the search's
    args["max_length"] = min(length or base.max_length, max_decode_length)
    if kind == "beam":
        args |= {k: v for k, v in {"width": beam, "length_penalty": alpha}.items() if v is not None}
    elif kind == "sample":
        given = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "seed": seed}
        args |= {k: v for k, v in given.items() if v is not None}
    elif alpha is not None:
        raise bad(
            "`length_penalty` is for beam search: give `beam` too", "parameters.length_penalty"
        )
    strategy = DecodeConfig.of(make_call("decode", kind, **args))
    assert isinstance(strategy, Greedy | Beam | Sample), strategy
    return strategy


def nbest_for(strategy: DecodeConfig | None, params: Mapping[str, Any]) -> int:
    """How many hypotheses a request asks for (1 unless `nbest`): only beam search has more
    than one, and at most its width."""
    n = _int(params, "nbest", 1, MAX_BEAM)
    if n is None or n == 1:
        return 1
    if not isinstance(strategy, Beam):
        raise bad(
            f"`nbest` ({n}) needs beam search: give `beam` of at least {n}", "parameters.nbest"
        )
    if n > strategy.width:
        raise bad(f"`nbest` ({n}) must be at most the beam ({strategy.width})", "parameters.nbest")
    return n
