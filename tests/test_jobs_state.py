"""Job control by id: ``state`` and ``states`` tell where an item is (queued, delayed, leased,
expired, dead, gone), in one script call of bounded cost, on both APIs and every backend, on a
Redis Cluster with a ``{tag}`` prefix, and through ``rwq item``."""

from __future__ import annotations

import json
import time

import pytest
import redis
from redis.cluster import RedisCluster

from helpers import dump_state, keys_of
from redis_work_queue import InvalidArgumentError, Item, ItemState, KeyPrefix, WorkQueue
from redis_work_queue.keyprefix import QueueKeys
from test_cli_ops import rwq

QUEUE = KeyPrefix("st")
QUEUE_SHARDS = (1, 4)
#: Tests that read this queue's keys or its order across all items: unsharded only.
SHARDS_SKIP = {
    "test_delayed_item_leased_early_and_a_lapsed_delay_lease",
    "test_states_of_many_in_order",
}
QUEUE_OPTIONS = {"max_deliveries": 2}
KEYS = QueueKeys(QUEUE)


def lease(db: redis.Redis, queue: WorkQueue, secs: float = 30) -> Item:
    item = queue.lease(db, secs, block=False)
    assert item is not None
    return item


def test_each_state(db: redis.Redis, queue: WorkQueue) -> None:
    before = time.time()
    queue.add_item(db, Item(b"a", id="a"))
    queue.add_item(db, Item(b"later", id="later"), delay=60)
    assert queue.state(db, "a") == ItemState("a", "queued")
    later = queue.state(db, "later")
    assert later.state == "delayed" and later.lease_left is None
    assert later.due_at is not None and before + 59 < later.due_at < time.time() + 61
    assert queue.state(db, "never added") == ItemState("never added", "gone")

    a = lease(db, queue)
    leased = queue.state(db, "a")
    assert (leased.state, leased.deliveries, leased.reason) == ("leased", 1, None)
    assert leased.lease_left is not None and 29 < leased.lease_left <= 30
    assert leased.leased_at is not None and before - 1 < leased.leased_at < time.time() + 1

    assert queue.release(db, a, reason="first")
    assert queue.state(db, "a") == ItemState("a", "queued", deliveries=1, reason="first")

    a = lease(db, queue)
    db.delete(keys_of(queue, "a").lease("a"))  # its lease ran out; no clean has run
    assert queue.state(db, "a") == ItemState("a", "expired", deliveries=2, reason="first")
    report = queue.light_clean(db)
    assert report.dead == 1  # its last delivery: buried
    assert queue.state(db, "a") == ItemState("a", "dead", deliveries=2, reason="lease expired")

    queue.add_item(db, Item(b"b", id="b"))
    b = lease(db, queue)
    assert queue.complete(db, b)
    assert queue.state(db, "b") == ItemState("b", "gone")


def test_states_of_many_in_order(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_items(db, [Item(b"x", id=f"i{n}") for n in range(600)])
    lease(db, queue)  # i0
    ids = [f"i{n}" for n in range(600)] + ["missing"]
    found = queue.states(db, ids)
    assert [s.id for s in found] == ids
    assert [s.state for s in found] == ["leased"] + ["queued"] * 599 + ["gone"]
    assert queue.states(db, []) == []


def test_delayed_item_leased_early_and_a_lapsed_delay_lease(
    db: redis.Redis, queue: WorkQueue
) -> None:
    queue.add_item(db, Item(b"d", id="d"), delay=60)
    db.delete(
        keys_of(queue, "d").lease("d")
    )  # the delay lease lapsed; the entry waits for a promotion
    assert queue.state(db, "d").state == "delayed"
    db.zrem(KEYS.delayed, "d")
    db.set(keys_of(queue, "d").lease("d"), "delayed")  # a delay lease that outlived its entry
    assert queue.state(db, "d").state == "queued"


def test_an_item_held_by_a_deep_clean_reads_as_queued(db: redis.Redis, queue: WorkQueue) -> None:
    db.set(keys_of(queue, "h").item("h"), b"lost")
    db.set(keys_of(queue, "h").lease("h"), "deep-clean:run", px=30_000)
    assert queue.state(db, "h") == ItemState("h", "queued")


def test_reference_client_lease(db: redis.Redis, queue: WorkQueue) -> None:
    """An item leased by a client of the reference design (its own lease value, no delivery
    count) reads as leased while its lease lives."""
    db.set(keys_of(queue, "r").item("r"), b"ref")
    db.lpush(KEYS.processing, "r")
    db.set(keys_of(queue, "r").lease("r"), "session-of-another-client", ex=30)
    found = queue.state(db, "r")
    assert (found.state, found.deliveries, found.leased_at) == ("leased", 0, None)
    assert found.lease_left is not None and found.lease_left > 25


def test_reading_changes_nothing(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"a", id="a"))
    lease(db, queue)
    queue.add_item(db, Item(b"b", id="b"), delay=60)
    before = dump_state(db, 10_000)
    queue.states(db, ["a", "b", "c"])
    assert dump_state(db, 10_000) == before


@pytest.mark.parametrize("bad", [None, 1, b"id", ["a"]])
def test_a_bad_id_is_refused(db: redis.Redis, queue: WorkQueue, bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="item_id"):
        queue.state(db, bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["abc", b"abc", ["a", 2], 5])
def test_bad_ids_are_refused_before_any_call(
    db: redis.Redis, queue: WorkQueue, bad: object
) -> None:
    with pytest.raises(InvalidArgumentError, match="ids"):
        queue.states(db, bad)  # type: ignore[arg-type]


def test_wrong_type_is_an_error(db: redis.Redis, queue: WorkQueue) -> None:
    db.set(keys_of(queue, "w").item("w"), b"w")
    db.hset(keys_of(queue, "w").lease("w"), "x", "y")
    with pytest.raises(Exception, match="WRONGTYPE"):
        queue.state(db, "w")


def test_no_list_is_read_for_a_queued_item_of_a_long_queue(real_db: redis.Redis) -> None:
    """The cost is bounded: on a queue of 50,000 items, the state of the last one added (the
    furthest from the leasing end) runs no list command at all."""
    queue = WorkQueue(QUEUE)
    queue.add_items(real_db, [Item(b"", id=f"i{n}") for n in range(50_000)])
    queue.state(real_db, "i0")  # the script is loaded
    real_db.config_resetstat()
    assert queue.state(real_db, "i49999").state == "queued"
    stats = real_db.info("commandstats")
    lists = {"cmdstat_lpos", "cmdstat_lrange", "cmdstat_lindex", "cmdstat_llen"}
    assert not lists & set(stats)
    # One call, as a function or as a script, whichever the server takes.
    calls = sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("evalsha", "fcall"))
    assert calls == 1 and "cmdstat_eval" not in stats


def test_on_a_cluster_with_a_hash_tag(cluster_db: RedisCluster) -> None:
    queue = WorkQueue(KeyPrefix("app:{jobs}:st"), max_deliveries=1)
    queue.add_items(cluster_db, [Item(b"a", id="a"), Item(b"b", id="b")])
    queue.add_item(cluster_db, Item(b"later", id="later"), delay=60)
    a = queue.lease(cluster_db, 30, block=False)
    assert a is not None
    found = queue.states(cluster_db, ["a", "b", "later", "none"])
    assert [s.state for s in found] == ["leased", "queued", "delayed", "gone"]
    assert queue.release(cluster_db, a, reason="bad")
    assert queue.state(cluster_db, "a") == ItemState("a", "dead", deliveries=1, reason="bad")


def test_rwq_item(real_db: redis.Redis, redis_url: str) -> None:
    queue = WorkQueue(QUEUE)
    queue.add_item(real_db, Item(b"a", id="a"))
    lease(real_db, queue)
    result = rwq("--url", redis_url, "item", "st", "a", "--json")
    assert result.returncode == 0, result.stderr
    row = json.loads(result.stdout)
    assert (row["id"], row["state"], row["deliveries"]) == ("a", "leased", 1)
    assert 25 < row["lease_left"] <= 30
    result = rwq("--url", redis_url, "item", "st", "nothing")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["id", "nothing", "state", "gone", "deliveries", "0"]
