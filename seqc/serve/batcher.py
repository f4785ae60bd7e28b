"""Dynamic batching: sources that arrive close together are decoded in one model call.

Why: a decoder step costs much the same for one row as for sixteen on a small model (most of it
is dispatching the step, not arithmetic), so a server that decodes requests one at a time
spends its time on overhead while clients queue. A `Batcher` holds one queue (a model's
translations, or its transcriptions: each kind of work its own); a worker takes the first
waiting item, waits up to `max_delay` for more, up to `max_batch` items, and runs them together
in a thread (the model call blocks; the event loop keeps taking requests meanwhile). Items whose
client gave up (timed out, disconnected) before their batch started are dropped, not decoded.

An item is one source (one sentence of a request of several): a request's items may go to
different batches, and it is answered when all of them are done.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from seqc.serve.errors import ServeError

T = TypeVar("T")

RETRY_AFTER_S = 1
"""What a 503 for a full queue tells the client to wait."""


@dataclass
class Item(Generic[T]):
    """One source waiting for its batch: what to decode, and where its result goes."""

    value: T
    future: asyncio.Future[Any]
    queued_at: float = field(default_factory=time.perf_counter)


@dataclass
class BatchStats:
    """What the batcher reports after each batch (the metrics hook)."""

    size: int
    waits: list[float]
    """Seconds each item waited in the queue."""
    seconds: float


class Batcher(Generic[T]):
    """A queue of items and the workers that run them in batches through `run`: a list of
    values in, a list of results (or exceptions, one per item) out, in order."""

    def __init__(
        self,
        run: Callable[[list[T]], Sequence[Any]],
        executor: Executor,
        *,
        max_batch: int,
        max_delay_s: float,
        max_queue: int,
        workers: int = 1,
        on_batch: Callable[[BatchStats], None] | None = None,
    ) -> None:
        self._run = run
        self._executor = executor
        self.max_batch = max(1, max_batch)
        self.max_delay_s = max(0.0, max_delay_s)
        self.max_queue = max_queue
        self._workers = max(1, workers)
        self._on_batch = on_batch
        self._queue: asyncio.Queue[Item[T]] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.batches = 0
        """Model calls made so far."""

    @property
    def depth(self) -> int:
        return self._queue.qsize() if self._queue is not None else 0

    def start(self) -> None:
        """Start the workers on the running event loop (the app's start-up)."""
        if self._tasks:
            return
        self._queue = asyncio.Queue()
        self._tasks = [asyncio.create_task(self._work()) for _ in range(self._workers)]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    def submit(self, values: Sequence[T]) -> list[asyncio.Future[Any]]:
        """Queue every value, or none: a 503 with Retry-After when they do not all fit."""
        if self._queue is None:
            raise ServeError(503, "the server is starting", code="not-ready")
        if self._queue.qsize() + len(values) > self.max_queue:
            raise ServeError(
                503,
                f"the queue is full ({self._queue.qsize()} sources waiting, at most "
                f"{self.max_queue}); retry in a moment",
                code="queue-full",
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        loop = asyncio.get_running_loop()
        futures = []
        for value in values:
            item = Item(value, loop.create_future())
            self._queue.put_nowait(item)
            futures.append(item.future)
        return futures

    async def _collect(self) -> list[Item[T]]:
        """The next batch: the first live item, then what arrives within `max_delay_s`."""
        assert self._queue is not None
        batch: list[Item[T]] = []
        while not batch:
            first = await self._queue.get()
            if not first.future.done():  # its client gave up: nothing to decode
                batch.append(first)
        deadline = time.perf_counter() + self.max_delay_s
        while len(batch) < self.max_batch:
            try:
                item = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                left = deadline - time.perf_counter()
                if left <= 0:
                    break
                try:
                    item = await asyncio.wait_for(self._queue.get(), left)
                except TimeoutError:
                    break
            if not item.future.done():
                batch.append(item)
        return batch

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._collect()
            batch = [b for b in batch if not b.future.done()]
            if not batch:
                continue
            started = time.perf_counter()
            waits = [started - b.queued_at for b in batch]
            try:
                results = await loop.run_in_executor(
                    self._executor, self._run, [b.value for b in batch]
                )
            except Exception as e:  # the model failed: every item of the batch says so
                results = [e] * len(batch)
            self.batches += 1
            if self._on_batch is not None:
                self._on_batch(BatchStats(len(batch), waits, time.perf_counter() - started))
            for item, result in zip(batch, results, strict=True):
                if item.future.done():
                    continue
                if isinstance(result, BaseException):
                    item.future.set_exception(result)
                else:
                    item.future.set_result(result)
