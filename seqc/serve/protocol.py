"""The Open Inference Protocol's tensors (KServe v2 / Triton REST), read and written.

An inference request names its inputs as tensors: `{"name": "text", "datatype": "BYTES",
"shape": [N], "data": [...]}` for N sentences, `{"name": "audio", "datatype": "FP32" | "INT16",
"shape": [N, samples], "data": [...]}` (row-major, flat or nested) for N utterances of one
length. Why checked here field by field: a gateway or a client library that builds a tensor
wrongly (a shape that disagrees with its data, a datatype the model does not take) gets a 400
that names `inputs[0].shape`, not a failure deep in a runtime.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from seqc.serve.errors import bad

AUDIO_TYPES = {"FP32": np.float32, "INT16": np.int16}
INT16_SCALE = 32768.0


def _object(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise bad(f"`{field}` must be a JSON object", field)
    return value


def request_body(body: Any) -> tuple[Mapping[str, Any], list[Mapping[str, Any]], str | None]:
    """The request's parameters, its input tensors and its id."""
    body = _object(body, "body")
    inputs = body.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise bad("`inputs` must be a non-empty list of tensors", "inputs")
    params = _object(body.get("parameters") or {}, "parameters")
    request_id = body.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise bad("`id` must be a string", "id")
    outputs = body.get("outputs")
    if outputs is not None and not isinstance(outputs, list):
        raise bad("`outputs` must be a list", "outputs")
    return params, [_object(t, f"inputs[{i}]") for i, t in enumerate(inputs)], request_id


def find_input(
    tensors: list[Mapping[str, Any]], name: str, datatypes: tuple[str, ...]
) -> tuple[int, Mapping[str, Any]]:
    """The tensor named `name` (and its index), with one of `datatypes`; a 400 otherwise."""
    names = [t.get("name") for t in tensors]
    for i, t in enumerate(tensors):
        if t.get("name") == name:
            if t.get("datatype") not in datatypes:
                raise bad(
                    f"input `{name}` must have datatype {' or '.join(datatypes)}, not "
                    f"{t.get('datatype')!r}",
                    f"inputs[{i}].datatype",
                )
            return i, t
    extra = [n for n in names if n != name]
    raise bad(
        f"this model takes an input named `{name}`"
        + (f"; the request has {', '.join(map(str, extra))}" if extra else ""),
        "inputs",
        "unknown-input",
    )


def _shape(t: Mapping[str, Any], field: str, rank: int) -> list[int]:
    shape = t.get("shape")
    if (
        not isinstance(shape, list)
        or len(shape) != rank
        or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
    ):
        raise bad(f"`shape` must be {rank} non-negative integer(s), not {shape!r}", field)
    return shape


def _flat(data: Any, field: str) -> list[Any]:
    if not isinstance(data, list):
        raise bad("`data` must be a list", field)
    out: list[Any] = []
    for x in data:  # nested lists, row-major, as the protocol allows
        if isinstance(x, list):
            out.extend(_flat(x, field))
        else:
            out.append(x)
    return out


def text_input(tensors: list[Mapping[str, Any]], max_items: int, max_chars: int) -> list[str]:
    """The sentences of the `text` tensor ([N] BYTES)."""
    i, t = find_input(tensors, "text", ("BYTES",))
    (n,) = _shape(t, f"inputs[{i}].shape", 1)
    data = _flat(t.get("data"), f"inputs[{i}].data")
    if len(data) != n:
        raise bad(f"shape [{n}] but {len(data)} element(s) of data", f"inputs[{i}].shape")
    return texts(data, f"inputs[{i}].data", max_items, max_chars)


def texts(data: Any, field: str, max_items: int, max_chars: int) -> list[str]:
    """A list of sentences from a request, each a string within the limits."""
    if not isinstance(data, list):
        raise bad("must be a list of strings", field)
    if not data:
        raise bad("the batch is empty: give at least one sentence", field, "empty-batch")
    if len(data) > max_items:
        raise bad(f"{len(data)} sentences, at most {max_items} in one request", field, "too-many")
    for j, s in enumerate(data):
        if not isinstance(s, str):
            raise bad(f"element {j} is {type(s).__name__}, not a string", f"{field}[{j}]")
        if len(s) > max_chars:
            raise bad(
                f"element {j} has {len(s)} characters, at most {max_chars} (--max-text-chars)",
                f"{field}[{j}]",
                "text-too-long",
            )
    return list(data)


def audio_input(tensors: list[Mapping[str, Any]], max_items: int) -> list[np.ndarray]:
    """The utterances of the `audio` tensor ([N, samples] FP32 in [-1, 1], or INT16) as float32
    rows."""
    i, t = find_input(tensors, "audio", tuple(AUDIO_TYPES))
    n, samples = _shape(t, f"inputs[{i}].shape", 2)
    if n == 0:
        raise bad("the batch is empty: give at least one utterance", f"inputs[{i}].shape")
    if n > max_items:
        raise bad(f"{n} utterances, at most {max_items} in one request", f"inputs[{i}].shape")
    data = _flat(t.get("data"), f"inputs[{i}].data")
    if len(data) != n * samples:
        raise bad(
            f"shape [{n}, {samples}] holds {n * samples} values, the data has {len(data)}",
            f"inputs[{i}].shape",
        )
    if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in data):
        raise bad("audio samples must be numbers", f"inputs[{i}].data")
    array = np.asarray(data, np.float64).reshape(n, samples)
    if not np.isfinite(array).all():
        raise bad("audio samples must be finite", f"inputs[{i}].data")
    if t["datatype"] == "INT16":
        if array.min(initial=0) < -32768 or array.max(initial=0) > 32767:
            raise bad("INT16 samples must be in [-32768, 32767]", f"inputs[{i}].data")
        array = array / INT16_SCALE
    return [row.astype(np.float32) for row in array]


def json_number(x: float | None) -> float | None:
    """A float JSON can carry: None for NaN and infinities (which would break the body)."""
    if x is None or not math.isfinite(x):
        return None
    return float(x)


def text_tensor(name: str, values: list[str]) -> dict[str, Any]:
    return {"name": name, "datatype": "BYTES", "shape": [len(values)], "data": values}


def score_tensor(values: list[float | None]) -> dict[str, Any]:
    data = [json_number(v) for v in values]
    return {"name": "score", "datatype": "FP32", "shape": [len(data)], "data": data}


def ranked_tensors(answers: list[Any]) -> list[dict[str, Any]]:
    """n-best answers (`Ranked`, n each) as `text` BYTES [N, n] and `score` FP32 [N, n], in
    row-major order as the protocol lays out a tensor's data."""
    n = len(answers[0].texts) if answers else 0
    texts = [t for a in answers for t in a.texts]
    scores = [json_number(v) for a in answers for v in a.scores]
    return [
        {"name": "text", "datatype": "BYTES", "shape": [len(answers), n], "data": texts},
        {"name": "score", "datatype": "FP32", "shape": [len(answers), n], "data": scores},
    ]
