"""Synchronous replication (Disque's REPLICATE): adds and completes that wait for replicas.

A real primary and replica are started by the fixture (``servers.replica_pair``). A paused
replica (SIGSTOP) never acknowledges: the write reaches the primary, and the call raises
ReplicationError once ``replica_timeout`` has passed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio

from redis_work_queue import (
    AsyncWorkQueue,
    InvalidArgumentError,
    Item,
    KeyPrefix,
    ReplicationError,
    WorkQueue,
)
from servers import Proc, ReplicaPair, info

pytestmark = pytest.mark.real_redis

P = KeyPrefix("repl")


@pytest.fixture
def pair(replica_pair: ReplicaPair) -> ReplicaPair:
    """The pair, emptied and in sync."""
    replica_pair.reset()
    return replica_pair


@pytest.fixture
def primary(pair: ReplicaPair) -> redis.Redis:
    return pair.primary.client()


@pytest.fixture
def replica(pair: ReplicaPair) -> redis.Redis:
    """A client of the replica (reads only)."""
    return pair.replica.client()


@pytest.fixture
def paused(pair: ReplicaPair) -> Iterator[Proc]:
    """The replica, stopped with SIGSTOP for the test (and always continued afterwards)."""
    pair.replica.pause()
    try:
        yield pair.replica
    finally:
        pair.replica.resume()


def waits(db: redis.Redis) -> int:
    """How many WAIT commands the server has run since its stats were reset."""
    stats = db.info("commandstats")
    return int(stats.get("cmdstat_wait", {}).get("calls", 0))


def test_add_and_complete_wait_for_one_replica(primary: redis.Redis, replica: redis.Redis) -> None:
    q = WorkQueue(P, replicas=1)
    primary.config_resetstat()
    assert q.add_item(primary, Item(b"one", id="one")) is True
    # WAIT returned: the replica has applied the add already, no polling needed.
    assert replica.get("repl:item:one") == b"one"
    assert replica.lrange("repl:queue", 0, -1) == [b"one"]
    q.add_unique_item(primary, Item(b"two", id="two"))
    assert q.add_items(primary, [Item(b"3", id="three"), Item(b"x", id="one")]) == [True, False]
    assert replica.llen("repl:queue") == 3
    leased = q.lease_many(primary, 30, 3, block=False)
    assert len(leased) == 3
    assert q.complete(primary, leased[0]) is True
    assert replica.exists("repl:item:one") == 0
    assert [i.id() for i in q.complete_many(primary, leased)] == ["two", "three"]
    assert replica.exists("repl:item:two", "repl:item:three") == 0
    assert waits(primary) == 5  # one WAIT per add or complete call (leases do not wait)


def test_per_queue_and_per_call_settings(pair: ReplicaPair, primary: redis.Redis) -> None:
    plain = WorkQueue(P)
    waiting = WorkQueue(P, replicas=1)
    primary.config_resetstat()
    plain.add_item(primary, Item(b"", id="a"))
    assert waits(primary) == 0
    plain.add_item(primary, Item(b"", id="b"), replicas=1)  # the call overrides the queue
    assert waits(primary) == 1
    waiting.add_item(primary, Item(b"", id="c"))
    assert waits(primary) == 2
    waiting.add_item(primary, Item(b"", id="d"), replicas=0)  # replicas=0 disables the wait
    assert waits(primary) == 2
    item = waiting.lease(primary, 30, block=False)
    assert item is not None
    assert waiting.complete(primary, item, replicas=0) is True
    assert waits(primary) == 2
    item = plain.lease(primary, 30, block=False)
    assert item is not None
    assert plain.complete(primary, item, replicas=1) is True
    assert waits(primary) == 3
    # Asking for more replicas than there are: the write is done, the error says so.
    with pytest.raises(ReplicationError) as raised:
        plain.add_item(primary, Item(b"", id="e"), replicas=2)
    assert (raised.value.acked, raised.value.wanted, raised.value.result) == (1, 2, True)
    assert primary.exists("repl:item:e") == 1


def test_settings_are_checked() -> None:
    for bad in (-1, 1.5, True, "1"):
        with pytest.raises(InvalidArgumentError):
            WorkQueue(P, replicas=bad)  # type: ignore[arg-type]
    for bad_timeout in (0, -1, float("nan")):
        with pytest.raises(InvalidArgumentError):
            WorkQueue(P, replicas=1, replica_timeout=bad_timeout)


def test_paused_replica_add_raises_after_the_timeout(primary: redis.Redis, paused: Proc) -> None:
    q = WorkQueue(P)
    started = time.monotonic()
    with pytest.raises(ReplicationError) as raised:
        q.add_item(primary, Item(b"data", id="x"), replicas=1)
    elapsed = time.monotonic() - started
    assert 0.9 <= elapsed < 5  # the queue's replica_timeout: 1 s by default
    err = raised.value
    assert (err.acked, err.wanted, err.result) == (0, 1, True)
    message = str(err)
    assert "reached the primary" in message
    assert "0 of 1 replicas" in message
    assert "1000 ms" in message
    # The write is on the primary, not undone.
    assert primary.get("repl:item:x") == b"data"
    assert primary.lrange("repl:queue", 0, -1) == [b"x"]


def test_paused_replica_with_a_short_queue_timeout(primary: redis.Redis, paused: Proc) -> None:
    q = WorkQueue(P, replicas=1, replica_timeout=0.2)
    started = time.monotonic()
    with pytest.raises(ReplicationError) as raised:
        q.add_item(primary, Item(b"d", id="y"))
    assert 0.15 <= time.monotonic() - started < 2
    assert (raised.value.acked, raised.value.wanted, raised.value.result) == (0, 1, True)
    assert primary.exists("repl:item:y") == 1
    # An id that exists already: nothing written, and the error says the add did nothing.
    with pytest.raises(ReplicationError) as again:
        q.add_item(primary, Item(b"d", id="y"))
    assert again.value.result is False
    with pytest.raises(ReplicationError) as unique:
        q.add_unique_item(primary, Item(b"u", id="u"))
    assert unique.value.result is True
    assert primary.exists("repl:item:u") == 1
    # Completing: the item is gone from the primary, the replica may still hold it.
    item = q.lease(primary, 30, block=False)
    assert item is not None
    with pytest.raises(ReplicationError) as completed:
        q.complete(primary, item)
    assert (completed.value.acked, completed.value.result) == (0, True)
    assert primary.exists(f"repl:item:{item.id()}") == 0
    # Without waiting, the same queue works on.
    assert q.add_item(primary, Item(b"", id="z"), replicas=0) is True


def test_paused_replica_add_items_reports_the_chunks_written(
    primary: redis.Redis, paused: Proc
) -> None:
    q = WorkQueue(P, replicas=1, replica_timeout=0.2)
    items = [Item(b"", id=f"i{n:04}") for n in range(700)]  # two chunks: 500 and 200
    with pytest.raises(ReplicationError) as raised:
        q.add_items(primary, items)
    err = raised.value
    assert err.result == [True] * 500  # the first chunk was written; then the call stopped
    assert primary.llen("repl:queue") == 500
    assert primary.exists("repl:item:i0499") == 1
    assert primary.exists("repl:item:i0500") == 0
    # complete_many reports the items completed so far in the same way.
    leased = q.lease_many(primary, 30, 3, block=False)
    with pytest.raises(ReplicationError) as done:
        q.complete_many(primary, [*leased, Item(b"", id="never-added")])
    assert [i.id() for i in done.value.result] == [i.id() for i in leased]


def test_the_replica_catches_up_after_a_pause(pair: ReplicaPair, primary: redis.Redis) -> None:
    q = WorkQueue(P, replicas=1, replica_timeout=0.2)
    pair.replica.pause()
    try:
        with pytest.raises(ReplicationError):
            q.add_item(primary, Item(b"", id="late"))
    finally:
        pair.replica.resume()
    # Once the replica runs again, the next add is acknowledged (the earlier one with it).
    assert q.add_item(primary, Item(b"", id="next"), replicas=1) is True
    assert pair.replica.client().exists("repl:item:late", "repl:item:next") == 2


# asyncio ----------------------------------------------------------------------------------------


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_asyncio_add_and_complete_wait_for_one_replica(pair: ReplicaPair) -> None:
    replica = pair.replica.client()

    async def scenario() -> None:
        db = redis.asyncio.Redis(host="127.0.0.1", port=pair.primary.port, socket_timeout=5)
        try:
            q = AsyncWorkQueue(P, replicas=1)
            assert await q.add_item(db, Item(b"a", id="a")) is True
            assert replica.get("repl:item:a") == b"a"
            assert await q.add_items(db, [Item(b"b", id="b")]) == [True]
            assert replica.exists("repl:item:b") == 1
            items = await q.lease_many(db, 30, 2, block=False)
            assert await q.complete(db, items[0]) is True
            assert replica.exists("repl:item:a") == 0
            assert [i.id() for i in await q.complete_many(db, items)] == ["b"]
            assert replica.exists("repl:item:b") == 0
        finally:
            await db.aclose()

    run(scenario())


def test_asyncio_paused_replica(pair: ReplicaPair, paused: Proc) -> None:
    async def scenario() -> None:
        db = redis.asyncio.Redis(host="127.0.0.1", port=pair.primary.port, socket_timeout=5)
        try:
            q = AsyncWorkQueue(P, replicas=1, replica_timeout=0.2)
            with pytest.raises(ReplicationError) as raised:
                await q.add_item(db, Item(b"x", id="x"))
            err = raised.value
            assert (err.acked, err.wanted, err.result) == (0, 1, True)
            assert "reached the primary" in str(err)
            assert await db.get("repl:item:x") == b"x"
            with pytest.raises(ReplicationError) as batch:
                await q.add_items(db, [Item(b"", id=f"i{n}") for n in range(600)])
            assert batch.value.result == [True] * 500
            assert await db.llen("repl:queue") == 501
            item = await q.lease(db, 30, block=False)
            assert item is not None
            with pytest.raises(ReplicationError) as completed:
                await q.complete(db, item)
            assert completed.value.result is True
            assert await q.add_item(db, Item(b"", id="fine"), replicas=0) is True
        finally:
            await db.aclose()

    run(scenario())


def test_replica_really_is_a_replica(pair: ReplicaPair) -> None:
    """The fixture is what it claims: a linked replica of the primary, in sync."""
    assert info(pair.replica, "replication")["role"] == "slave"
    assert info(pair.replica, "replication")["master_port"] == str(pair.primary.port)
    assert info(pair.primary, "replication")["connected_slaves"] == "1"
