"""A translation or a continuation streamed as server-sent events (`"stream": true`).

Why a stream: a long translation or a prompt's continuation takes seconds, and a client (the
page) shows words as they are decided instead of a spinner. The decoder runs in the server's
threads and hands each decided piece of text to the event loop, which sends it at once:

    data: {"text": " In"}              one event per piece of text decided
    data: {"text": " the beginning"}
    event: done
    data: {"text": "In the beginning"}  the whole answer, as the route without `stream` gives it

A streamed request decodes alone (it is not batched with others) and holds one sentence; a
failure after the stream began is an `event: error` with the error id the log carries.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import StreamingResponse

from seqc.serve.errors import ServeError
from seqc.serve.models import Action, ServedModel, TextJob, error_id
from seqc.serve.server import Server

log = logging.getLogger("seqc.serve")


def streamed(server: Server, model: ServedModel, action: Action, job: TextJob) -> StreamingResponse:
    if server.draining:
        raise ServeError(503, "the server is shutting down", code="draining")
    return StreamingResponse(
        _events(server, model, action, job),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache"},
    )


def _event(data: dict[str, Any], name: str | None = None) -> str:
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {json.dumps(data, ensure_ascii=False)}\n\n"


async def _events(
    server: Server, model: ServedModel, action: Action, job: TextJob
) -> AsyncIterator[str]:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    def put(kind: str, value: Any) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, (kind, value))

    def work() -> None:
        try:
            put("done", model.stream(action, job, lambda text: put("text", text)))
        except Exception as e:
            put("error", e)

    loop.run_in_executor(server.executor, work)
    while True:
        kind, value = await queue.get()
        if kind == "text":
            yield _event({"text": value})
        elif kind == "done":
            yield _event({"text": value}, "done")
            return
        else:
            eid = error_id()
            log.error("error %s while streaming: %s", eid, value, exc_info=value)
            message = f"the model failed (error id {eid}, in the server's log)"
            yield _event({"error": message, "code": "model-error"}, "error")
            return
