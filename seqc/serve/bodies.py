"""A request's body, read within the server's size limit, and as JSON.

Why a limit while reading: a client that sends no Content-Length (chunked) could otherwise make
the server buffer anything; past `--max-body-bytes` the answer is 413 before the rest is read.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

from seqc.serve.errors import ServeError, bad


async def body_bytes(request: Request, limit: int) -> bytes:
    """The request body, read up to `limit` bytes: a 413 past it (by Content-Length before
    reading, or while reading a body that did not say its length)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ServeError(413, _too_large(int(declared), limit), code="too-large")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ServeError(413, _too_large(size, limit), code="too-large")
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(size: int, limit: int) -> str:
    return f"the body has {size} bytes or more, at most {limit} (--max-body-bytes)"


async def json_body(request: Request, limit: int) -> Any:
    data = await body_bytes(request, limit)
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise bad(f"the body is not valid JSON: {e}", "body", "bad-json") from None
