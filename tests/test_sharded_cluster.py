"""A sharded queue on a real Redis Cluster of three primaries: the shards spread over the
primaries, the whole API on the logical queue, blocking wake-ups and the idle call rate
(measured), the asyncio twin, and a primary SIGKILLed mid-run.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from redis.cluster import RedisCluster

from plugins.queues import CLUSTER_SHARDS
from redis_work_queue import AsyncWorkQueue, Item, KeyPrefix, WorkQueue
from redis_work_queue.ops.sharded import SHARD_WAIT_SLICE, key_slot, shard_index, shard_prefix
from servers import Cluster, in_sync, info, poll
from test_cluster import Ledger, killed_primary

pytestmark = pytest.mark.real_redis

SHARDS = 12


def sharded(name: str = "jobs", **options: Any) -> WorkQueue:
    return WorkQueue(KeyPrefix(name), shards=SHARDS, **options)


def items(n: int, prefix: str = "i") -> list[Item]:
    return [Item(f"d{i}".encode(), id=f"{prefix}{i}") for i in range(n)]


def script_calls_by_primary(cluster: Cluster) -> dict[int, int]:
    """The calls a client sent to each primary (scripts and blocking pops; not the commands
    the scripts ran)."""
    found = {}
    for node in cluster.primaries():
        stats = node.admin().info("commandstats")
        found[node.port] = sum(
            int(stats.get(f"cmdstat_{c}", {}).get("calls", 0))
            for c in ("fcall", "evalsha", "eval", "blpop", "brpoplpush")
        )
    return found


def reset_stats(cluster: Cluster) -> None:
    for node in cluster.primaries():
        node.admin().config_resetstat()


def test_shards_spread_over_the_primaries(cluster: Cluster, cluster_db: RedisCluster) -> None:
    """The 12 shards fall 4, 4 and 4 on the three primaries (each tag's slot, as the server
    computes it, in its range), and their items with them."""
    q = sharded()
    shards_on = Counter()
    for index, shard in enumerate(q.ops.shard_ops):
        tag = shard.keys.prefix.strip("{}")
        assert cluster_db.cluster_keyslot(shard.keys.queue) == key_slot(tag), tag
        assert shard.keys.prefix == shard_prefix("jobs", index, SHARDS)
        shards_on[cluster.primary_for(shard.keys.queue).port] += 1
    assert sorted(shards_on.values()) == [4, 4, 4], shards_on
    assert q.add_items(cluster_db, items(600)) == [True] * 600
    per_node = Counter()
    for node in cluster.primaries():
        per_node[node.port] = sum(1 for _ in node.admin().scan_iter("{jobs:*}:item:*"))
    assert len(per_node) == 3 and min(per_node.values()) > 100, per_node
    assert sum(per_node.values()) == 600
    assert q.add_items(cluster_db, items(600)) == [False] * 600


#: The queues of the suites that run on the cluster too (``QUEUE_SHARDS``, plugins/queues.py).
SUITE_QUEUES = (
    *("add", "lease", "done", "delayed", "ttl", "tally", "insp", "st", "jc", "jr"),
    *("tok", "ctx", "lc", "dc", "dl", "hi", "lo"),
)


def test_the_suites_queues_span_at_least_two_primaries(
    cluster: Cluster, cluster_db: RedisCluster
) -> None:
    """The suites' sharded runs on the cluster (plugins/queues.py) have their shards on at
    least two primaries, so each of their calls that covers every shard crosses nodes; the
    ``queue`` fixture checks its own queue the same way for every such test."""
    for name in SUITE_QUEUES:
        q = WorkQueue(KeyPrefix(name), shards=CLUSTER_SHARDS)
        q.add_items(cluster_db, [Item(b"", id=f"{name}{i}") for i in range(40)])
        holding = {
            node.port
            for node in cluster.primaries()
            if any(True for _ in node.admin().scan_iter(f"{{{name}:*}}:item:*"))
        }
        assert holding == spread_over(cluster, q), name
        assert len(holding) >= 2, (name, holding)


def spread_over(cluster: Cluster, q: WorkQueue) -> set[int]:
    """The ports of the primaries that own the shards of ``q``."""
    return {cluster.primary_for(shard.keys.queue).port for shard in q.ops.shard_ops}


def test_whole_api_on_the_cluster(cluster_db: RedisCluster) -> None:
    q = sharded(max_deliveries=1)
    q.add_items(cluster_db, items(30))
    assert q.add_item(cluster_db, Item(b"x", id="i4")) is False
    assert q.stats(cluster_db).queued == 30 and q.queue_len(cluster_db) == 30
    assert len(q.peek(cluster_db, 0, 40)) == 30
    leased = q.lease_many(cluster_db, 30, 10, block=False)
    assert len(leased) == 10
    assert q.renew_many(cluster_db, leased, 60) == [True] * 10
    assert len(q.pending(cluster_db, 0, 50)) == 10
    assert q.release(cluster_db, leased[0], reason="bad")
    assert q.give_back(cluster_db, leased[1:2]) == [True]
    assert q.complete_many(cluster_db, leased[2:]) == leased[2:]
    assert [d.id for d in q.dead_letters(cluster_db)] == [leased[0].id()]
    assert q.requeue_dead(cluster_db) == 1
    rest = []
    while (item := q.lease(cluster_db, 30, block=False)) is not None:
        rest.append(item)
    assert len(rest) == 22
    assert all(q.complete(cluster_db, i) for i in rest)
    counts = q.counts(cluster_db)
    assert (counts.added, counts.completed) == (30, 30)
    assert sum(r.counts.completed for r in q.shard_stats(cluster_db)) == 30
    q.add_items(cluster_db, items(5, "z"))
    assert q.light_clean(cluster_db).examined >= 0
    assert q.deep_clean(cluster_db).examined == 5
    assert q.flush(cluster_db).items == 5


def test_pipelined_calls_go_to_their_node_without_asking_for_keys(
    cluster: Cluster, cluster_db: RedisCluster
) -> None:
    """A sharded batch add and the cleans send their script calls as one pipeline per node,
    each routed by the library: redis-py's cluster pipeline sends no COMMAND GETKEYS (a round
    trip carrying the script's source, before the pipeline) for any of them."""
    q = sharded()
    q.add_items(cluster_db, items(60))
    reset_stats(cluster)
    q.add_items(cluster_db, items(60, "j"))
    q.lease_many(cluster_db, 30, 20, block=False)
    q.light_clean(cluster_db)
    q.deep_clean(cluster_db)
    calls: Counter[str] = Counter()
    for node in cluster.primaries():
        for name, row in node.admin().info("commandstats").items():
            calls[name] += int(row["calls"])
    assert calls["cmdstat_eval"] + calls["cmdstat_fcall"] >= SHARDS, calls
    assert calls["cmdstat_command|getkeys"] == 0, calls


def test_asyncio_twin_on_the_cluster(cluster: Cluster) -> None:
    async def body() -> None:
        db = cluster.async_client()
        q = AsyncWorkQueue(KeyPrefix("ajobs"), shards=SHARDS)
        try:
            assert await q.add_items(db, items(40)) == [True] * 40
            got = await q.lease_many(db, 30, 40, block=False)
            assert len(got) == 40
            assert await q.complete_many(db, got) == got
            assert (await q.stats(db)).queued == 0
            waiter = asyncio.ensure_future(q.lease(db, 30, timeout=5))
            await asyncio.sleep(0.1)
            await q.add_item(db, Item(b"late", id="late"))
            item = await waiter
            assert item is not None and item.id() == "late"
        finally:
            await db.aclose()

    cluster.wait_healthy()
    cluster.flushall()
    asyncio.run(body())


def test_blocking_wake_up_latency_and_idle_calls(
    cluster: Cluster, cluster_db: RedisCluster
) -> None:
    """An item added to a random shard wakes a blocked worker within SHARD_WAIT_SLICE (plus a
    look at each shard); an idle worker sends a bounded number of calls a second."""
    q = sharded()
    latencies: list[float] = []
    for n in range(20):
        got: dict[str, Any] = {}

        def worker(got: dict[str, Any] = got) -> None:
            got["item"] = q.lease(cluster.client(), 30, timeout=5)
            got["at"] = time.monotonic()

        thread = threading.Thread(target=worker)
        thread.start()
        time.sleep(0.05 + 0.4 * (n % 5) / 5)
        added = time.monotonic()
        q.add_item(cluster_db, Item(b"w", id=f"w{n}"))
        thread.join(6)
        assert got["item"] is not None
        latencies.append(got["at"] - added)
    latencies.sort()
    median, p99 = statistics.median(latencies), latencies[-1]
    print(f"\nsharded wake-up on the cluster: median {median:.3f} s, p99 {p99:.3f} s")
    assert p99 < SHARD_WAIT_SLICE + 0.5, latencies
    # Idle: workers blocked on an empty queue for a while.
    workers, secs = 4, 3.0
    stop = time.monotonic() + secs
    reset_stats(cluster)

    def idle() -> None:
        db = cluster.client()
        while time.monotonic() < stop:
            q.lease(db, 30, timeout=max(stop - time.monotonic(), 0.01))

    threads = [threading.Thread(target=idle) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rate = sum(script_calls_by_primary(cluster).values()) / secs / workers
    print(f"idle calls per second per worker ({SHARDS} shards): {rate:.1f}")
    # A lease looks at every shard once, then each round blocks on its own shard (a look, the
    # wait, a look) and looks at the others: SHARDS + 2 calls per slice.
    bound = SHARDS / secs + (SHARDS + 2) / SHARD_WAIT_SLICE
    assert rate <= bound * 1.1, (rate, bound)


# A primary killed mid-run --------------------------------------------------------------------


@pytest.fixture
def ledger_run(cluster: Cluster) -> Iterator[tuple[WorkQueue, Ledger, list[str]]]:
    cluster.wait_healthy()
    cluster.flushall()
    yield sharded("fail", replicas=1, replica_timeout=0.5), Ledger(), []


def test_a_primary_killed_mid_run_loses_nothing_acknowledged(
    cluster: Cluster, ledger_run: tuple[WorkQueue, Ledger, list[str]]
) -> None:
    """Producers and workers on a queue of 12 shards over three primaries (each write waits
    for a replica); one primary is SIGKILLed. Nothing acknowledged is lost, nothing completed
    is leased again, the other primaries' shards are drained during the failover and the
    killed primary's after it."""
    q, ledger, leased_log = ledger_run
    stop = threading.Event()
    victim_shard = 0
    victim_key = q.ops.shard_ops[victim_shard].keys.queue
    done_at: dict[str, float] = {}
    leased_after: list[tuple[str, float]] = []
    lock = threading.Lock()

    def make() -> RedisCluster:
        return cluster.client(socket_timeout=2, socket_connect_timeout=0.5)

    def producer(name: str) -> None:
        db = make()
        n = 0
        while not stop.is_set():
            item_id = f"{name}-{n}"
            n += 1
            try:
                q.add_item(db, Item(b"p", id=item_id))
            except Exception as err:
                ledger.error(err, "add")
                ledger.add_unsure.append(item_id)
                time.sleep(0.05)
                continue
            with lock:
                ledger.added.append(item_id)
                if ledger.killed_at:
                    ledger.added_after += 1

    def consumer() -> None:
        db = make()
        while not stop.is_set():
            try:
                item = q.lease(db, 30, timeout=0.3)
            except Exception as err:
                ledger.error(err, "lease")
                time.sleep(0.05)
                continue
            if item is None:
                continue
            with lock:
                leased_log.append(item.id())
                leased_after.append((item.id(), time.monotonic()))
            try:
                done = q.complete(db, item)
            except Exception as err:
                ledger.error(err, "complete")
                ledger.complete_unsure.append(item.id())
                time.sleep(0.05)
                continue
            if done:
                with lock:
                    ledger.completed.append(item.id())
                    done_at[item.id()] = time.monotonic()
                    if ledger.killed_at:
                        ledger.completed_after += 1

    threads = [threading.Thread(target=producer, args=(f"p{i}",)) for i in range(2)]
    threads += [threading.Thread(target=consumer) for _ in range(3)]
    other_shards_during: int = 0
    with killed_primary(cluster, victim_key) as (primary, replica):
        victims = {
            i for i, s in enumerate(q.ops.shard_ops) if cluster.primary_for(s.keys.queue) is primary
        }
        for t in threads:
            t.start()
        try:
            poll(lambda: len(ledger.completed) >= 200, 20, "the workers to get going", 0.01)
            ledger.killed_at = time.monotonic()
            primary.kill()
            poll(
                lambda: info(replica, "replication").get("role") == "master",
                20,
                "the replica to be promoted",
                0.05,
            )
            promoted_at = time.monotonic()
            with lock:
                other_shards_during = sum(
                    1
                    for i, at in done_at.items()
                    if ledger.killed_at < at < promoted_at and shard_index(i, SHARDS) not in victims
                )
            primary.launch()
            poll(lambda: in_sync(replica, primary), 20, "the old primary to rejoin")
            poll(
                lambda: (
                    ledger.completed_after >= 300
                    and any(
                        shard_index(i, SHARDS) in victims and at > promoted_at
                        for i, at in list(done_at.items())
                    )
                ),
                20,
                lambda: f"the workers to carry on (errors {ledger.errors}, {ledger.last_error})",
                0.02,
            )
        finally:
            stop.set()
            for t in threads:
                t.join(10)
    db = cluster.client()
    done = set(ledger.completed)
    unsure = set(ledger.complete_unsure)
    pipe = db.pipeline(transaction=False)
    for item_id in ledger.added:
        pipe.exists(q.ops.shard_for(item_id).keys.item(item_id))
    present = dict(zip(ledger.added, pipe.execute(), strict=True))
    lost = [i for i in ledger.added if i not in done and i not in unsure and not present[i]]
    leased_again = [i for i, at in leased_after if i in done_at and at > done_at[i]]
    figures = {
        "added": len(ledger.added),
        "completed": len(ledger.completed),
        "lost": len(lost),
        "leased again after completion": len(leased_again),
        "completed on other primaries during the failover": other_shards_during,
        "errors": dict(ledger.errors),
        "last errors": ledger.last_error,
    }
    print(f"\nsharded failover: {figures}")
    assert not lost, figures
    assert not leased_again, figures
    assert other_shards_during > 0, figures
    assert not [i for i in ledger.completed if present.get(i)], figures
