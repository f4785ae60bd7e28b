"""The serving state behind the routes: the models, a batcher per model and kind of work, the
metrics, and whether the server is ready or draining.

Why apart from the routes (`seqc.serve.app`): the two protocols (the inference protocol's
`/v2/.../infer` and the task routes `/v1/.../translate`) ask the same things of a model, and
both go through `Server.run`: queue the sources, wait for their batches (within the request's
time limit, and no longer than its client stays), and map a failure to its status.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from seqc.serve.batcher import Batcher, BatchStats
from seqc.serve.config import ServeConfig
from seqc.serve.errors import ServeError
from seqc.serve.metrics import Metrics
from seqc.serve.models import Action, AudioJob, ServedModel, TextJob, error_id
from seqc.spec.errors import SeqcError

log = logging.getLogger("seqc.serve")

WARM_UP_TEXT = "hello"
WARM_UP_SECONDS = 0.5
"""Audio a speech model hears once before the server says it is ready."""


@dataclass
class Server:
    models: dict[str, ServedModel]
    config: ServeConfig = field(default_factory=ServeConfig)
    metrics: Metrics = field(default_factory=Metrics)
    ready: bool = False
    draining: bool = False
    batchers: dict[tuple[str, Action], Batcher[Any]] = field(default_factory=dict)
    executor: ThreadPoolExecutor | None = None

    # ------------------------------------------------------------------ life cycle
    async def start(self) -> None:
        """Batchers for every model's actions, then one warm-up request each: `ready` after."""
        threads = max(1, self.config.threads) * max(1, len(self.models))
        self.executor = ThreadPoolExecutor(threads, thread_name_prefix="seqc-serve")
        for model in self.models.values():
            model.max_batch = self.config.max_batch_size
            for action in model.actions:
                self.batchers[(model.name, action)] = self._batcher(model, action)
        for batcher in self.batchers.values():
            batcher.start()
        loop = asyncio.get_running_loop()
        for model in self.models.values():
            await loop.run_in_executor(self.executor, _warm_up, model)
            model.ready = True
        self.ready = True
        log.info("ready: %s", ", ".join(self.models))

    async def stop(self) -> None:
        self.ready = False
        for batcher in self.batchers.values():
            await batcher.stop()
        if self.executor is not None:
            self.executor.shutdown(wait=True, cancel_futures=True)

    def _batcher(self, model: ServedModel, action: Action) -> Batcher[Any]:
        run: Callable[[list[Any]], Sequence[Any]] = getattr(model, action)
        name = model.name

        def observed(stats: BatchStats) -> None:
            self.metrics.model_calls.labels(name).inc()
            self.metrics.batch_size.labels(name).observe(stats.size)
            for wait in stats.waits:
                self.metrics.queue_wait.labels(name).observe(wait)

        assert self.executor is not None
        return Batcher(
            _isolating(run),
            self.executor,
            max_batch=self.config.max_batch_size,
            max_delay_s=self.config.max_delay_ms / 1000.0,
            max_queue=self.config.max_queue,
            workers=self.config.threads,
            on_batch=observed,
        )

    # ------------------------------------------------------------------ requests
    def model(self, name: str) -> ServedModel:
        model = self.models.get(name)
        if model is None:
            known = ", ".join(sorted(self.models))
            raise ServeError(
                404, f"no model named `{name}`; served: {known}", field="model", code="no-model"
            )
        return model

    async def run(
        self,
        model: ServedModel,
        action: Action,
        jobs: Sequence[TextJob | AudioJob | str],
        disconnected: Callable[[], Any] | None = None,
    ) -> list[Any]:
        """The results of `jobs` through `model`'s `action`, batched with other requests'.
        A 503 when draining or the queue is full, a 504 past the time limit, a 499 when the
        client goes away (its sources not yet batched are dropped; the answer reaches no one),
        400 for a source the model refuses (too short an utterance), 500 with an error id for
        a failure."""
        if self.draining:
            raise ServeError(503, "the server is shutting down", code="draining")
        require(model, action)
        batcher = self.batchers[(model.name, action)]
        futures = batcher.submit(list(jobs))
        self.metrics.queue_depth.labels(model.name, action).set(batcher.depth)
        gathered = asyncio.gather(*futures)
        waiters: set[asyncio.Future[Any]] = {gathered}
        watch = None
        if disconnected is not None:
            watch = asyncio.ensure_future(disconnected())
            waiters.add(watch)
        try:
            done, _ = await asyncio.wait(
                waiters, timeout=self.config.timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
            if gathered not in done:
                for f in futures:
                    f.cancel()  # not yet batched: dropped; running: its result is discarded
                gathered.cancel()
                if watch is not None and watch in done:  # nobody is left to read the answer
                    raise ServeError(499, "the client went away", code="client-gone")
                raise ServeError(
                    504,
                    f"no answer within {self.config.timeout_s:g} s (--timeout-s)",
                    code="timeout",
                )
            return _results(gathered)
        finally:
            if watch is not None:
                watch.cancel()
            self.metrics.queue_depth.labels(model.name, action).set(batcher.depth)


def require(model: ServedModel, action: Action) -> None:
    """A 400 when `model` does not do `action` (a translator asked to transcribe)."""
    if action not in model.actions:
        raise ServeError(
            400,
            f"model `{model.name}` ({model.kind}) does not {action}; it can "
            f"{', '.join(model.actions)}",
            field="route",
            code="wrong-route",
        )


def _results(gathered: asyncio.Future[Any]) -> list[Any]:
    try:
        return list(gathered.result())
    except ServeError:
        raise
    except SeqcError as e:  # the model refused this input (too short, wrong kind)
        raise ServeError(400, e.message, code=e.code) from e
    except Exception as e:
        eid = error_id()
        log.error("error %s: %s: %s", eid, type(e).__name__, e, exc_info=e)
        raise ServeError(
            500,
            f"the model failed on this request (error id {eid}, in the server's log)",
            code="model-error",
        ) from e


def _isolating(run: Callable[[list[Any]], Sequence[Any]]) -> Callable[[list[Any]], list[Any]]:
    """`run` over a batch; when it fails, each item alone, so that one bad source fails its own
    request and not the others batched with it."""

    def batch(values: list[Any]) -> list[Any]:
        try:
            return list(run(values))
        except Exception as e:
            if len(values) == 1:
                return [e]
        out: list[Any] = []
        for v in values:
            try:
                out.extend(run([v]))
            except Exception as e:
                out.append(e)
        return out

    return batch


def _warm_up(model: ServedModel) -> None:
    """One request through each of the model's actions: the runtime's first run allocates and
    specialises, which the first client should not wait for."""
    import numpy as np

    started = time.perf_counter()
    strategy = model.strategy
    for action in model.actions:
        if action == "transcribe":
            shortest = int((model.manifest.get("audio") or {}).get("min_samples", 1))
            n = max(shortest, int(WARM_UP_SECONDS * model.sample_rate))
            samples = np.zeros(n, np.float32)
            model.transcribe([AudioJob(samples, strategy)])
        elif action == "score":
            model.score([WARM_UP_TEXT])
        else:
            assert strategy is not None
            getattr(model, action)([TextJob(WARM_UP_TEXT, strategy)])
    log.info("warmed up %s in %.2f s", model.name, time.perf_counter() - started)
