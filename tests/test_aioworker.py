"""AsyncWorker: the runner for ``async def`` handlers, on the cases of the threaded runner that
apply to tasks: draining exactly once with concurrent tasks, priority, renewal of a job longer
than its lease, retries with backoff into dead letters, stop() and a signal in a real process.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aredis

from helpers import wait_for
from redis_work_queue import (
    AsyncWorker,
    AsyncWorkQueue,
    InvalidArgumentError,
    Item,
    KeyPrefix,
    WorkQueue,
)

P = "aw"
TESTS_DIR = Path(__file__).resolve().parent


def record(db: redis.Redis, item_id: str) -> int:
    return int(db.hincrby(f"{P}:calls", item_id, 1))


async def run_until(worker: AsyncWorker, done: Any, timeout: float = 20.0) -> Any:
    """Run the worker until ``done()`` (a coroutine function) is true, then stop it."""

    async def stopper() -> None:
        deadline = time.monotonic() + timeout
        while not await done():
            assert time.monotonic() < deadline, "the worker did not finish in time"
            await asyncio.sleep(0.02)
        worker.stop()

    stop_task = asyncio.create_task(stopper())
    stats = await asyncio.wait_for(worker.run(signals=()), timeout + 10)
    await stop_task
    return stats


def test_bad_arguments() -> None:
    queue = AsyncWorkQueue(KeyPrefix(P))

    async def handler(item: Item) -> None:
        pass

    with pytest.raises(InvalidArgumentError):
        AsyncWorker("redis://127.0.0.1:1", [], handler)
    with pytest.raises(InvalidArgumentError):
        AsyncWorker("redis://127.0.0.1:1", [WorkQueue(KeyPrefix(P))], handler)  # type: ignore[list-item]
    with pytest.raises(InvalidArgumentError):
        AsyncWorker("redis://127.0.0.1:1", [queue], handler, concurrency=0)


def test_tasks_drain_each_item_exactly_once(real_db: redis.Redis, redis_url: str) -> None:
    sync = WorkQueue(KeyPrefix(P))
    sync.add_items(real_db, [Item(b"", id=f"i{n}") for n in range(300)])

    async def main() -> Any:
        db = aredis.Redis.from_url(redis_url)
        queue = AsyncWorkQueue(KeyPrefix(P))

        async def handler(item: Item) -> None:
            await db.hincrby(f"{P}:calls", item.id(), 1)
            await asyncio.sleep(0.001)

        async def done() -> bool:
            stats = await queue.stats(db)
            return stats.queued == stats.leased == 0

        worker = AsyncWorker(db, [queue], handler, concurrency=20, lease_secs=10)
        return await run_until(worker, done)

    stats = asyncio.run(main())
    calls = {k.decode(): int(v) for k, v in real_db.hgetall(f"{P}:calls").items()}
    assert calls == {f"i{n}": 1 for n in range(300)}
    assert (stats.completed, stats.failed, stats.lost) == (300, 0, 0)
    assert sync.stats(real_db).queued == 0


def test_higher_priority_queue_first(real_db: redis.Redis, redis_url: str) -> None:
    high, low = WorkQueue(KeyPrefix(f"{P}:hi")), WorkQueue(KeyPrefix(f"{P}:lo"))
    low.add_items(real_db, [Item(b"", id=f"lo{n}") for n in range(5)])
    high.add_items(real_db, [Item(b"", id=f"hi{n}") for n in range(5)])

    async def main() -> None:
        db = aredis.Redis.from_url(redis_url)
        queues = [AsyncWorkQueue(KeyPrefix(f"{P}:hi")), AsyncWorkQueue(KeyPrefix(f"{P}:lo"))]

        async def handler(item: Item) -> None:
            await db.rpush(f"{P}:order", item.id())

        async def done() -> bool:
            return int(await db.llen(f"{P}:order")) == 10

        await run_until(AsyncWorker(db, queues, handler, concurrency=1), done)

    asyncio.run(main())
    order = [v.decode() for v in real_db.lrange(f"{P}:order", 0, -1)]
    assert order[:5] == [f"hi{n}" for n in range(5)]
    assert sorted(order[5:]) == [f"lo{n}" for n in range(5)]


def test_job_longer_than_its_lease_is_renewed_and_delivered_once(
    real_db: redis.Redis, redis_url: str
) -> None:
    sync = WorkQueue(KeyPrefix(P))
    sync.add_item(real_db, Item(b"", id="long"))
    cleaner = redis.Redis.from_url(redis_url)

    async def main() -> Any:
        db = aredis.Redis.from_url(redis_url)
        queue = AsyncWorkQueue(KeyPrefix(P))

        async def handler(item: Item) -> None:
            record(cleaner, item.id())
            for _ in range(25):  # 2.5 s against a 0.6 s lease, with a light clean every 0.1 s
                await asyncio.sleep(0.1)
                sync.light_clean(cleaner)

        async def done() -> bool:
            return int(await db.hlen(f"{P}:calls")) == 1 and await queue.processing(db) == 0

        return await run_until(AsyncWorker(db, [queue], handler, lease_secs=0.6), done)

    stats = asyncio.run(main())
    assert real_db.hget(f"{P}:calls", "long") == b"1"
    assert (stats.completed, stats.lost) == (1, 0)


def test_failures_back_off_then_dead_letter(real_db: redis.Redis, redis_url: str) -> None:
    sync = WorkQueue(KeyPrefix(P), max_deliveries=3)
    sync.add_item(real_db, Item(b"x", id="bad"))

    async def main() -> Any:
        db = aredis.Redis.from_url(redis_url)
        queue = AsyncWorkQueue(KeyPrefix(P), max_deliveries=3)

        async def handler(item: Item) -> None:
            await db.rpush(f"{P}:tries", f"{item.deliveries}:{time.monotonic()}")
            raise RuntimeError("always fails")

        async def done() -> bool:
            return await queue.dead_count(db) == 1

        worker = AsyncWorker(db, [queue], handler, backoff=0.1, poll_secs=0.1)
        return await run_until(worker, done)

    stats = asyncio.run(main())
    tries = [v.decode().split(":") for v in real_db.lrange(f"{P}:tries", 0, -1)]
    assert [int(d) for d, _ in tries] == [1, 2, 3]
    gaps = [float(b[1]) - float(a[1]) for a, b in itertools.pairwise(tries)]
    assert gaps[0] >= 0.1 and gaps[1] >= 0.2  # exponential backoff
    [dead] = sync.dead_letters(real_db)
    assert (dead.id, dead.deliveries) == ("bad", 3)
    assert dead.reason is not None
    assert dead.reason.startswith("RuntimeError: always fails\nTraceback (most recent call last):")
    assert 'in handler\n    raise RuntimeError("always fails")' in dead.reason
    assert stats.failed == 3


SIGTERM_SCRIPT = """
import asyncio, sys
import redis.asyncio as aredis
from redis_work_queue import AsyncWorker, AsyncWorkQueue, KeyPrefix

async def main(url):
    db = aredis.Redis.from_url(url)
    queue = AsyncWorkQueue(KeyPrefix("aw"))

    async def handler(item):
        await db.set("aw:started:" + item.id(), 1)
        await asyncio.sleep(1.0)
        await db.set("aw:finished:" + item.id(), 1)

    stats = await AsyncWorker(db, [queue], handler, concurrency=2, poll_secs=0.1).run()
    print("stats", stats.completed, flush=True)

asyncio.run(main(sys.argv[1]))
"""


def test_sigterm_finishes_running_jobs_and_leases_no_more(
    real_db: redis.Redis, redis_url: str
) -> None:
    sync = WorkQueue(KeyPrefix(P))
    sync.add_items(real_db, [Item(b"", id=f"j{n}") for n in range(6)])
    proc = subprocess.Popen(
        [sys.executable, "-c", SIGTERM_SCRIPT, redis_url],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(TESTS_DIR)},
    )
    try:
        wait_for(lambda: len(real_db.keys(f"{P}:started:*")) == 2, timeout=15, what="2 jobs")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
    assert proc.returncode == 0
    assert "stats 2" in out
    assert len(real_db.keys(f"{P}:finished:*")) == 2
    stats = sync.stats(real_db)
    assert (stats.queued, stats.leased, stats.expired) == (4, 0, 0)
