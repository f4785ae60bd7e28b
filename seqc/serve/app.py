"""The HTTP routes, as a Starlette app: the Open Inference Protocol (`/v2`), the task routes
(`/v1/models/{name}/translate`, `/generate`, `/transcribe`, `/score`), `/metrics` and the page.

Every route goes through `_guarded`: it checks the API key where one is set, turns a
`ServeError` (or malformed JSON, or a body over the limit) into its status with a JSON body
that names the field, counts the request and its latency, and answers a failure nobody
foresaw with a 500 and an error id that the log carries too, so one bad request never stops
the server.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from seqc.serve.bodies import json_body
from seqc.serve.config import ServeConfig
from seqc.serve.errors import ServeError, bad
from seqc.serve.models import AudioJob, ServedModel, TextJob, error_id
from seqc.serve.params import check_known, nbest_for, strategy_for
from seqc.serve.protocol import (
    audio_input,
    ranked_tensors,
    request_body,
    score_tensor,
    text_input,
    text_tensor,
    texts,
)
from seqc.serve.server import Server, require
from seqc.serve.streaming import streamed
from seqc.serve.wav import wav_request

log = logging.getLogger("seqc.serve")

PAGE = Path(__file__).with_name("page")
VERSION = "1"
OPEN = {"/v2/health/live", "/v2/health/ready", "/", "/favicon.ico"}
"""Paths answered without the API key: health checks (a load balancer has no key) and the
page (which asks for the key and sends it with its requests)."""

Handler = Callable[[Request, Server], Awaitable[Response]]


def build_app(server: Server) -> Starlette:
    """The app over a `Server` whose models are loaded; its start-up warms them up."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await server.start()
        try:
            yield
        finally:
            server.draining = True
            await server.stop()

    def route(path: str, handler: Handler, name: str, methods: list[str]) -> Route:
        async def endpoint(request: Request) -> Response:
            return await _guarded(request, server, handler, name)

        return Route(path, endpoint, methods=methods)

    routes = [
        route("/v2/health/live", _live, "live", ["GET"]),
        route("/v2/health/ready", _ready, "ready", ["GET"]),
        route("/v2", _server_metadata, "server", ["GET"]),
        route("/v2/models/{name}", _model_metadata, "metadata", ["GET"]),
        route("/v2/models/{name}/ready", _model_ready, "model_ready", ["GET"]),
        route("/v2/models/{name}/infer", _infer, "infer", ["POST"]),
        route("/v1/models", _list_models, "models", ["GET"]),
        *(
            route(f"/v1/models/{{name}}/{action}", _task(action), action, ["POST"])
            for action in ("translate", "generate", "transcribe", "score")
        ),
        route("/metrics", _metrics, "metrics", ["GET"]),
        route("/", _page, "page", ["GET"]),
        Mount("/static", StaticFiles(directory=PAGE), name="static"),
    ]
    middleware = []
    if server.config.cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(server.config.cors_origins),
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "Content-Type"],
            )
        )
    app = Starlette(routes=routes, lifespan=lifespan, middleware=middleware)
    app.state.server = server
    return app


async def _guarded(request: Request, server: Server, handler: Handler, route: str) -> Response:
    model = request.path_params.get("name", "")
    started = time.perf_counter()
    status = 500
    gauge = server.metrics.in_flight.labels(model) if model in server.models else None
    if gauge is not None:
        gauge.inc()
    try:
        _authorize(request, server.config)
        response = await handler(request, server)
        status = response.status_code
        return response
    except ServeError as e:
        status = e.status
        return JSONResponse(e.body(), status_code=e.status, headers=e.headers)
    except asyncio.CancelledError:
        status = 499  # the client went away: nothing to answer
        raise
    except Exception as e:
        eid = error_id()
        log.error("error %s on %s: %s", eid, request.url.path, e, exc_info=e)
        body = {
            "error": f"internal error (error id {eid}, in the server's log)",
            "code": "internal",
        }
        return JSONResponse(body, status_code=500)
    finally:
        if gauge is not None:
            gauge.dec()
        label = model if model in server.models else ""
        server.metrics.requests.labels(label, route, str(status)).inc()
        server.metrics.latency.labels(label, route).observe(time.perf_counter() - started)


def _authorize(request: Request, config: ServeConfig) -> None:
    if config.api_key is None or request.url.path in OPEN or request.method == "OPTIONS":
        return
    given = request.headers.get("authorization", "")
    scheme, _, token = given.partition(" ")
    ok = scheme.lower() == "bearer" and hmac.compare_digest(
        token.strip().encode(), config.api_key.encode()
    )
    if not ok:
        raise ServeError(
            401,
            "this server needs an API key: send `Authorization: Bearer <key>`",
            field="headers.authorization",
            code="unauthorized",
            headers={"WWW-Authenticate": "Bearer"},
        )


def _disconnected(request: Request) -> Callable[[], Awaitable[None]]:
    """A coroutine that returns once the client has gone (its connection closed)."""

    async def wait() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                return

    return wait


# ---------------------------------------------------------------------- the inference protocol
async def _live(request: Request, server: Server) -> Response:
    return JSONResponse({"live": True})


async def _ready(request: Request, server: Server) -> Response:
    ready = server.ready and not server.draining
    return JSONResponse({"ready": ready}, status_code=200 if ready else 503)


async def _server_metadata(request: Request, server: Server) -> Response:
    from importlib.metadata import version

    return JSONResponse(
        {"name": "seqc", "version": version("seqc"), "extensions": ["seqc_task_routes"]}
    )


async def _model_metadata(request: Request, server: Server) -> Response:
    return JSONResponse(server.model(request.path_params["name"]).metadata())


async def _model_ready(request: Request, server: Server) -> Response:
    model = server.model(request.path_params["name"])
    ready = model.ready and not server.draining
    return JSONResponse({"name": model.name, "ready": ready}, status_code=200 if ready else 503)


async def _infer(request: Request, server: Server) -> Response:
    model = server.model(request.path_params["name"])
    body = await json_body(request, server.config.max_body_bytes)
    params, tensors, request_id = request_body(body)
    cfg = server.config
    action = model.main_action
    outputs: list[dict[str, Any]]
    if action == "transcribe":
        rate = params.get("sample_rate", model.sample_rate)
        _check_rate(rate, model, "parameters.sample_rate")
        strategy = _strategy(model, params, cfg)
        rows = audio_input(tensors, cfg.max_items)
        jobs: list[Any] = [AudioJob(r, strategy) for r in rows]
        outputs = [
            text_tensor("text", await server.run(model, action, jobs, _disconnected(request)))
        ]
    elif action == "score":
        check_known(params)
        items = text_input(tensors, cfg.max_items, cfg.max_text_chars)
        scores = await server.run(model, "score", items, _disconnected(request))
        outputs = [score_tensor(scores)]
    else:
        items = text_input(tensors, cfg.max_items, cfg.max_text_chars)
        strategy = _strategy(model, params, cfg)
        n = nbest_for(strategy, params)
        jobs = [TextJob(t, strategy, n) for t in items]
        answer = await server.run(model, action, jobs, _disconnected(request))
        # n > 1: [N, nbest] texts and their log-probabilities, best first
        outputs = ranked_tensors(answer) if n > 1 else [text_tensor("text", answer)]
        wanted = {o.get("name") for o in body.get("outputs") or [] if isinstance(o, dict)}
        if "score" in wanted and "score" in model.actions and n == 1:
            scores = await server.run(model, "score", items, _disconnected(request))
            outputs.append(score_tensor(scores))
    out: dict[str, Any] = {"model_name": model.name, "model_version": VERSION, "outputs": outputs}
    if request_id is not None:
        out["id"] = request_id
    return JSONResponse(out)


def _strategy(model: ServedModel, params: Any, cfg: ServeConfig) -> Any:
    if model.main_action == "transcribe" and params.get("nbest", 1) != 1:
        raise bad("a speech model gives one transcript: leave out `nbest`", "parameters.nbest")
    base = model.strategy
    if base is None:  # a speech model whose task names no decode: its transcriber's own
        check_known(params)
        if any(k in params for k in ("beam", "temperature", "max_length")):
            raise bad("this speech model decodes with its own strategy only", "parameters")
        return None
    return strategy_for(
        base, {k: v for k, v in params.items() if k != "sample_rate"}, cfg.max_decode_length
    )


def _check_rate(rate: Any, model: ServedModel, field: str) -> None:
    if rate != model.sample_rate:
        raise bad(
            f"this model takes audio at {model.sample_rate} Hz, not {rate!r}: resample it "
            f"first (sox in.wav -r {model.sample_rate} -c 1 -b 16 out.wav)",
            field,
            "wrong-rate",
        )


# ---------------------------------------------------------------------- task routes
def _task(action: str) -> Handler:
    async def handle(request: Request, server: Server) -> Response:
        model = server.model(request.path_params["name"])
        cfg = server.config
        require(model, action)  # type: ignore[arg-type]
        if action == "transcribe":
            samples, params = await wav_request(request, model, cfg)
            strategy = _strategy(model, params, cfg)
            (text,) = await server.run(
                model, "transcribe", [AudioJob(samples, strategy)], _disconnected(request)
            )
            return JSONResponse({"text": text})
        body = await json_body(request, cfg.max_body_bytes)
        if not isinstance(body, dict):
            raise bad("the body must be a JSON object", "body")
        unknown = set(body) - {"text", "parameters", "stream"}
        if unknown:
            raise bad(f"unknown field(s) {', '.join(sorted(unknown))}", "body", "unknown-field")
        items = texts(body.get("text"), "text", cfg.max_items, cfg.max_text_chars)
        params = body.get("parameters") or {}
        if not isinstance(params, dict):
            raise bad("`parameters` must be a JSON object", "parameters")
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise bad("`stream` must be true or false", "stream")
        if stream:
            if action not in ("translate", "generate"):
                raise bad(f"{action} does not stream", "stream")
            if params.get("nbest", 1) != 1:
                raise bad(
                    "a streamed request has one answer: leave out `nbest`", "parameters.nbest"
                )
            if len(items) != 1:
                raise bad("a streamed request holds one sentence", "text", "too-many")
            job = TextJob(items[0], _strategy(model, params, cfg))
            return streamed(server, model, action, job)  # type: ignore[arg-type]
        if action == "score":
            check_known(params)
            scores = await server.run(model, "score", items, _disconnected(request))
            return JSONResponse({"scores": score_tensor(scores)["data"]})
        strategy = _strategy(model, params, cfg)
        n = nbest_for(strategy, params)
        jobs = [TextJob(t, strategy, n) for t in items]
        answer = await server.run(model, action, jobs, _disconnected(request))  # type: ignore[arg-type]
        key = "translations" if action == "translate" else "texts"
        if n > 1:  # each item's n best, best first, and their log-probabilities
            return JSONResponse(
                {
                    key: [r.texts for r in answer],
                    "scores": [score_tensor(r.scores)["data"] for r in answer],
                }
            )
        return JSONResponse({key: answer})

    return handle


async def _list_models(request: Request, server: Server) -> Response:
    return JSONResponse(
        {
            "models": [
                {"name": m.name, "ready": m.ready, **m.metadata()["parameters"]}
                for m in server.models.values()
            ]
        }
    )


async def _metrics(request: Request, server: Server) -> Response:
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return PlainTextResponse(
        generate_latest(server.metrics.registry), media_type=CONTENT_TYPE_LATEST
    )


async def _page(request: Request, server: Server) -> Response:
    return FileResponse(PAGE / "index.html", media_type="text/html")
