"""The worker runners drain a small queue on every path: ``Worker`` (threads, and processes
that connect by URL) and ``AsyncWorker``.

One item fails on its first try: it is released, retried after its backoff and completed. The
worker is seen by ``live_workers`` (``alive_workers``) while it runs; when it stops, the queue
is empty and every item was handled once, the failed one twice.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.asyncio

from lanes import ScriptRoutes, aclose
from redis_work_queue import (
    AsyncWorker,
    AsyncWorkQueue,
    Item,
    KeyPrefix,
    QueueStats,
    Worker,
    WorkQueue,
    alive_workers,
    live_workers,
    transport,
)
from servers import Proc

ITEMS = 12
#: The item whose handler fails on its first try.
FLAKY = "i3"
OPTIONS: dict[str, Any] = {
    "lease_secs": 10,
    "concurrency": 3,
    "backoff": 0.01,
    "max_backoff": 0.05,
    "poll_secs": 0.1,
    "heartbeat_secs": 0.2,
}
SYNC_PATHS = ["public", "auto"] + (["lean"] if transport.lean_available(redis.Redis()) else [])
ASYNC_PATHS = ["public", "auto"] + (
    ["lean"] if transport.lean_available(redis.asyncio.Redis()) else []
)
DEADLINE_SECS = 30.0


class Handled:
    """What a handler saw: each id and how many times."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self.lock = threading.Lock()

    def take(self, item: Item) -> None:
        with self.lock:
            self.seen[item.id()] += 1
            first = self.seen[item.id()] == 1
        if item.id() == FLAKY and first:
            raise RuntimeError("the first try fails")

    def check(self) -> None:
        expected = {f"i{n}": 2 if f"i{n}" == FLAKY else 1 for n in range(ITEMS)}
        assert dict(self.seen) == expected


def items() -> list[Item]:
    return [Item(f"data {n}".encode(), id=f"i{n}") for n in range(ITEMS)]


def wait_until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_SECS
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def drained(counts: Any, stats: QueueStats) -> bool:
    return counts.completed == ITEMS and stats == QueueStats(0, 0, 0, 0, 0)


@pytest.fixture
def db_server(redis_server: Proc) -> Proc:
    redis_server.admin().flushall()
    return redis_server


@pytest.mark.parametrize("path", SYNC_PATHS)
def test_worker_threads_drain_a_queue(db_server: Proc, routes: ScriptRoutes, path: str) -> None:
    db = redis.Redis(host=db_server.host, port=db_server.port, max_connections=10)
    transport.use(db, path)  # type: ignore[arg-type]
    queue = WorkQueue(KeyPrefix("work"))
    assert queue.add_items(db, items()) == [True] * ITEMS
    handled = Handled()
    worker = Worker(db, [queue], handled.take, **OPTIONS)
    outcome: list[Any] = []
    runner = threading.Thread(target=lambda: outcome.append(worker.run(signals=())), daemon=True)
    runner.start()
    try:
        wait_until(lambda: bool(live_workers(db, queue)), "the worker's heartbeat")
        (seen,) = live_workers(db, queue)
        assert (seen.id, seen.pid, seen.queues) == (worker.worker_id, os.getpid(), ("work",))
        wait_until(lambda: drained(queue.counts(db), queue.stats(db)), "the queue to drain")
    finally:
        worker.stop()
        runner.join(timeout=DEADLINE_SECS)
    (stats,) = outcome
    assert (stats.completed, stats.failed, stats.lost) == (ITEMS, 1, 0)
    handled.check()
    counts = queue.counts(db)
    assert (counts.added, counts.completed, counts.failed, counts.retried) == (ITEMS, ITEMS, 1, 1)
    assert live_workers(db, queue) == []
    routes.expect(f"Worker/{path}", db, path)
    db.close()


def handle_in_a_process(item: Item) -> None:
    """A worker process's handler (importable by name): it fails the first try of one item."""
    if item.id() == FLAKY and item.deliveries == 1:
        raise RuntimeError("the first try fails")


def test_worker_processes_drain_a_queue(db_server: Proc) -> None:
    db = redis.Redis(host=db_server.host, port=db_server.port)
    queue = WorkQueue(KeyPrefix("procs"))
    queue.add_items(db, items())
    options = {**OPTIONS, "concurrency": 2}
    worker = Worker(db_server.url, [queue], handle_in_a_process, processes=True, **options)
    outcome: list[Any] = []
    runner = threading.Thread(target=lambda: outcome.append(worker.run(signals=())), daemon=True)
    runner.start()
    try:
        wait_until(lambda: drained(queue.counts(db), queue.stats(db)), "the queue to drain")
    finally:
        worker.stop()
        runner.join(timeout=DEADLINE_SECS)
    (stats,) = outcome
    assert (stats.completed, stats.failed, stats.lost) == (ITEMS, 1, 0)
    counts = queue.counts(db)
    assert (counts.added, counts.completed, counts.failed, counts.retried) == (ITEMS, ITEMS, 1, 1)
    db.close()


@pytest.mark.parametrize("path", ASYNC_PATHS)
def test_async_worker_drains_a_queue(db_server: Proc, routes: ScriptRoutes, path: str) -> None:
    handled = Handled()

    async def handle(item: Item) -> None:
        await asyncio.sleep(0)
        handled.take(item)

    async def main() -> Any:
        db = redis.asyncio.Redis(host=db_server.host, port=db_server.port, max_connections=10)
        transport.use(db, path)  # type: ignore[arg-type]
        queue = AsyncWorkQueue(KeyPrefix("awork"))
        assert await queue.add_items(db, items()) == [True] * ITEMS
        worker = AsyncWorker(db, [queue], handle, **OPTIONS)
        running = asyncio.create_task(worker.run(signals=()))
        deadline = time.monotonic() + DEADLINE_SECS
        try:
            while not await alive_workers(db, queue):
                assert time.monotonic() < deadline, "timed out waiting for the heartbeat"
                await asyncio.sleep(0.02)
            (seen,) = await alive_workers(db, queue)
            assert (seen.id, seen.queues) == (worker.worker_id, ("awork",))
            while not drained(await queue.counts(db), await queue.stats(db)):
                assert time.monotonic() < deadline, "timed out waiting for the queue to drain"
                await asyncio.sleep(0.02)
        finally:
            worker.stop()
            stats = await asyncio.wait_for(running, DEADLINE_SECS)
        counts = await queue.counts(db)
        left = await alive_workers(db, queue)
        routes.expect(f"AsyncWorker/{path}", db, path)
        await aclose(db)
        return stats, counts, left

    stats, counts, left = asyncio.run(main())
    assert (stats.completed, stats.failed, stats.lost) == (ITEMS, 1, 0)
    handled.check()
    assert (counts.added, counts.completed, counts.failed, counts.retried) == (ITEMS, ITEMS, 1, 1)
    assert left == []
