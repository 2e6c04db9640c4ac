"""BullMQ's Python package: jobs added with ``Queue.add`` and ``Queue.addBulk``, drained by a
``Worker`` with a no-op processor (concurrency 1, its default).

bullmq is asyncio only: each call of the adapter runs a coroutine to the end on the adapter's
own event loop, and the per-item loops (``add_each``) run inside one coroutine, so that what is
timed is BullMQ's cost, not an event loop's start per call. BullMQ keeps its defaults (completed
jobs are kept, an events stream per queue). It has no lease or complete outside its worker: it
offers the adds, the worker and the memory rows.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from typing import Any, TypeVar

import redis
from bullmq import Queue, Worker

from workloads import DATA, FILL_BATCH, BenchError

T = TypeVar("T")
QUEUE = "bench"
#: How long the worker waits for a job once the queue is empty, in seconds (its default is 5;
#: it only matters after the last job, when the clock has stopped).
DRAIN_DELAY = 1


def _data(payload: bytes) -> dict[str, Any]:
    """The job data: a JSON object as long as ``payload`` once serialized (``{"p":"..."}``)."""
    return {"p": "x" * max(0, len(payload) - 8)}


async def _noop(job: Any, token: str) -> None:
    del job, token


class BullQueue:
    """One BullMQ queue on the benchmark's server."""

    impl = "bullmq"

    def __init__(self, db: redis.Redis) -> None:
        kwargs = db.connection_pool.connection_kwargs
        self._url = f"redis://{kwargs.get('host', '127.0.0.1')}:{kwargs['port']}/0"
        self._loop = asyncio.new_event_loop()
        self._q = self._run(self._make_queue())

    async def _make_queue(self) -> Queue:
        return Queue(QUEUE, {"connection": self._url})

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self._loop.run_until_complete(coroutine)

    def reset(self) -> None:
        pass

    def new_item(self) -> dict[str, Any]:
        return _data(DATA)

    def add(self, item: dict[str, Any]) -> None:
        self._run(self._q.add("job", item))

    def add_each(self, items: list[Any]) -> None:
        async def each() -> None:
            add = self._q.add
            for item in items:
                await add("job", item)

        self._run(each())

    def add_many(self, items: list[Any]) -> None:
        self._run(self._q.addBulk([{"name": "job", "data": item} for item in items]))

    def fill(self, n: int, data: bytes = DATA) -> None:
        job = {"name": "job", "data": _data(data)}
        assert len(json.dumps(job["data"], separators=(",", ":"))) == max(len(data), 8)
        for start in range(0, n, FILL_BATCH):
            self._run(self._q.addBulk([job] * min(FILL_BATCH, n - start)))

    def run_worker(self, n: int) -> None:
        """Start a ``Worker``; return once ``n`` more jobs are completed; close it."""
        self._run(self._drain(n))

    async def _drain(self, n: int) -> None:
        before = await self._q.getCompletedCount()
        worker = Worker(QUEUE, _noop, {"connection": self._url, "drainDelay": DRAIN_DELAY})
        try:
            deadline = asyncio.get_running_loop().time() + 600
            while await self._q.getCompletedCount() - before < n:
                if asyncio.get_running_loop().time() > deadline:
                    raise BenchError(f"the BullMQ worker did not complete {n} jobs in 600 s")
                await asyncio.sleep(0.005)
        finally:
            await worker.close()

    def queue_len(self) -> int:
        counts = self._run(self._q.getJobCounts("waiting"))
        return int(counts["waiting"])


def make(db: redis.Redis) -> BullQueue:
    return BullQueue(db)
