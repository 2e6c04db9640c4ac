"""The batching runner: the slots of one worker lease together and complete together.

Every guarantee of the runner holds with batching (the default with several threads or
tasks): each item completed once and counted once, failures and timeouts per item, and a worker
killed while completions wait to be written loses nothing and completes nothing twice.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from redis_work_queue import (
    AsyncWorker,
    AsyncWorkQueue,
    InvalidArgumentError,
    Item,
    KeyPrefix,
    Worker,
    WorkQueue,
)
from redis_work_queue.runner import batching
from servers import Proc

ROOT = Path(__file__).resolve().parents[1]
N = 120
WAIT_SECS = 60


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, list[int]]]:
    """The sizes of the slot set's leases and of its completion writes."""
    sizes: dict[str, list[int]] = {"lease": [], "write": []}
    lease, write = batching.Batch._lease, batching.Batch.write

    def spy_lease(self: batching.Batch, count: int, block: bool) -> Any:
        got = yield from lease(self, count, block)
        if isinstance(got, list):
            sizes["lease"].append(len(got))
        return got

    def spy_write(self: batching.Batch, jobs: Any) -> Any:
        sizes["write"].append(len(jobs))
        return (yield from write(self, jobs))

    monkeypatch.setattr(batching.Batch, "_lease", spy_lease)
    monkeypatch.setattr(batching.Batch, "write", spy_write)
    yield sizes


def fill(db: redis.Redis, prefix: str, n: int, data: bytes = b"ok") -> list[str]:
    q = WorkQueue(KeyPrefix(prefix))
    items = [Item(data, id=f"i{k}") for k in range(n)]
    assert q.add_items(db, items) == [True] * n
    return [item.id() for item in items]


def wait_until(check: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_SECS
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@pytest.mark.real_redis
def test_threads_lease_and_complete_together(
    real_db: redis.Redis, redis_url: str, recorded: dict[str, list[int]]
) -> None:
    ids = fill(real_db, "bt", N)
    handled: list[str] = []
    lock = threading.Lock()

    def handle(item: Item) -> None:
        time.sleep(0.002)
        with lock:
            handled.append(item.id())

    q = WorkQueue(KeyPrefix("bt"))
    worker = Worker(redis_url, [q], handle, concurrency=6, poll_secs=0.1)
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(worker.run(signals=())))
    thread.start()
    try:
        wait_until(lambda: q.queue_len(real_db) == 0 and q.processing(real_db) == 0, "a drain")
    finally:
        worker.stop()
        thread.join(WAIT_SECS)
    stats = out[0]
    assert (stats.completed, stats.failed, stats.lost) == (N, 0, 0)
    assert sorted(handled) == sorted(ids)  # each item handled once
    assert sum(recorded["write"]) == N and sum(recorded["lease"]) == N
    assert max(recorded["write"]) > 1 and max(recorded["lease"]) > 1  # grouped calls
    assert len(recorded["write"]) < N and len(recorded["lease"]) < N


@pytest.mark.real_redis
def test_asyncio_tasks_lease_and_complete_together(
    real_db: redis.Redis, redis_url: str, recorded: dict[str, list[int]]
) -> None:
    ids = fill(real_db, "ba", N)
    handled: list[str] = []

    async def handle(item: Item) -> None:
        await asyncio.sleep(0.002)
        handled.append(item.id())

    async def main() -> Any:
        q = AsyncWorkQueue(KeyPrefix("ba"))
        worker = AsyncWorker(redis_url, [q], handle, concurrency=8, poll_secs=0.1)
        task = asyncio.create_task(worker.run(signals=()))
        deadline = time.monotonic() + WAIT_SECS
        sync = WorkQueue(KeyPrefix("ba"))
        while sync.queue_len(real_db) or sync.processing(real_db):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        worker.stop()
        return await task

    stats = asyncio.run(main())
    assert (stats.completed, stats.failed, stats.lost) == (N, 0, 0)
    assert sorted(handled) == sorted(ids)
    assert sum(recorded["write"]) == N and max(recorded["write"]) > 1
    assert max(recorded["lease"]) > 1


@pytest.mark.real_redis
@pytest.mark.parametrize("api", ["threads", "asyncio"])
@pytest.mark.parametrize("concurrency", [1, 4])
def test_fast_handlers_run_inline_several_items_per_call(
    real_db: redis.Redis,
    redis_url: str,
    recorded: dict[str, list[int]],
    api: str,
    concurrency: int,
) -> None:
    """A no-op handler's items run in the slot that leased them, 8 or more per call."""
    prefix = f"bf{api}{concurrency}"
    ids = fill(real_db, prefix, N)
    handled: list[str] = []
    deliveries: list[int] = []

    def handle(item: Item) -> None:
        handled.append(item.id())
        deliveries.append(item.deliveries)

    async def ahandle(item: Item) -> None:
        handle(item)

    stats = run_until_drained(real_db, prefix, api, handle, ahandle, concurrency=concurrency)
    assert (stats.completed, stats.failed, stats.lost) == (N, 0, 0)
    assert sorted(handled) == sorted(ids) and set(deliveries) == {1}
    assert sum(recorded["write"]) == N and sum(recorded["lease"]) == N
    assert max(recorded["lease"]) >= batching.INLINE_COUNT
    assert max(recorded["write"]) >= batching.INLINE_COUNT
    assert len(recorded["lease"]) + len(recorded["write"]) <= N // 2


@pytest.mark.real_redis
@pytest.mark.parametrize("api", ["threads", "asyncio"])
def test_items_behind_a_handler_turned_slow_are_given_back(
    real_db: redis.Redis, redis_url: str, api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One slot, fast handlers, then a slow one: the items leased with it go back unstarted.

    The watchdog gives them back at the front of the queue (their delivery undone) and writes
    the completions handed over before the slow handler; the slot takes them up afterwards.
    """
    from redis_work_queue.runner.core import Core  # noqa: PLC0415

    given: list[str] = []
    give_back = Core.give_back

    def spy(self: Core, queue: Any, item: Item, reason: str = "worker stopping") -> Any:
        given.append(reason)
        return (yield from give_back(self, queue, item, reason))

    monkeypatch.setattr(Core, "give_back", spy)
    prefix = f"bs{api}"
    n = 40
    ids = fill(real_db, prefix, n)
    q = WorkQueue(KeyPrefix(prefix))
    handled: list[tuple[str, int]] = []
    completed_while_slow: list[int] = []

    def handle(item: Item) -> None:
        handled.append((item.id(), item.deliveries))
        if len(handled) == 20:  # fast until then: the slot runs its items inline
            time.sleep(1.0)
            completed_while_slow.append(n - q.queue_len(real_db) - q.processing(real_db))

    async def ahandle(item: Item) -> None:
        handled.append((item.id(), item.deliveries))
        if len(handled) == 20:
            await asyncio.sleep(1.0)
            completed_while_slow.append(n - q.queue_len(real_db) - q.processing(real_db))

    stats = run_until_drained(real_db, prefix, api, handle, ahandle, concurrency=1)
    assert (stats.completed, stats.failed, stats.lost) == (n, 0, 0)
    assert sorted(i for i, _ in handled) == sorted(ids)  # each once
    assert {d for _, d in handled} == {1}  # a give-back undoes the delivery
    assert "not started in time" in given
    # The completions handed over before the slow handler were written while it ran.
    assert completed_while_slow == [19]


def run_until_drained(
    db: redis.Redis, prefix: str, api: str, handle: Any, ahandle: Any, **options: Any
) -> Any:
    """Run a worker on ``prefix`` until its queue is drained; its stats."""
    options = {"poll_secs": 0.1, "lease_secs": 10, **options}
    q = WorkQueue(KeyPrefix(prefix))

    def drained() -> bool:
        return q.queue_len(db) == 0 and q.processing(db) == 0

    url = db_url(db)
    if api == "asyncio":

        async def main() -> Any:
            worker = AsyncWorker(url, [AsyncWorkQueue(KeyPrefix(prefix))], ahandle, **options)
            task = asyncio.create_task(worker.run(signals=()))
            deadline = time.monotonic() + WAIT_SECS
            while not drained():
                assert time.monotonic() < deadline and not task.done()
                await asyncio.sleep(0.01)
            worker.stop()
            return await task

        return asyncio.run(main())
    worker = Worker(url, [q], handle, **options)
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(worker.run(signals=())))
    thread.start()
    try:
        wait_until(drained, "a drain")
    finally:
        worker.stop()
        thread.join(WAIT_SECS)
    return out[0]


def db_url(db: redis.Redis) -> str:
    kwargs = db.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}/{kwargs.get('db', 0)}"


@pytest.mark.real_redis
@pytest.mark.parametrize("api", ["threads", "asyncio"])
def test_failures_and_timeouts_stay_per_item(
    real_db: redis.Redis, redis_url: str, api: str
) -> None:
    """Some items fail, one runs past its timeout: each is released on its own, with its
    reason; the others are completed together."""
    n = 40
    fill(real_db, "bf", n)
    q = WorkQueue(KeyPrefix("bf"), max_deliveries=1)

    def outcome(item_id: str) -> str:
        k = int(item_id[1:])
        return "slow" if k == 7 else "fail" if k % 5 == 0 else "ok"

    def handle(item: Item) -> None:
        kind = outcome(item.id())
        if kind == "slow":
            time.sleep(1.5)
        elif kind == "fail":
            raise ValueError(f"no {item.id()}")

    async def ahandle(item: Item) -> None:
        kind = outcome(item.id())
        if kind == "slow":
            await asyncio.sleep(1.5)
        elif kind == "fail":
            raise ValueError(f"no {item.id()}")

    options: dict[str, Any] = {"concurrency": 4, "poll_secs": 0.1, "timeout": 0.5}
    if api == "threads":
        worker: Any = Worker(redis_url, [q], handle, **options)
        out: list[Any] = []
        thread = threading.Thread(target=lambda: out.append(worker.run(signals=())))
        thread.start()
        try:
            wait_until(lambda: q.dead_count(real_db) == 9, "the failures to be buried")
            wait_until(lambda: q.queue_len(real_db) == 0 and q.processing(real_db) == 0, "drain")
        finally:
            worker.stop()
            thread.join(WAIT_SECS)
        stats = out[0]
    else:

        async def main() -> Any:
            aq = AsyncWorkQueue(KeyPrefix("bf"), max_deliveries=1)
            worker = AsyncWorker(redis_url, [aq], ahandle, **options)
            task = asyncio.create_task(worker.run(signals=()))
            deadline = time.monotonic() + WAIT_SECS
            while q.dead_count(real_db) < 9 or q.processing(real_db) or q.queue_len(real_db):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            worker.stop()
            return await task

        stats = asyncio.run(main())
    assert (stats.completed, stats.failed, stats.timed_out) == (n - 9, 9, 1)
    dead = {d.id: d.reason for d in q.dead_letters(real_db, 0, 20)}
    assert set(dead) == {"i7", *(f"i{k}" for k in range(0, n, 5))}
    assert "timeout" in (dead["i7"] or "").lower()
    assert "ValueError: no i5" in (dead["i5"] or "")


def test_batch_is_checked_and_can_be_turned_off(redis_url: str = "redis://127.0.0.1:1/0") -> None:
    q = WorkQueue(KeyPrefix("bo"))
    with pytest.raises(InvalidArgumentError, match="batch must be True or False"):
        Worker(redis_url, [q], print, concurrency=2, batch="yes")  # type: ignore[arg-type]
    assert Worker(redis_url, [q], print, concurrency=2).options.batch is True
    assert Worker(redis_url, [q], print, concurrency=2, batch=False).options.batch is False


@pytest.mark.real_redis
def test_without_batching_no_slot_set_is_shared(
    real_db: redis.Redis, redis_url: str, recorded: dict[str, list[int]]
) -> None:
    fill(real_db, "bn", 30)
    q = WorkQueue(KeyPrefix("bn"))
    worker = Worker(redis_url, [q], lambda item: None, concurrency=4, poll_secs=0.1, batch=False)
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(worker.run(signals=())))
    thread.start()
    try:
        wait_until(lambda: q.queue_len(real_db) == 0 and q.processing(real_db) == 0, "a drain")
    finally:
        worker.stop()
        thread.join(WAIT_SECS)
    assert out[0].completed == 30
    assert recorded == {"lease": [], "write": []}


KILLED_WORKER = textwrap.dedent(
    """
    import os, signal, sys
    from redis_work_queue import KeyPrefix, Worker, WorkQueue
    from redis_work_queue.runner import batching

    write = batching.Batch.write

    def write_then_die(self, jobs):
        if len(jobs) > 1 or os.environ.get("KILL_AT_ONE"):
            os.kill(os.getpid(), signal.SIGKILL)  # completions handed over, none written
        return (yield from write(self, jobs))

    batching.Batch.write = write_then_die
    queue = WorkQueue(KeyPrefix("bk"))
    worker = Worker(sys.argv[1], [queue], lambda item: None, concurrency=4, lease_secs=1,
                    poll_secs=0.1, clean_secs=None, heartbeat_secs=None)
    worker.run(signals=())
    """
)


@pytest.mark.real_redis
def test_a_worker_killed_holding_grouped_completions_loses_nothing(
    real_db: redis.Redis, redis_url: str, redis_server: Proc, tmp_path: Path
) -> None:
    n = 60
    ids = fill(real_db, "bk", n)
    q = WorkQueue(KeyPrefix("bk"))
    script = tmp_path / "killed.py"
    script.write_text(KILLED_WORKER, "utf-8")
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}", "KILL_AT_ONE": "1"}
    done = subprocess.run(
        [sys.executable, str(script), redis_url], env=env, timeout=WAIT_SECS, check=False
    )
    assert done.returncode == -signal.SIGKILL
    # Nothing was completed: every item is still there, queued or leased.
    assert q.queue_len(real_db) + q.processing(real_db) == n
    assert all(real_db.exists(q.keys.item(i)) for i in ids)
    time.sleep(1.2)  # the killed worker's leases run out
    assert q.light_clean(real_db).requeued >= 1
    handled: list[str] = []
    lock = threading.Lock()

    def handle(item: Item) -> None:
        with lock:
            handled.append(item.id())

    worker = Worker(redis_url, [q], handle, concurrency=4, poll_secs=0.1)
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(worker.run(signals=())))
    thread.start()
    try:
        wait_until(lambda: q.queue_len(real_db) == 0 and q.processing(real_db) == 0, "a drain")
    finally:
        worker.stop()
        thread.join(WAIT_SECS)
    # Every item completed exactly once, by the second worker.
    assert (out[0].completed, out[0].lost) == (n, 0)
    assert sorted(handled) == sorted(ids)
    assert not any(real_db.exists(q.keys.item(i)) for i in ids)


def test_rwq_worker_turns_batching_off() -> None:
    from redis_work_queue import cli  # noqa: PLC0415 - the command line only here

    parser = cli.build_parser()
    assert parser.parse_args(["worker", "mod:fn", "q", "--no-batch"]).no_batch is True
    assert parser.parse_args(["worker", "mod:fn", "q"]).no_batch is False
