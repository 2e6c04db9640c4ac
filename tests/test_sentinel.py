"""Sentinel: a client from ``Sentinel(...).master_for(...)`` runs every operation, and goes on
through a failover (``SENTINEL FAILOVER``) without losing an item whose add was acknowledged
by a replica (``replicas=1``).

The fixture (``servers.sentinel_setup``) starts a primary, its replica and one sentinel that
watches them as ``mymaster``. The failover test runs last: it swaps the roles of the two.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
import redis
import redis.asyncio.sentinel
from redis.sentinel import Sentinel

from redis_work_queue import (
    AsyncWorkQueue,
    Item,
    KeyPrefix,
    ReplicationError,
    WorkQueue,
    lease_from,
)
from servers import MASTER_NAME, SentinelSetup, in_sync, info, poll

pytestmark = pytest.mark.real_redis

T = TypeVar("T")
P = KeyPrefix("sent")
#: What a client may see while the primary changes: the old one gone or read-only.
SWITCHING = (redis.ConnectionError, redis.TimeoutError, redis.ReadOnlyError, ReplicationError)


@pytest.fixture
def setup(sentinel_setup: SentinelSetup) -> SentinelSetup:
    """The sentinel setup, with the current primary emptied and its replica in sync."""
    primary = sentinel_setup.by_port(sentinel_setup.master_port())
    replica = next(p for p in sentinel_setup.pair.procs() if p is not primary)
    primary.admin().flushall()
    poll(lambda: in_sync(primary, replica), 10, "the replica to be in sync")
    return sentinel_setup


def master(setup: SentinelSetup, **kwargs: Any) -> redis.Redis:
    sentinel = Sentinel([setup.address], socket_timeout=2, socket_connect_timeout=1)
    return sentinel.master_for(MASTER_NAME, socket_timeout=2, socket_connect_timeout=1, **kwargs)


def test_operations_through_sentinel(setup: SentinelSetup) -> None:
    db = master(setup)
    q = WorkQueue(P, max_deliveries=2, replicas=1)
    other = WorkQueue(KeyPrefix("sent-other"))
    assert q.add_item(db, Item(b"a", id="a")) is True
    assert q.add_items(db, [Item(b"b", id="b"), Item(b"c", id="c"), Item(b"", id="a")]) == [
        True,
        True,
        False,
    ]
    q.add_unique_item(db, Item(b"d", id="d"))
    assert [p.id for p in q.peek(db)] == ["a", "b", "c", "d"]
    item = q.lease(db, 30, block=False)
    assert item is not None
    assert item.id() == "a"
    assert q.renew(db, item, 60) is True
    assert q.release(db, item, delay=0.2, reason="later") is True
    batch = q.lease_many(db, 30, 2, block=False)
    assert [i.id() for i in batch] == ["b", "c"]
    assert [p.id for p in q.pending(db)] == ["b", "c"]
    assert [i.id() for i in q.complete_many(db, batch)] == ["b", "c"]
    stats = q.stats(db)
    assert (stats.queued, stats.leased, stats.delayed) == (1, 0, 1)
    again = q.lease(db, 30, timeout=5)  # "d", then the delayed "a" once due
    assert again is not None
    assert q.complete(db, again) is True
    again = q.lease(db, 30, timeout=5)
    assert again is not None
    assert (again.id(), again.deliveries) == ("a", 2)
    assert q.release(db, again, reason="bad") is True  # the last delivery: buried
    assert [d.id for d in q.dead_letters(db)] == ["a"]
    assert q.requeue_dead(db) == 1
    expired = q.lease(db, 0.05, block=False)
    assert expired is not None
    time.sleep(0.1)
    assert q.light_clean(db).requeued == 1
    db.delete("sent:queue")
    assert q.deep_clean(db).requeued == 1
    requeued = q.lease(db, 30, block=False)
    assert requeued is not None
    assert q.complete(db, requeued) is True
    # Blocking lease and lease_from, woken by an add from another client.
    adder = master(setup)
    timer = threading.Timer(0.3, lambda: other.add_item(adder, Item(b"", id="late")))
    timer.start()
    try:
        found = lease_from(db, [other, q], 30, timeout=5)
    finally:
        timer.cancel()
        timer.join(5)
    assert found is not None
    assert (found[0], found[1].id()) == (other, "late")
    q.add_item(db, Item(b"", id="last"))
    assert q.flush(db).items == 1
    assert q.stats(db) == type(stats)(0, 0, 0, 0, 0)


def test_asyncio_operations_through_sentinel(setup: SentinelSetup) -> None:
    async def scenario() -> None:
        sentinel = redis.asyncio.sentinel.Sentinel([setup.address], socket_timeout=2)
        db = sentinel.master_for(MASTER_NAME, socket_timeout=2)
        try:
            q = AsyncWorkQueue(P, replicas=1)
            assert await q.add_items(db, [Item(b"x", id="x"), Item(b"y", id="y")]) == [True, True]
            item = await q.lease(db, 30, block=False)
            assert item is not None
            assert await q.complete(db, item) is True
            assert (await q.stats(db)).queued == 1
            assert (await q.flush(db)).items == 1
        finally:
            await db.aclose()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def retrying(call: Callable[[], T], deadline: float, errors: list[str]) -> T:
    """Run ``call`` until it returns, retrying on the errors of a primary switch."""
    while True:
        try:
            return call()
        except SWITCHING as err:
            errors.append(type(err).__name__)
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_failover_keeps_every_acknowledged_item(setup: SentinelSetup) -> None:
    """The primary is killed; the sentinel promotes the replica; clients follow it."""
    db = master(setup)
    q = WorkQueue(P, replicas=1, replica_timeout=0.5)
    plain = WorkQueue(P)  # the same queue, without waiting for a replica
    old_port = setup.master_port()
    old = setup.by_port(old_port)
    new = next(p for p in setup.pair.procs() if p is not old)
    before = [f"before-{n}" for n in range(300)]
    assert q.add_items(db, [Item(b"", id=i) for i in before]) == [True] * 300
    done_before = q.lease_many(db, 30, 50, block=False)
    assert len(q.complete_many(db, done_before)) == 50
    completed = {i.id() for i in done_before}

    # A worker adds, leases and completes through the switch, retrying on its errors.
    added_during: list[str] = []
    completed_during: set[str] = set()
    unsure: set[str] = set()
    errors: list[str] = []
    stop = threading.Event()
    deadline = time.monotonic() + 30

    def work() -> None:
        client = master(setup)
        n = 0
        while not stop.is_set() and time.monotonic() < deadline:
            item_id = f"during-{n}"
            n += 1
            try:
                plain.add_item(client, Item(b"", id=item_id))
            except SWITCHING as err:
                errors.append(type(err).__name__)
                time.sleep(0.05)
                continue
            added_during.append(item_id)
            try:
                leased = plain.lease(client, 30, block=False)
            except SWITCHING as err:
                errors.append(type(err).__name__)
                time.sleep(0.05)
                continue
            if leased is None:
                continue
            try:
                if plain.complete(client, leased):
                    completed_during.add(leased.id())
            except SWITCHING as err:  # done or not: unknown
                unsure.add(leased.id())
                errors.append(type(err).__name__)
                time.sleep(0.05)

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    try:
        poll(lambda: len(added_during) >= 20, 10, "the worker to get going")
        started = time.monotonic()
        old.kill()
        poll(lambda: setup.master_port() != old_port, 15, "the sentinel to switch primaries", 0.05)
        assert setup.master_port() == new.port
        poll(lambda: info(new, "replication").get("role") == "master", 10, "the promotion")
        switched = time.monotonic() - started
        count = len(added_during)
        poll(lambda: len(added_during) >= count + 50, 15, "the worker to go on after the switch")
    finally:
        stop.set()
        worker.join(timeout=15)
    assert not worker.is_alive()

    # The client made before the switch goes on with the new primary.
    retry_until = time.monotonic() + 15
    assert retrying(lambda: plain.add_item(db, Item(b"", id="after")), retry_until, errors)
    assert db.connection_pool.get_master_address()[1] == new.port
    direct = new.client()
    everything = [*before, *added_during, "after"]
    pipe = direct.pipeline(transaction=False)
    for item_id in everything:
        pipe.exists(q.keys.item(item_id))
    present = {i for i, there in zip(everything, pipe.execute(), strict=True) if there}
    done = completed | completed_during | unsure
    # Acknowledged by a replica: every add is there, every completion stays done.
    missing_before = [i for i in before if i not in done and i not in present]
    undone_before = [i for i in completed if i in present]
    # Not waited for: what was inside the replication window when the primary died is lost.
    lost_during = [i for i in added_during if i not in done and i not in present]
    undone_during = [i for i in completed_during if i in present]
    print(
        f"\nsentinel failover: switched in {switched:.2f} s; with replicas=1: {len(before)} adds,"
        f" {len(completed)} completes, {len(missing_before)} lost, {len(undone_before)} undone;"
        f" without: {len(added_during)} adds, {len(completed_during)} completes,"
        f" {len(lost_during)} lost, {len(undone_during)} undone; errors seen by the worker:"
        f" {sorted(set(errors))} ({len(errors)})"
    )
    assert not missing_before, missing_before[:10]
    assert not undone_before, undone_before[:10]
    assert "after" in present
    assert len(lost_during) < 0.05 * len(added_during)
    # Work continues on the new primary: drain the queue.
    queued = plain.queue_len(db)
    assert queued >= len(before) - len(completed)
    drained = 0
    while (item := plain.lease(db, 30, block=False)) is not None:
        assert plain.complete(db, item) is True
        drained += 1
    assert drained == queued
