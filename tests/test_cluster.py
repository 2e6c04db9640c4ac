"""Redis Cluster: the core cases on a real local cluster (three primaries with a replica each),
the slot check for prefixes without a hash tag, the asyncio twin, and a primary killed mid-run.

The cluster is started once for the session (``servers.cluster_fixture``); each test empties it. The
failover tests run last: each kills the primary that owns its queue's slot, checks what the
promoted replica holds, and starts the killed node again, which rejoins as a replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from redis.cluster import RedisCluster

from helpers import in_thread, kill_clients_in, script_calls
from redis_work_queue import (
    AsyncWorkQueue,
    CrossSlotError,
    Item,
    KeyPrefix,
    OutcomeUnknownError,
    ReplicationError,
    WorkQueue,
    acomplete_and_lease_from,
    alease_from,
    complete_and_lease_from,
    lease_from,
    scripts,
)
from redis_work_queue.server import acheck_eviction, check_eviction, eviction_policy
from servers import Cluster, Proc, in_sync, info, poll

pytestmark = pytest.mark.real_redis

TAG = "{jobs}"


def queue(name: str = f"app:{TAG}:q", **options: Any) -> WorkQueue:
    return WorkQueue(KeyPrefix(name), **options)


def ids(items: list[Item]) -> list[str]:
    return [item.id() for item in items]


def node_keys(cluster: Cluster, primary: Proc) -> set[str]:
    return {k.decode() if isinstance(k, bytes) else k for k in primary.admin().keys("*")}


# The core cases ---------------------------------------------------------------------------------


def test_add_lease_complete(cluster: Cluster, cluster_db: RedisCluster) -> None:
    q = queue()
    assert q.add_item(cluster_db, Item(b"a", id="a")) is True
    assert q.add_item(cluster_db, Item(b"again", id="a")) is False
    q.add_unique_item(cluster_db, Item(b"b", id="b"))
    assert q.add_items(
        cluster_db, [Item(b"c", id="c"), Item(b"x", id="a"), Item(b"d", id="d")]
    ) == [
        True,
        False,
        True,
    ]
    assert q.queue_len(cluster_db) == 4
    assert [(p.position, p.id, p.data) for p in q.peek(cluster_db, 0, 10)] == [
        (0, "a", b"a"),
        (1, "b", b"b"),
        (2, "c", b"c"),
        (3, "d", b"d"),
    ]
    first = q.lease(cluster_db, 30, block=False)
    assert first is not None
    assert (first.id(), first.data(), first.deliveries) == ("a", b"a", 1)
    batch = q.lease_many(cluster_db, 30, 2, block=False)
    assert ids(batch) == ["b", "c"]
    assert q.processing(cluster_db) == 3
    pending = q.pending(cluster_db, 0, 10)
    assert [p.id for p in pending] == ["a", "b", "c"]
    assert all(p.lease_left is not None and 0 < p.lease_left <= 30 for p in pending)
    assert q.complete(cluster_db, first) is True
    assert q.complete(cluster_db, first) is False
    assert ids(q.complete_many(cluster_db, [*batch, first])) == ["b", "c"]
    assert q.stats(cluster_db).queued == 1
    last = q.lease(cluster_db, 30, block=False)
    assert last is not None
    assert q.complete(cluster_db, last) is True
    assert q.lease(cluster_db, 30, block=False) is None
    # Every key of the queue lives on the one primary that owns the tag's slot.
    owner = cluster.primary_for(TAG)
    others = [p for p in cluster.primaries() if p is not owner]
    assert all(cluster_db.keyslot(k) == cluster_db.keyslot(TAG) for k in node_keys(cluster, owner))
    assert all(not node_keys(cluster, p) for p in others)


def test_renew_and_release_with_a_delay(cluster_db: RedisCluster) -> None:
    q = queue()
    q.add_item(cluster_db, Item(b"r", id="r"))
    item = q.lease(cluster_db, 1, block=False)
    assert item is not None
    assert q.renew(cluster_db, item, 30) is True
    assert q.pending(cluster_db)[0].lease_left > 20
    assert q.release(cluster_db, item, delay=0.3, reason="try later") is True
    assert q.release(cluster_db, item) is False  # the lease is given back already
    stats = q.stats(cluster_db)
    assert (stats.queued, stats.leased, stats.delayed) == (0, 0, 1)
    assert q.lease(cluster_db, 30, block=False) is None
    started = time.monotonic()
    again = q.lease(cluster_db, 30, timeout=5)
    assert again is not None
    assert again.id() == "r"
    assert again.deliveries == 2
    assert 0.1 < time.monotonic() - started < 3
    assert q.renew(cluster_db, item, 30) is False  # the old lease is not ours any more


def test_dead_letters(cluster_db: RedisCluster) -> None:
    q = queue(max_deliveries=1)
    q.add_items(cluster_db, [Item(b"1", id="one"), Item(b"2", id="two")])
    for _ in range(2):
        item = q.lease(cluster_db, 30, block=False)
        assert item is not None
        assert q.release(cluster_db, item, reason=f"bad {item.id()}") is True
    assert q.dead_count(cluster_db) == 2
    letters = q.dead_letters(cluster_db)
    assert [(d.id, d.data, d.deliveries, d.reason) for d in letters] == [
        ("one", b"1", 1, "bad one"),
        ("two", b"2", 1, "bad two"),
    ]
    assert q.stats(cluster_db).dead == 2
    assert q.requeue_dead(cluster_db, ["one"]) == 1
    assert q.queue_len(cluster_db) == 1
    assert q.purge_dead(cluster_db) == 1
    assert q.dead_count(cluster_db) == 0


def test_previews_and_item_data(cluster_db: RedisCluster) -> None:
    q = queue(max_deliveries=1)
    q.add_items(cluster_db, [Item(b"dead data", id="d"), Item(b"waiting data", id="w")])
    item = q.lease(cluster_db, 30, block=False)
    assert item is not None and item.id() == "d"
    assert q.release(cluster_db, item, reason="r")
    assert [(p.id, p.data, p.size) for p in q.peek(cluster_db, 0, 5, preview_bytes=4)] == [
        ("w", b"wait", 12)
    ]
    assert [(d.id, d.data, d.size) for d in q.dead_letters(cluster_db, 0, 5, preview_bytes=4)] == [
        ("d", b"dead", 9)
    ]
    assert q.item_data(cluster_db, "w") == b"waiting data"
    assert q.item_data(cluster_db, "d", dead=True) == b"dead data"
    assert q.item_data(cluster_db, "d") is None


def test_light_clean_requeues_expired_leases_and_buries(cluster_db: RedisCluster) -> None:
    q = queue(max_deliveries=2)
    q.add_items(cluster_db, [Item(b"", id="x"), Item(b"", id="y")])
    assert len(q.lease_many(cluster_db, 0.05, 2, block=False)) == 2
    poll(lambda: q.stats(cluster_db).expired == 2, 5, "the leases to expire")
    report = q.light_clean(cluster_db)
    assert (report.examined, report.requeued) == (2, 2)
    assert len(q.lease_many(cluster_db, 0.05, 2, block=False)) == 2
    poll(lambda: q.stats(cluster_db).expired == 2, 5, "the leases to expire")
    assert q.light_clean(cluster_db).dead == 2
    assert q.dead_count(cluster_db) == 2


def test_deep_clean_finds_items_lost_from_both_lists(cluster_db: RedisCluster) -> None:
    q = queue()
    q.add_items(cluster_db, [Item(b"k", id=f"k{i}") for i in range(30)])
    cluster_db.delete(q.keys.queue)  # the ids are gone, the data keys stay
    report = q.deep_clean(cluster_db)
    assert (report.examined, report.requeued) == (30, 30)
    assert q.queue_len(cluster_db) == 30
    assert q.deep_clean(cluster_db).requeued == 0


def test_deep_clean_and_flush_reach_the_node_of_each_slot(
    cluster: Cluster, cluster_db: RedisCluster
) -> None:
    """SCAN has no key: it must go to the node that owns the queue's slot, whichever it is."""
    for primary in cluster.primaries():
        q = queue(f"{{{cluster.tag_on(primary)}}}:scan")
        q.add_items(cluster_db, [Item(b"", id=f"s{i}") for i in range(10)])
        cluster_db.delete(q.keys.queue)
        report = q.deep_clean(cluster_db)
        assert (report.examined, report.requeued) == (10, 10), primary.port
        assert q.flush(cluster_db).items == 10
        assert not node_keys(cluster, primary), primary.port
    assert cluster.key_count() == 0


def test_stats_peek_pending_and_flush(cluster: Cluster, cluster_db: RedisCluster) -> None:
    q = queue()
    neighbour_tag = cluster.tag_on(
        next(p for p in cluster.primaries() if p is not cluster.primary_for(TAG))
    )
    neighbour = queue(f"{{{neighbour_tag}}}:q")
    same_slot = queue(f"other:{TAG}:q")  # another queue in the same slot
    for each in (q, neighbour, same_slot):
        each.add_items(cluster_db, [Item(b"", id=f"i{i}") for i in range(5)])
    q.add_item(cluster_db, Item(b"", id="later"), delay=60)
    q.lease(cluster_db, 30, block=False)
    q.lease(cluster_db, 0.001, block=False)
    time.sleep(0.01)
    stats = q.stats(cluster_db)
    assert (stats.queued, stats.leased, stats.expired, stats.delayed, stats.dead) == (3, 1, 1, 1, 0)
    assert [p.id for p in q.peek(cluster_db, -2, 2)] == ["i3", "i4"]
    assert [p.expired for p in q.pending(cluster_db)] == [False, True]
    report = q.flush(cluster_db)
    assert report.items == 6
    assert q.stats(cluster_db) == type(stats)(0, 0, 0, 0, 0)
    assert not any(
        k.startswith(f"app:{TAG}") for p in cluster.primaries() for k in node_keys(cluster, p)
    )
    assert neighbour.queue_len(cluster_db) == 5
    assert same_slot.queue_len(cluster_db) == 5


def test_blocking_lease_wakes_on_add(cluster_db: RedisCluster, cluster: Cluster) -> None:
    q = queue()
    adder = cluster.client()
    timer = threading.Timer(0.3, lambda: q.add_item(adder, Item(b"late", id="late")))
    started = time.monotonic()
    timer.start()
    try:
        item = q.lease(cluster_db, 30, timeout=5)
    finally:
        timer.cancel()
        timer.join(5)
    assert item is not None
    assert item.id() == "late"
    assert 0.2 < time.monotonic() - started < 3
    started = time.monotonic()
    assert q.lease(cluster_db, 30, timeout=0.3) is None
    assert 0.25 < time.monotonic() - started < 3


def test_lease_from_queues_with_the_same_tag(cluster: Cluster, cluster_db: RedisCluster) -> None:
    high, low = queue(f"high:{TAG}"), queue(f"low:{TAG}")
    low.add_item(cluster_db, Item(b"", id="low-1"))
    high.add_item(cluster_db, Item(b"", id="high-1"))
    found = lease_from(cluster_db, [high, low], 30, block=False)
    assert found is not None
    assert (found[0], found[1].id()) == (high, "high-1")
    found = lease_from(cluster_db, [high, low], 30, block=False)
    assert found is not None
    assert (found[0], found[1].id()) == (low, "low-1")
    assert lease_from(cluster_db, [high, low], 30, block=False) is None
    # Blocked on both, a worker wakes for the low-priority queue.
    adder = cluster.client()
    timer = threading.Timer(0.3, lambda: low.add_item(adder, Item(b"", id="low-2")))
    started = time.monotonic()
    timer.start()
    try:
        found = lease_from(cluster_db, [high, low], 30, timeout=5)
    finally:
        timer.cancel()
        timer.join(5)
    assert found is not None
    assert (found[0], found[1].id()) == (low, "low-2")
    assert time.monotonic() - started < 3


def test_lease_from_queues_with_different_tags_tries_them_in_turn(
    cluster: Cluster, cluster_db: RedisCluster
) -> None:
    first, second = cluster.primaries()[:2]
    high = queue(f"{{{cluster.tag_on(first)}}}:high")
    low = queue(f"{{{cluster.tag_on(second)}}}:low")
    low.add_item(cluster_db, Item(b"", id="low-1"))
    high.add_item(cluster_db, Item(b"", id="high-1"))
    found = lease_from(cluster_db, [high, low], 30, block=False)
    assert found is not None
    assert (found[0], found[1].id()) == (high, "high-1")
    found = lease_from(cluster_db, [high, low], 30, block=False)
    assert found is not None
    assert (found[0], found[1].id()) == (low, "low-1")
    assert lease_from(cluster_db, [high, low], 30, block=False) is None
    started = time.monotonic()
    assert lease_from(cluster_db, [high, low], 30, timeout=0.4) is None
    assert 0.35 < time.monotonic() - started < 3
    adder = cluster.client()
    timer = threading.Timer(0.3, lambda: low.add_item(adder, Item(b"", id="low-2")))
    timer.start()
    try:
        found = lease_from(cluster_db, [high, low], 30, timeout=5)
    finally:
        timer.cancel()
        timer.join(5)
    assert found is not None
    assert (found[0], found[1].id()) == (low, "low-2")


def test_pipelined_adds(cluster_db: RedisCluster) -> None:
    q = queue()
    pipe = cluster_db.pipeline()
    q.add_item_to_pipeline(pipe, Item(b"p1", id="p1"))
    q.add_unique_item_to_pipeline(pipe, Item(b"p2", id="p2"))
    pipe.execute()
    assert [p.id for p in q.peek(cluster_db)] == ["p1", "p2"]


@pytest.mark.parametrize("unique", [False, True])
def test_pipelined_add_without_a_hash_tag_is_refused_before_queuing(
    cluster: Cluster, cluster_db: RedisCluster, unique: bool
) -> None:
    untagged = queue("plain")
    tagged = queue()
    pipe = cluster_db.pipeline()
    method = untagged.add_unique_item_to_pipeline if unique else untagged.add_item_to_pipeline
    with pytest.raises(CrossSlotError) as raised:
        method(pipe, Item(b"x", id="x"))
    assert "{hash tag}" in str(raised.value)
    assert len(pipe) == 0  # nothing was queued
    tagged.add_item_to_pipeline(pipe, Item(b"ok", id="ok"))  # the pipeline is still usable
    pipe.execute()
    assert cluster.key_count() == 3  # the tagged queue's item, list and counters only
    assert [p.id for p in tagged.peek(cluster_db)] == ["ok"]


def test_asyncio_pipelined_add_without_a_hash_tag_is_refused(
    cluster: Cluster, cluster_db: RedisCluster
) -> None:
    async def scenario() -> None:
        db = cluster.async_client()
        try:
            await db.initialize()
            untagged = AsyncWorkQueue(KeyPrefix("plain"))
            pipe = db.pipeline()
            for method in (untagged.add_item_to_pipeline, untagged.add_unique_item_to_pipeline):
                with pytest.raises(CrossSlotError):
                    method(pipe, Item(b"x", id="x"))
            assert len(pipe) == 0
            await pipe.execute()
        finally:
            await db.aclose()

    asyncio.run(asyncio.wait_for(scenario(), 30))
    assert cluster.key_count() == 0


def test_synchronous_replication_on_the_cluster(cluster: Cluster, cluster_db: RedisCluster) -> None:
    q = queue(replicas=1, replica_timeout=2)
    assert q.add_item(cluster_db, Item(b"w", id="w")) is True
    replica = cluster.replica_of(cluster.primary_for(TAG))
    assert replica.admin().execute_command("READONLY") in (True, b"OK", "OK")
    assert replica.admin().get(q.keys.item("w")) == "w"  # WAIT returned: the replica has it
    item = q.lease(cluster_db, 30, block=False)
    assert item is not None
    assert q.complete(cluster_db, item) is True
    impatient = queue(replicas=1, replica_timeout=0.2)
    with pytest.raises(ReplicationError) as raised:
        impatient.add_item(cluster_db, Item(b"", id="two"), replicas=2)  # only one replica
    assert (raised.value.acked, raised.value.wanted, raised.value.result) == (1, 2, True)
    assert q.queue_len(cluster_db) == 1


@pytest.mark.parametrize("prefix", ["plain", "no:tag", "{}:empty-tag", "{open"])
def test_prefix_without_a_hash_tag_is_refused_before_anything_is_written(
    cluster: Cluster, cluster_db: RedisCluster, prefix: str
) -> None:
    q = queue(prefix)
    item = Item(b"x", id="x")
    item.lease_token = "t@1"
    calls = {
        "add_item": lambda: q.add_item(cluster_db, item),
        "add_unique_item": lambda: q.add_unique_item(cluster_db, item),
        "add_item delayed": lambda: q.add_item(cluster_db, item, delay=5),
        "add_item replicas": lambda: q.add_item(cluster_db, item, replicas=1),
        "add_items": lambda: q.add_items(cluster_db, [item, Item(b"y")]),
        "lease": lambda: q.lease(cluster_db, 30, block=False),
        "lease blocking": lambda: q.lease(cluster_db, 30, timeout=0.2),
        "lease_many": lambda: q.lease_many(cluster_db, 30, 5, block=False),
        "release": lambda: q.release(cluster_db, item),
        "complete": lambda: q.complete(cluster_db, item),
        "complete_many": lambda: q.complete_many(cluster_db, [item]),
        "light_clean": lambda: q.light_clean(cluster_db),
        "stats": lambda: q.stats(cluster_db),
        "peek": lambda: q.peek(cluster_db),
        "pending": lambda: q.pending(cluster_db),
        "dead_letters": lambda: q.dead_letters(cluster_db),
        "requeue_dead": lambda: q.requeue_dead(cluster_db),
        "purge_dead": lambda: q.purge_dead(cluster_db),
        "lease_from": lambda: lease_from(cluster_db, [q], 30, block=False),
        "flush": lambda: q.flush(cluster_db),
    }
    failed = {}
    for name, call in calls.items():
        try:
            call()
        except CrossSlotError as err:
            assert "{hash tag}" in str(err)
        except Exception as err:  # collected, then reported together
            failed[name] = f"{type(err).__name__}: {err}"
        else:
            failed[name] = "no error"
    assert cluster.key_count() == 0
    assert not failed, f"expected CrossSlotError from every call: {failed}"


def test_queues_with_different_tags_cannot_share_one_script_call(cluster: Cluster) -> None:
    from redis_work_queue.routing import slot_of  # noqa: PLC0415

    a, b = cluster.primaries()[:2]
    keys = (f"{{{cluster.tag_on(a)}}}:q", f"{{{cluster.tag_on(b)}}}:q")
    with pytest.raises(CrossSlotError):
        slot_of(keys)


@pytest.mark.parametrize("api", ["sync", "asyncio"])
@pytest.mark.parametrize("tags", ["same", "different"])
def test_complete_and_lease_from(
    cluster: Cluster, cluster_db: RedisCluster, api: str, tags: str
) -> None:
    """One script call on the queues' node when they share a tag; two calls otherwise."""
    first, second = cluster.primaries()[:2]
    tag = cluster.tag_on(first)
    high_name = f"{{{tag}}}:cl-high"
    low_name = f"{{{tag if tags == 'same' else cluster.tag_on(second)}}}:cl-low"
    low = queue(low_name)
    low.add_items(cluster_db, [Item(b"1", id="low-1"), Item(b"2", id="low-2")])
    held = low.lease(cluster_db, 30, block=False)
    assert held is not None
    queue(high_name).add_item(cluster_db, Item(b"h", id="high-1"))
    admins = [node.client(decode_responses=True) for node in (first, second)]
    for admin in admins:
        scripts.preload(admin)
        admin.config_resetstat()

    async def aio_steps() -> list[tuple[bool, tuple[str, str] | None]]:
        db = cluster.async_client()
        try:
            queues = [AsyncWorkQueue(KeyPrefix(n)) for n in (high_name, low_name)]
            out: list[tuple[bool, tuple[str, str] | None]] = []
            done_queue, item = queues[1], held
            for _ in range(3):
                done, found = await acomplete_and_lease_from(db, done_queue, item, queues, 30)
                out.append((done, None if found is None else (found[0].name.prefix, found[1].id())))
                if found is not None:
                    done_queue, item = found
            return out
        finally:
            await db.aclose()

    if api == "asyncio":
        steps = asyncio.run(asyncio.wait_for(aio_steps(), 30))
    else:
        queues = [queue(high_name), queue(low_name)]
        steps = []
        done_queue, item = queues[1], held
        for _ in range(3):
            done, found = complete_and_lease_from(cluster_db, done_queue, item, queues, 30)
            steps.append((done, None if found is None else (found[0].name.prefix, found[1].id())))
            if found is not None:
                done_queue, item = found
    calls = [script_calls(admin) for admin in admins]
    assert steps == [(True, (high_name, "high-1")), (True, (low_name, "low-2")), (True, None)]
    if tags == "same":
        assert calls == [3, 0]
    else:
        assert calls[0] >= 1 and calls[1] >= 3 and sum(calls) > 3, calls
    for name in (high_name, low_name):
        stats = queue(name).stats(cluster_db)
        assert (stats.queued, stats.leased) == (0, 0), name


# asyncio ----------------------------------------------------------------------------------------


def test_asyncio_twin(cluster: Cluster, cluster_db: RedisCluster) -> None:
    async def scenario() -> None:
        db = cluster.async_client()
        try:
            q = AsyncWorkQueue(KeyPrefix(f"aio:{TAG}"), max_deliveries=2)
            other = AsyncWorkQueue(KeyPrefix(f"aio2:{TAG}"))
            assert await q.add_item(db, Item(b"a", id="a")) is True
            assert await q.add_item(db, Item(b"a", id="a")) is False
            assert await q.add_items(db, [Item(b"b", id="b"), Item(b"c", id="c")]) == [True, True]
            assert [p.id for p in await q.peek(db)] == ["a", "b", "c"]
            item = await q.lease(db, 30, block=False)
            assert item is not None
            assert item.id() == "a"
            assert await q.renew(db, item, 60) is True
            assert await q.release(db, item, delay=0.2, reason="later") is True
            assert (await q.stats(db)).delayed == 1
            batch = await q.lease_many(db, 30, 5, block=False)
            assert ids(batch) == ["b", "c"]
            assert [p.id for p in await q.pending(db)] == ["b", "c"]
            assert ids(await q.complete_many(db, batch)) == ["b", "c"]
            again = await q.lease(db, 30, timeout=5)  # the delayed one, once due
            assert again is not None
            assert (again.id(), again.deliveries) == ("a", 2)
            assert await q.complete(db, again) is True
            # Cleaners
            await q.add_item(db, Item(b"", id="e"))
            assert await q.lease(db, 0.05, block=False) is not None
            await asyncio.sleep(0.1)
            assert (await q.light_clean(db)).requeued == 1
            await db.delete(q.keys.queue)
            assert (await q.deep_clean(db)).requeued == 1
            # lease_from, same tag and different tags
            await other.add_item(db, Item(b"", id="o"))
            found = await alease_from(db, [other, q], 30, block=False)
            assert found is not None
            assert (found[0], found[1].id()) == (other, "o")
            away = AsyncWorkQueue(KeyPrefix(f"{{{far_tag}}}:q"))
            await away.add_item(db, Item(b"", id="far"))
            found = await alease_from(db, [q, away], 30, block=False)
            assert found is not None
            assert found[1].id() == "e"
            found = await alease_from(db, [q, away], 30, timeout=2)
            assert found is not None
            assert (found[0], found[1].id()) == (away, "far")

            # Blocking lease woken by an add from another task
            async def add_later() -> None:
                await asyncio.sleep(0.2)
                await other.add_item(db, Item(b"", id="late"))

            task = asyncio.ensure_future(add_later())
            leased = await other.lease(db, 30, timeout=5)
            await task
            assert leased is not None
            assert leased.id() == "late"
            assert (await q.flush(db)).items >= 1
            assert await q.queue_len(db) == 0
            with pytest.raises(CrossSlotError):
                await AsyncWorkQueue(KeyPrefix("untagged")).add_item(db, Item(b""))
        finally:
            await db.aclose()

    far_tag = cluster.tag_on(
        next(p for p in cluster.primaries() if p is not cluster.primary_for(TAG))
    )
    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_asyncio_pipelined_adds(cluster: Cluster, cluster_db: RedisCluster) -> None:
    async def scenario() -> None:
        db = cluster.async_client()
        try:
            q = AsyncWorkQueue(KeyPrefix(f"aio:{TAG}"))
            pipe = db.pipeline()
            q.add_item_to_pipeline(pipe, Item(b"", id="p1"))
            q.add_unique_item_to_pipeline(pipe, Item(b"", id="p2"))
            await pipe.execute()
            assert [p.id for p in await q.peek(db)] == ["p1", "p2"]
        finally:
            await db.aclose()

    asyncio.run(asyncio.wait_for(scenario(), 30))


async def replicated_adds_and_completes(db: Any) -> None:
    q = AsyncWorkQueue(KeyPrefix(f"aio:{TAG}"), replicas=1)
    assert await q.add_item(db, Item(b"a", id="a")) is True
    assert await q.add_items(db, [Item(b"b", id="b")], replicas=0) == [True]
    item = await q.lease(db, 30, block=False)
    assert item is not None
    assert await q.complete(db, item) is True
    with pytest.raises(ReplicationError) as raised:
        await q.add_item(db, Item(b"", id="c"), replicas=2)  # there is only one replica
    assert (raised.value.acked, raised.value.wanted) == (1, 2)
    assert await q.queue_len(db) == 2


def test_asyncio_synchronous_replication_on_the_cluster(
    cluster: Cluster, cluster_db: RedisCluster
) -> None:
    async def scenario() -> None:
        db = cluster.async_client()
        try:
            await db.initialize()
            await replicated_adds_and_completes(db)
        finally:
            await db.aclose()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_asyncio_replicated_add_as_the_first_call_of_a_client(
    cluster: Cluster, cluster_db: RedisCluster
) -> None:
    """A fresh asyncio cluster client has not read the slot map yet (it does on first use)."""

    async def scenario() -> None:
        db = cluster.async_client()
        try:
            await replicated_adds_and_completes(db)
        finally:
            await db.aclose()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_replicated_write_with_a_lost_reply_is_never_run_again(
    cluster: Cluster, cluster_db: RedisCluster
) -> None:
    """The replica stopped so that WAIT blocks, the writer's connection killed: one script
    call on the node, and OutcomeUnknownError (sync, then asyncio)."""
    q = queue(replicas=1, replica_timeout=20)
    aq = AsyncWorkQueue(q.name, replicas=1, replica_timeout=20)
    primary = cluster.primary_for(TAG)
    replica = cluster.replica_of(primary)
    q.add_item(cluster_db, Item(b"", id="warm"))
    primary.admin().config_resetstat()

    async def asyncio_add() -> None:
        db = cluster.async_client()
        try:
            task = asyncio.ensure_future(aq.add_item(db, Item(b"b", id="b")))
            await asyncio.to_thread(kill_clients_in, primary.admin(), "wait")
            with pytest.raises(OutcomeUnknownError):
                await asyncio.wait_for(task, 10)
        finally:
            await db.aclose()

    replica.pause()
    try:
        thread, outcome = in_thread(lambda: q.add_item(cluster_db, Item(b"a", id="a")))
        kill_clients_in(primary.admin(), "wait")
        thread.join(10)
        assert not thread.is_alive()
        (err,) = outcome
        assert isinstance(err, OutcomeUnknownError), err
        assert script_calls(primary.admin()) == 1
        asyncio.run(asyncio.wait_for(asyncio_add(), 30))
        assert script_calls(primary.admin()) == 2
    finally:
        replica.resume()
    # Each add happened once: the next one says so.
    assert q.add_items(cluster_db, [Item(b"a", id="a"), Item(b"b", id="b")], replicas=0) == [
        False,
        False,
    ]
    assert q.queue_len(cluster_db) == 3


def test_eviction_policy_of_every_primary(cluster: Cluster, cluster_db: RedisCluster) -> None:
    """One primary that may evict is enough for the warning (sync and asyncio)."""
    assert eviction_policy(cluster_db) == "noeviction"
    assert check_eviction(cluster_db) is None
    loose = cluster.primaries()[1]
    loose.admin().config_set("maxmemory-policy", "allkeys-lru")
    try:
        assert eviction_policy(cluster_db) == "allkeys-lru"
        assert "allkeys-lru" in (check_eviction(cluster_db) or "")

        async def scenario() -> str | None:
            db = cluster.async_client()
            try:
                return await acheck_eviction(db)
            finally:
                await db.aclose()

        assert "allkeys-lru" in (asyncio.run(asyncio.wait_for(scenario(), 30)) or "")
    finally:
        loose.admin().config_set("maxmemory-policy", "noeviction")


# Failover ---------------------------------------------------------------------------------------

#: Errors a worker may see while a primary fails over; it retries after a short pause.
BACKOFF = 0.05
RUN_SECS = 45.0


@dataclass
class Ledger:
    """What the workers were told (shared between threads; append-only)."""

    added: list[str] = field(default_factory=list)  # add returned: acknowledged
    add_unsure: list[str] = field(default_factory=list)  # add raised: may or may not be there
    completed: list[str] = field(default_factory=list)  # complete returned True
    complete_unsure: list[str] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    last_error: dict[str, str] = field(default_factory=dict)
    killed_at: float = 0.0
    added_after: int = 0
    completed_after: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def error(self, err: BaseException, where: str) -> None:
        name = f"{where}: {type(err).__name__}"
        with self.lock:
            self.errors[name] += 1
            self.last_error[name] = str(err)[:200]


def producer(
    make: Any, q: WorkQueue, ledger: Ledger, name: str, stop: threading.Event, end: float
) -> None:
    db = make()
    n = 0
    while not stop.is_set() and time.monotonic() < end:
        item_id = f"{name}-{n}"
        n += 1
        try:
            assert q.add_item(db, Item(b"payload", id=item_id)) is True
        except Exception as err:  # any error: the outcome is unknown, go on
            ledger.error(err, "add")
            ledger.add_unsure.append(item_id)
            time.sleep(BACKOFF)
            continue
        with ledger.lock:
            ledger.added.append(item_id)
            if ledger.killed_at:
                ledger.added_after += 1


def consumer(make: Any, q: WorkQueue, ledger: Ledger, stop: threading.Event, end: float) -> None:
    db = make()
    while not stop.is_set() and time.monotonic() < end:
        try:
            item = q.lease(db, 30, timeout=0.2)
        except Exception as err:  # retried after a pause
            ledger.error(err, "lease")
            time.sleep(BACKOFF)
            continue
        if item is None:
            continue
        try:
            done = q.complete(db, item)
        except Exception as err:  # retried after a pause
            ledger.error(err, "complete")
            ledger.complete_unsure.append(item.id())
            time.sleep(BACKOFF)
            continue
        if done:
            with ledger.lock:
                ledger.completed.append(item.id())
                if ledger.killed_at:
                    ledger.completed_after += 1
        else:
            ledger.complete_unsure.append(item.id())


@contextlib.contextmanager
def workers(
    cluster: Cluster, q: WorkQueue, ledger: Ledger, producers: int = 2, consumers: int = 2
) -> Iterator[threading.Event]:
    stop = threading.Event()
    end = time.monotonic() + RUN_SECS

    def make() -> RedisCluster:
        return cluster.client(socket_timeout=2, socket_connect_timeout=0.5)

    threads = [
        threading.Thread(target=producer, args=(make, q, ledger, f"p{i}", stop, end), daemon=True)
        for i in range(producers)
    ] + [
        threading.Thread(target=consumer, args=(make, q, ledger, stop, end), daemon=True)
        for _ in range(consumers)
    ]
    for thread in threads:
        thread.start()
    try:
        yield stop
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
        assert not [t for t in threads if t.is_alive()], "worker threads did not stop"


@contextlib.contextmanager
def killed_primary(cluster: Cluster, key: str) -> Iterator[tuple[Proc, Proc]]:
    """The primary owning ``key``'s slot and its replica; the primary is killed by the caller.

    Afterwards the killed node is started again and the cluster is waited for until healthy
    (the old primary rejoins as a replica of the promoted one).
    """
    primary = cluster.primary_for(key)
    replica = cluster.replica_of(primary)
    try:
        yield primary, replica
    finally:
        if not primary.alive():
            primary.launch()
        cluster.wait_healthy(timeout=30)


def run_failover(
    cluster: Cluster, q: WorkQueue, key: str, rejoin: bool = False
) -> tuple[Ledger, Proc, dict[str, Any]]:
    """Kill the primary owning the queue's slot while workers run; return what they saw.

    With ``rejoin``, the killed node is started again once its replica has taken over (it
    rejoins as the new primary's replica), before the workers must show progress: writes that
    wait for a replica can only be acknowledged again then.
    """
    ledger = Ledger()
    with killed_primary(cluster, key) as (primary, replica), workers(cluster, q, ledger) as stop:
        poll(lambda: len(ledger.completed) >= 200, 15, "the workers to get going", 0.01)
        ledger.killed_at = time.monotonic()
        primary.kill()
        # The replica takes over; the workers carry on against it.
        poll(
            lambda: info(replica, "replication").get("role") == "master",
            15,
            "the replica to be promoted",
            0.05,
        )
        promoted = time.monotonic() - ledger.killed_at
        if rejoin:
            primary.launch()
            poll(lambda: in_sync(replica, primary), 15, "the old primary to rejoin as a replica")
        poll(
            lambda: ledger.added_after >= 200 and ledger.completed_after >= 100,
            15,
            lambda: (
                f"the workers to carry on after the failover (errors: {ledger.errors}, last"
                f" of each: {ledger.last_error}, added after: {ledger.added_after},"
                f" completed after: {ledger.completed_after})"
            ),
            0.02,
        )
        resumed = time.monotonic() - ledger.killed_at
        stop.set()
    # The workers are stopped; the new primary owns the slot.
    db = cluster.client()
    assert cluster.primary_for(key) is replica
    owner = replica.client()
    pipe = owner.pipeline(transaction=False)
    for item_id in ledger.added + ledger.completed:
        pipe.exists(q.keys.item(item_id))
    found = pipe.execute()
    present = dict(zip(ledger.added + ledger.completed, found, strict=True))
    done = set(ledger.completed)
    unsure = set(ledger.complete_unsure)
    lost_adds = [i for i in ledger.added if i not in done and i not in unsure and not present[i]]
    undone_completes = [i for i in ledger.completed if present[i]]
    stats = q.stats(db)
    figures = {
        "adds acknowledged": len(ledger.added),
        "adds with unknown outcome": len(ledger.add_unsure),
        "completes acknowledged": len(ledger.completed),
        "completes with unknown outcome": len(ledger.complete_unsure),
        "acknowledged adds lost": len(lost_adds),
        "acknowledged completes undone": len(undone_completes),
        "promoted after s": round(promoted, 2),
        "workers resumed after s": round(resumed, 2),
        "errors seen by workers": dict(ledger.errors),
        "last error of each kind": ledger.last_error,
        "queue after": stats,
        "lost": lost_adds[:10],
        "undone": undone_completes[:10],
    }
    return ledger, replica, figures


def test_failover_with_asynchronous_replication_loses_little(cluster: Cluster) -> None:
    cluster.wait_healthy()
    cluster.flushall()
    tag = "{failover-async}"
    q = queue(f"{tag}:q")
    ledger, _, figures = run_failover(cluster, q, tag)
    print(f"\nfailover, asynchronous replication: {figures}")
    total = len(ledger.added)
    assert figures["acknowledged adds lost"] < 0.05 * total, figures
    assert figures["acknowledged completes undone"] < 0.05 * len(ledger.completed), figures


def test_failover_with_synchronous_replication_loses_nothing_acknowledged(
    cluster: Cluster,
) -> None:
    cluster.wait_healthy()
    cluster.flushall()
    tag = "{failover-sync}"
    q = queue(f"{tag}:q", replicas=1, replica_timeout=0.5)
    ledger, _, figures = run_failover(cluster, q, tag, rejoin=True)
    print(f"\nfailover, synchronous replication (replicas=1): {figures}")
    assert figures["acknowledged adds lost"] == 0, figures
    assert figures["acknowledged completes undone"] == 0, figures
    assert len(ledger.added) > 0
