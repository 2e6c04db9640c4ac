"""Rate limits on Redis Cluster: a queue whose prefix has a ``{hash tag}`` keeps its limit
(``<prefix>:rate``) in its slot, and the lease, claim and set_rate scripts run there, on the
synchronous and the asyncio API."""

from __future__ import annotations

import asyncio
import time

import pytest
from redis.cluster import RedisCluster

from redis_work_queue import AsyncWorkQueue, Item, KeyPrefix, RateLimit, WorkQueue, lease_from
from servers import Cluster

pytestmark = pytest.mark.real_redis

NAME = "api:{calls}"


def test_a_limit_declared_and_set_on_a_cluster(cluster_db: RedisCluster) -> None:
    q = WorkQueue(KeyPrefix(NAME), rate_limit=RateLimit(1, 60, burst=2))
    assert q.add_items(cluster_db, [Item(b"", id=f"i{k}") for k in range(5)]) == [True] * 5
    assert len(q.lease_many(cluster_db, 30, 5, block=False)) == 2
    assert q.lease(cluster_db, 30, block=False) is None
    assert q.stats(cluster_db).rate_limit == RateLimit(1, 60, burst=2)
    assert cluster_db.keyslot(q.keys.rate) == cluster_db.keyslot(q.keys.queue)
    q.set_rate_limit(cluster_db, RateLimit(20, 1))  # one item every 50 ms
    started = time.monotonic()
    leased = [q.lease(cluster_db, 30, timeout=5) for _ in range(3)]
    assert all(item is not None for item in leased)
    assert 0.05 <= time.monotonic() - started < 1.5
    # Several queues of one tag in one call: the limited one is skipped when out of tokens.
    q.set_rate_limit(cluster_db, RateLimit(1, 60))
    q.add_items(cluster_db, [Item(b"", id="l1"), Item(b"", id="l2")])
    q.lease(cluster_db, 30, block=False)  # whatever token is left (the tokens carry over)
    other = WorkQueue(KeyPrefix("api2:{calls}"))
    other.add_item(cluster_db, Item(b"", id="o"))
    found = lease_from(cluster_db, [q, other], 30, block=False)
    assert found is not None and found[0] is other


def test_the_asyncio_twin_on_a_cluster(cluster: Cluster, cluster_db: RedisCluster) -> None:
    async def scenario() -> None:
        db = cluster.async_client()
        try:
            q = AsyncWorkQueue(KeyPrefix(NAME))
            await q.add_items(db, [Item(b"", id=f"i{k}") for k in range(4)])
            await q.set_rate_limit(db, RateLimit(10, 1))  # one item every 100 ms
            assert await q.lease(db, 30, block=False) is not None
            assert await q.lease(db, 30, block=False) is None
            started = time.monotonic()
            assert await q.lease(db, 30, timeout=5) is not None
            assert 0.05 <= time.monotonic() - started < 1.5
            assert (await q.stats(db)).rate_limit == RateLimit(10, 1)
        finally:
            await db.aclose()

    asyncio.run(asyncio.wait_for(scenario(), 60))
