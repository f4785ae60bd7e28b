"""The dynamic batcher (`seqc.serve.batcher`): sources that arrive together run together, in
order; a full queue is a 503; work whose client gave up is not run; a failure reaches every
source of its batch."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

from seqc.serve.batcher import Batcher
from seqc.serve.errors import ServeError


def _batcher(calls: list[list[int]], **kw) -> Batcher[int]:
    def run(values: list[int]) -> list[int]:
        calls.append(values)
        return [v * 10 for v in values]

    args = {"max_batch": 4, "max_delay_s": 0.05, "max_queue": 100} | kw
    return Batcher(run, ThreadPoolExecutor(1), **args)


def test_sources_that_arrive_together_are_run_together_in_order() -> None:
    calls: list[list[int]] = []

    async def main() -> list[int]:
        b = _batcher(calls)
        b.start()
        futures = b.submit(list(range(10)))
        out = await asyncio.gather(*futures)
        await b.stop()
        assert b.batches == 3
        return out

    assert asyncio.run(main()) == [v * 10 for v in range(10)]
    assert calls == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_a_batch_waits_for_late_sources_only_as_long_as_it_may() -> None:
    calls: list[list[int]] = []

    async def main() -> None:
        b = _batcher(calls, max_delay_s=0.2)
        b.start()
        first = b.submit([1])
        await asyncio.sleep(0.05)
        second = b.submit([2])  # within the first one's wait: same batch
        await asyncio.gather(*first, *second)
        third = b.submit([3])
        await asyncio.gather(*third)
        await b.stop()

    asyncio.run(main())
    assert calls == [[1, 2], [3]]


def test_a_full_queue_is_a_503_with_retry_after() -> None:
    async def main() -> None:
        b = _batcher([], max_queue=3)
        b.start()
        b.submit([1, 2])
        with pytest.raises(ServeError) as e:
            b.submit([3, 4])
        assert e.value.status == 503 and e.value.headers["Retry-After"] == "1"
        await b.stop()

    asyncio.run(main())


def test_sources_whose_client_gave_up_are_not_run() -> None:
    calls: list[list[int]] = []

    async def main() -> None:
        b = _batcher(calls, max_delay_s=0.1)
        b.start()
        gone = b.submit([1, 2])
        for f in gone:
            f.cancel()
        kept = b.submit([3])
        assert await asyncio.gather(*kept) == [30]
        await b.stop()

    asyncio.run(main())
    assert calls == [[3]]


def test_a_failure_reaches_every_source_of_its_batch() -> None:
    def run(values: list[int]) -> list[int]:
        raise RuntimeError("the runtime failed")

    async def main() -> None:
        b = Batcher(run, ThreadPoolExecutor(1), max_batch=4, max_delay_s=0.05, max_queue=10)
        b.start()
        results = await asyncio.gather(*b.submit([1, 2]), return_exceptions=True)
        assert all(isinstance(r, RuntimeError) for r in results)
        await b.stop()

    asyncio.run(main())
