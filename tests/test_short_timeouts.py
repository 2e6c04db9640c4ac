"""A blocking lease's timeout below one millisecond is a short wait, never "wait for ever".

Redis reads a blocking timeout of 0 as "no limit": a timeout that rounded down to 0 ms would
block for ever. Each call runs in a thread of its own with a deadline, so a call that blocks
for ever fails its test instead of hanging the suite.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.asyncio as aredis

from redis_work_queue import (
    AsyncWorker,
    AsyncWorkQueue,
    InvalidArgumentError,
    KeyPrefix,
    Worker,
    WorkQueue,
    lease_from,
)
from redis_work_queue.ops.lease import LeaseRequest
from servers import Proc

P = KeyPrefix("short")
OTHER = KeyPrefix("short-b")
TINY = (0.0004, 0.0001, 1e-9)
#: Far longer than a short wait, far shorter than for ever.
DEADLINE_SECS = 5.0


def returns_soon(call: Callable[[], Any]) -> Any:
    """Run ``call`` in a thread; fail when it has not returned within the deadline."""
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["value"] = call()
        except BaseException as err:  # reported below
            out["error"] = err

    thread = threading.Thread(target=target, daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(DEADLINE_SECS)
    assert not thread.is_alive(), "the blocking lease did not return: it waited for ever"
    assert time.monotonic() - started < DEADLINE_SECS
    if "error" in out:
        raise out["error"]
    return out.get("value")


@pytest.mark.parametrize("timeout", TINY)
def test_a_tiny_timeout_is_at_least_one_millisecond(timeout: float) -> None:
    assert LeaseRequest.of(30, block=True, timeout=timeout).timeout_ms == 1
    assert LeaseRequest.of(30, block=True, timeout=0).timeout_ms == 0  # 0 is "for ever"


def _sync_calls(url: str) -> dict[str, Callable[[float], Any]]:
    db = redis.Redis.from_url(url)
    queue, other = WorkQueue(P), WorkQueue(OTHER)
    return {
        "lease": lambda t: queue.lease(db, 30, block=True, timeout=t),
        "lease_many": lambda t: queue.lease_many(db, 30, 5, block=True, timeout=t),
        "lease_from": lambda t: lease_from(db, [queue, other], 30, block=True, timeout=t),
        "lease_from one queue": lambda t: lease_from(db, [queue], 30, block=True, timeout=t),
    }


def _asyncio_calls(url: str) -> dict[str, Callable[[float], Any]]:
    from redis_work_queue.aio import lease_from as alease_from  # noqa: PLC0415

    queue, other = AsyncWorkQueue(P), AsyncWorkQueue(OTHER)

    def on_a_loop(make: Callable[[aredis.Redis, float], Any]) -> Callable[[float], Any]:
        async def go(timeout: float) -> Any:
            db = aredis.Redis.from_url(url)
            try:
                return await make(db, timeout)
            finally:
                await db.aclose()

        return lambda t: asyncio.run(go(t))

    return {
        "lease": on_a_loop(lambda db, t: queue.lease(db, 30, block=True, timeout=t)),
        "lease_many": on_a_loop(lambda db, t: queue.lease_many(db, 30, 5, block=True, timeout=t)),
        "lease_from": on_a_loop(
            lambda db, t: alease_from(db, [queue, other], 30, block=True, timeout=t)
        ),
        "lease_from one queue": on_a_loop(
            lambda db, t: alease_from(db, [queue], 30, block=True, timeout=t)
        ),
    }


@pytest.mark.parametrize("api", ["sync", "asyncio"])
@pytest.mark.parametrize("call", ["lease", "lease_many", "lease_from", "lease_from one queue"])
def test_a_blocking_lease_with_a_tiny_timeout_returns_at_once(
    redis_server: Proc, api: str, call: str
) -> None:
    calls = _sync_calls(redis_server.url) if api == "sync" else _asyncio_calls(redis_server.url)
    for timeout in TINY:
        got = returns_soon(lambda: calls[call](timeout))  # noqa: B023 (called at once)
        assert got in (None, []), got


@pytest.mark.parametrize("runner", [Worker, AsyncWorker])
@pytest.mark.parametrize("poll_secs", TINY)
def test_a_worker_refuses_a_poll_shorter_than_its_minimum(
    redis_server: Proc, runner: type, poll_secs: float
) -> None:
    """A poll this short would poll Redis without pause (or, rounded to 0, block for ever and
    never see stop())."""
    if runner is Worker:
        queues: list[Any] = [WorkQueue(P)]
        target: Any = redis_server.url
    else:
        queues, target = [AsyncWorkQueue(P)], aredis.Redis.from_url(redis_server.url)
    with pytest.raises(InvalidArgumentError, match="poll_secs must be at least"):
        runner(target, queues, print, poll_secs=poll_secs)


def test_a_worker_with_the_shortest_poll_stops_when_asked(redis_server: Proc) -> None:
    worker = Worker(redis_server.url, [WorkQueue(P)], lambda item: None, poll_secs=0.01)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    time.sleep(0.3)
    worker.stop()
    thread.join(DEADLINE_SECS)
    assert not thread.is_alive(), "stop() was not honoured"
