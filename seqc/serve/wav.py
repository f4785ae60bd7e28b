"""A WAV file sent to `/v1/models/{name}/transcribe`: the request body itself (`curl
--data-binary @utt.wav -H 'Content-Type: audio/wav'`) or a multipart form's `file` field (a
browser's upload, the page's recording), read as `seqc decode --input utt.wav` reads one.

Why refuse rather than convert: like the command, the server takes 16-bit PCM mono at the
model's rate and says how to convert anything else (`seqc.data.audio`): a silent resampling
would be a quality choice nobody made. Decode options come as query parameters (`?beam=4`)
or, in a form, as a `parameters` field holding JSON.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from starlette.requests import Request

from seqc.data.audio import WavBytes, load_wav
from seqc.data.errors import DataError
from seqc.serve.bodies import body_bytes
from seqc.serve.config import ServeConfig
from seqc.serve.errors import ServeError, bad
from seqc.serve.models import ServedModel

WAV_TYPES = ("audio/wav", "audio/x-wav", "audio/wave", "application/octet-stream", "")


async def wav_request(
    request: Request, model: ServedModel, cfg: ServeConfig
) -> tuple[np.ndarray, dict[str, Any]]:
    """The request's audio as float32 samples, and its decode options."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "multipart/form-data":
        data, params = await _form(request, cfg)
    elif kind in WAV_TYPES:
        data = await body_bytes(request, cfg.max_body_bytes)
        params = {k: _query_value(v) for k, v in request.query_params.items()}
    else:
        raise ServeError(
            415,
            f"send a WAV file as the body (Content-Type audio/wav) or as the `file` field of a "
            f"multipart form, not {kind}",
            field="headers.content-type",
            code="unsupported-media",
        )
    if not data:
        raise bad("the body is empty: send a WAV file", "body", "empty-audio")
    min_samples = int((model.manifest.get("audio") or {}).get("min_samples", 1))
    try:
        samples = load_wav(WavBytes("the request's audio", data), model.sample_rate, min_samples)
    except DataError as e:
        raise ServeError(400, e.message, field="body", code=e.code) from None
    return samples, params


async def _form(request: Request, cfg: ServeConfig) -> tuple[bytes, dict[str, Any]]:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > cfg.max_body_bytes:
        raise ServeError(413, f"the body has {declared} bytes, at most {cfg.max_body_bytes}")
    form = await request.form(max_files=1, max_fields=4, max_part_size=cfg.max_body_bytes)
    upload = form.get("file")
    if upload is None or isinstance(upload, str):
        raise bad("the form has no `file` field holding a WAV file", "file", "no-file")
    data = await upload.read()
    raw = form.get("parameters")
    params: Any = {}
    if isinstance(raw, str) and raw.strip():
        try:
            params = json.loads(raw)
        except json.JSONDecodeError as e:
            raise bad(f"`parameters` is not valid JSON: {e}", "parameters", "bad-json") from None
    if not isinstance(params, dict):
        raise bad("`parameters` must be a JSON object", "parameters")
    return data, params


def _query_value(text: str) -> Any:
    """`?beam=4` -> 4, `?temperature=0.7` -> 0.7; anything else stays a string (and is then
    refused by the option's own check)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text
