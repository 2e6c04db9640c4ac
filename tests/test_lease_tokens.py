"""Lease tokens, renew, release (at once, delayed, with a reason) and delivery counts."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from helpers import get, keys_of, lrange, wait_for, wake_slice
from lifecycle_helpers import (
    assert_no_bookkeeping,
    blocked_clients,
    deliveries_of,
    foreign_deep_clean,
    hash_fields,
    keys_under,
    reason_of,
)
from redis_work_queue import InvalidArgumentError, Item, KeyPrefix, WorkQueue
from redis_work_queue.ops.lease import WAIT_SLICE_SECS

P = "tok"
QUEUE = KeyPrefix(P)
QUEUE_SHARDS = (1, 4)
#: Tests that read this queue's keys or its order across all items: unsharded only.
SHARDS_SKIP = {
    "test_complete_removes_all_bookkeeping",
    "test_delayed_item_is_not_leasable_before_its_delay",
    "test_delayed_items_come_back_in_due_order",
    "test_delivery_count_counts_releases_and_expiries",
    "test_delivery_counts_are_per_item",
    "test_forged_token_is_refused",
    "test_release_after_expiry_returns_false_and_changes_nothing",
    "test_release_gives_the_item_back_at_once",
    "test_release_keeps_the_reason",
    "test_release_twice_second_is_refused",
    "test_renew_after_expiry_returns_false_and_changes_nothing",
    "test_renew_extends_a_held_lease",
    "test_renew_many_extends_the_leases_still_held",
    "test_stale_holder_cannot_release_the_new_holders_lease",
}
SHORT = 0.05  # a lease that the tests let expire
EXPIRED = 0.12  # long enough for a SHORT lease to be gone


def lease_now(db: redis.Redis, queue: WorkQueue, lease_secs: float = 30) -> Item:
    item = queue.lease(db, lease_secs, block=False)
    assert item is not None
    return item


def expire_and_relet(db: redis.Redis, queue: WorkQueue, first: Item) -> Item:
    """Let ``first``'s SHORT lease expire, clean, and lease the item again for a long time.

    The queue must hold no other item (a requeued item goes to the back of the line).
    """
    time.sleep(EXPIRED)
    assert not db.exists(keys_of(queue, first.id()).lease(first.id()))
    assert queue.light_clean(db).requeued == 1
    second = lease_now(db, queue)
    assert second.id() == first.id()
    return second


# Tokens -----------------------------------------------------------------------------------------


def test_lease_writes_its_token_as_the_lease_value(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"d", id="a"))
    item = lease_now(db, queue)
    assert isinstance(item.lease_token, str)
    assert len(item.lease_token) >= 16
    assert get(db, keys_of(queue, "a").lease("a")) == item.lease_token.encode()
    assert item.deliveries == 1


def test_every_lease_of_the_same_item_gets_a_fresh_token(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"d", id="a"))
    tokens = []
    for n in range(1, 6):
        item = lease_now(db, queue)
        assert item.deliveries == n
        assert get(db, keys_of(queue, "a").lease("a")) == item.lease_token.encode()
        tokens.append(item.lease_token)
        assert queue.release(db, item)
    assert len(set(tokens)) == 5


def test_tokens_differ_between_queue_instances_and_clients(db: redis.Redis) -> None:
    one, two = WorkQueue(KeyPrefix(P)), WorkQueue(KeyPrefix(P))
    for i in range(10):
        one.add_item(db, Item(b"", id=str(i)))
    tokens = {lease_now(db, q).lease_token for q in (one, two) * 5}
    assert len(tokens) == 10


# Renew ------------------------------------------------------------------------------------------


def test_renew_extends_a_held_lease(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"d", id="a"))
    item = lease_now(db, queue, 1)
    assert db.pttl(keys_of(queue, "a").lease("a")) <= 1000
    assert queue.renew(db, item, 50) is True
    assert 49_000 < db.pttl(keys_of(queue, "a").lease("a")) <= 50_000
    assert get(db, keys_of(queue, "a").lease("a")) == item.lease_token.encode()
    # Renewing can also shorten the lease: it is "lease_secs from now".
    assert queue.renew(db, item, 2.5) is True
    assert 2_000 < db.pttl(keys_of(queue, "a").lease("a")) <= 2_500
    assert lrange(db, f"{P}:processing") == [b"a"]
    assert deliveries_of(db, P, "a") == 1  # renewing is not a delivery


def test_renew_many_extends_the_leases_still_held(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_items(db, [Item(b"d", id=str(n)) for n in range(5)])
    items = queue.lease_many(db, 1, 5, block=False)
    lost = items[4]
    assert queue.complete(db, lost)
    assert queue.renew_many(db, items, 50) == [True, True, True, True, False]
    for item in items[:4]:
        assert 49_000 < db.pttl(keys_of(queue, item.id()).lease(item.id())) <= 50_000
        assert deliveries_of(db, P, item.id()) == 1
    assert queue.renew_many(db, [], 50) == []
    assert queue.renew_many(db, items[:1], 20) == [True]
    with pytest.raises(InvalidArgumentError):
        queue.renew_many(db, [items[0], Item(b"never leased")], 50)
    assert db.pttl(keys_of(queue, items[0].id()).lease(items[0].id())) <= 20_000  # nothing was sent
    with pytest.raises(InvalidArgumentError):
        queue.renew_many(db, items, 0)


def test_give_back_returns_items_uncounted_to_the_leasing_end(
    db: redis.Redis, queue_kind: Callable[..., WorkQueue]
) -> None:
    queue = queue_kind(KeyPrefix(P), max_deliveries=1)
    queue.add_items(db, [Item(b"d", id=str(n)) for n in range(4)])
    items = queue.lease_many(db, 30, 3, block=False)  # 0, 1, 2: each at its last delivery
    assert queue.complete(db, items[2])
    assert queue.give_back(db, items, reason="stopping") == [True, True, False]
    assert lrange(db, f"{P}:processing") == []
    assert {deliveries_of(db, P, i.id()) for i in items[:2]} == {0}
    # Back at the leasing end, before the item that was never leased, and not buried.
    again = queue.lease_many(db, 30, 3, block=False)
    assert sorted(i.id() for i in again[:2]) == ["0", "1"] and again[2].id() == "3"
    assert queue.dead_count(db) == 0
    assert queue.give_back(db, []) == []


def test_renew_keeps_a_lease_alive_past_its_first_expiry(
    bytes_db: redis.Redis, queue: WorkQueue
) -> None:
    db = bytes_db
    # Three primaries' calls of a cleaning take longer: a longer lease on a cluster.
    secs = 0.45 if isinstance(db, RedisCluster) else 0.15
    queue.add_item(db, Item(b"d", id="a"))
    item = lease_now(db, queue, secs)
    for _ in range(3):
        time.sleep(secs * 2 / 3)
        assert queue.renew(db, item, secs)
        assert queue.light_clean(db).requeued == 0
    assert queue.lease(db, 30, block=False) is None
    assert queue.complete(db, item)


def test_renew_after_expiry_returns_false_and_changes_nothing(
    bytes_db: redis.Redis, queue: WorkQueue
) -> None:
    db = bytes_db
    queue.add_item(db, Item(b"d", id="a"))
    item = lease_now(db, queue, SHORT)
    time.sleep(EXPIRED)
    assert queue.renew(db, item, 30) is False
    assert not db.exists(keys_of(queue, "a").lease("a"))  # not recreated
    assert lrange(db, f"{P}:processing") == [b"a"]
    assert queue.light_clean(db).requeued == 1  # still recoverable


def test_stale_holder_cannot_renew_the_new_holders_lease(
    bytes_db: redis.Redis, queue: WorkQueue
) -> None:
    db = bytes_db
    queue.add_item(db, Item(b"d", id="a"))
    stale = lease_now(db, queue, SHORT)
    holder = expire_and_relet(db, queue, stale)
    holder_token = get(db, keys_of(queue, "a").lease("a"))
    assert queue.renew(db, holder, 40)
    ttl = db.pttl(keys_of(queue, "a").lease("a"))
    assert queue.renew(db, stale, 3600) is False
    assert get(db, keys_of(queue, "a").lease("a")) == holder_token
    assert db.pttl(keys_of(queue, "a").lease("a")) <= ttl
    assert queue.renew(db, holder, 30)


def test_renew_after_complete_or_release_returns_false(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"d", id="a"))
    queue.add_item(db, Item(b"d", id="b"))
    first, second = lease_now(db, queue), lease_now(db, queue)
    assert queue.complete(db, first)
    assert queue.renew(db, first, 30) is False
    assert not db.exists(keys_of(queue, first.id()).lease(first.id()))
    assert queue.release(db, second, delay=5)
    assert queue.renew(db, second, 30) is False
    assert queue.release(db, second) is False  # the delayed item is not the caller's any more


def test_renew_and_release_need_a_leased_item(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"d", id="a"))
    with pytest.raises(InvalidArgumentError):
        queue.renew(db, Item(b"d", id="a"), 30)
    with pytest.raises(InvalidArgumentError):
        queue.release(db, Item(b"d", id="a"))
    with pytest.raises(InvalidArgumentError):
        queue.renew(db, "a", 30)  # type: ignore[arg-type]
    item = lease_now(db, queue)
    for bad in (0, -1, float("nan"), float("inf"), "5"):
        with pytest.raises(InvalidArgumentError):
            queue.renew(db, item, bad)  # type: ignore[arg-type]
    for bad_delay in (-0.5, float("nan")):
        with pytest.raises(InvalidArgumentError):
            queue.release(db, item, delay=bad_delay)
    with pytest.raises(InvalidArgumentError):
        queue.release(db, item, reason=42)  # type: ignore[arg-type]
    assert get(db, keys_of(queue, "a").lease("a")) == item.lease_token.encode()  # nothing was sent


def test_forged_token_is_refused(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"d", id="a"))
    item = lease_now(db, queue)
    forged = Item(b"d", id="a")
    forged.lease_token = "0" * len(item.lease_token)
    assert queue.renew(db, forged, 100) is False
    assert queue.release(db, forged) is False
    assert get(db, keys_of(queue, "a").lease("a")) == item.lease_token.encode()
    assert lrange(db, f"{P}:processing") == [b"a"]


# Release ----------------------------------------------------------------------------------------


def test_release_gives_the_item_back_at_once(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"payload", id="a"))
    item = lease_now(db, queue)
    assert queue.release(db, item) is True
    assert not db.exists(keys_of(queue, "a").lease("a"))
    assert lrange(db, f"{P}:processing") == []
    assert lrange(db, f"{P}:queue") == [b"a"]
    again = lease_now(db, queue)
    assert (again.id(), again.data(), again.deliveries) == ("a", b"payload", 2)
    assert again.lease_token != item.lease_token


def test_release_keeps_the_reason(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"d", id="a"))
    item = lease_now(db, queue)
    assert queue.release(db, item, reason="boom: ünïcode")
    assert reason_of(db, P, "a") == "boom: ünïcode"
    item = lease_now(db, queue)
    assert reason_of(db, P, "a") == "boom: ünïcode"  # kept while the item lives
    assert queue.release(db, item, reason="second")
    assert reason_of(db, P, "a") == "second"


def test_release_twice_second_is_refused(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"d", id="a"))
    item = lease_now(db, queue)
    assert queue.release(db, item, reason="first")
    assert queue.release(db, item, reason="second") is False
    assert lrange(db, f"{P}:queue") == [b"a"]  # queued once, not twice
    assert reason_of(db, P, "a") == "first"


def test_release_after_complete_returns_false(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"d", id="a"))
    item = lease_now(db, queue)
    assert queue.complete(db, item)
    assert queue.release(db, item, reason="late") is False
    assert keys_under(db, f"{P}:") == set()


def test_release_after_expiry_returns_false_and_changes_nothing(
    bytes_db: redis.Redis, queue: WorkQueue
) -> None:
    db = bytes_db
    queue.add_item(db, Item(b"d", id="a"))
    item = lease_now(db, queue, SHORT)
    time.sleep(EXPIRED)
    assert queue.release(db, item, reason="too late") is False
    assert lrange(db, f"{P}:processing") == [b"a"]
    assert lrange(db, f"{P}:queue") == []
    assert reason_of(db, P, "a") is None


def test_stale_holder_cannot_release_the_new_holders_lease(
    bytes_db: redis.Redis, queue: WorkQueue
) -> None:
    db = bytes_db
    queue.add_item(db, Item(b"d", id="a"))
    stale = lease_now(db, queue, SHORT)
    holder = expire_and_relet(db, queue, stale)
    before = {
        "lease": get(db, keys_of(queue, "a").lease("a")),
        "processing": lrange(db, f"{P}:processing"),
        "queue": lrange(db, f"{P}:queue"),
        "deliveries": deliveries_of(db, P, "a"),
        "reason": reason_of(db, P, "a"),
    }
    assert queue.release(db, stale, reason="stale", delay=0) is False
    assert queue.release(db, stale, reason="stale", delay=10) is False
    after = {
        "lease": get(db, keys_of(queue, "a").lease("a")),
        "processing": lrange(db, f"{P}:processing"),
        "queue": lrange(db, f"{P}:queue"),
        "deliveries": deliveries_of(db, P, "a"),
        "reason": reason_of(db, P, "a"),
    }
    assert after == before
    assert before["deliveries"] == 2
    # The new holder is unaffected: it still renews and releases.
    assert queue.renew(db, holder, 30)
    assert queue.release(db, holder, reason="mine")
    assert reason_of(db, P, "a") == "mine"


# Delivery counts and bookkeeping ----------------------------------------------------------------


def test_delivery_count_counts_releases_and_expiries(
    bytes_db: redis.Redis, queue: WorkQueue
) -> None:
    db = bytes_db
    queue.add_item(db, Item(b"d", id="a"))
    item = lease_now(db, queue)
    assert item.deliveries == 1
    assert queue.release(db, item)
    item = lease_now(db, queue, SHORT)
    assert item.deliveries == 2
    item = expire_and_relet(db, queue, item)
    assert item.deliveries == 3
    assert deliveries_of(db, P, "a") == 3
    assert reason_of(db, P, "a") == "lease expired"


def test_delivery_counts_are_per_item(db: redis.Redis, queue: WorkQueue) -> None:
    for i in range(3):
        queue.add_item(db, Item(b"", id=f"i{i}"))
    for _ in range(2):
        for _ in range(3):
            assert queue.release(db, lease_now(db, queue))
    counts = {}
    while (item := queue.lease(db, 30, block=False)) is not None:
        counts[item.id()] = item.deliveries
    assert counts == {"i0": 3, "i1": 3, "i2": 3}


@pytest.mark.parametrize("limit", [None, 2])
def test_a_readded_id_counts_from_one_after_a_foreign_completion(
    db: redis.Redis, limit: int | None
) -> None:
    """Another client of the design completes an item the reference way (data key, lease key,
    processing entry) and knows nothing of the delivery counts. An item added later under the
    same id is a new item: its first delivery is 1 (and it is not dead-lettered unseen)."""
    queue = WorkQueue(KeyPrefix(P), max_deliveries=limit)
    queue.add_item(db, Item(b"old", id="a"))
    assert queue.release(db, lease_now(db, queue), reason="retry")
    assert lease_now(db, queue).deliveries == 2
    db.delete(keys_of(queue, "a").item("a"))  # the foreign completion
    db.lrem(f"{P}:processing", -1, "a")
    db.delete(keys_of(queue, "a").lease("a"))
    assert queue.add_item(db, Item(b"new", id="a"))
    item = queue.lease(db, 30, block=False)
    assert item is not None, "the new item was dead-lettered before its first delivery"
    assert (item.data(), item.deliveries) == (b"new", 1)
    assert queue.dead_count(db) == 0


def test_complete_removes_all_bookkeeping(bytes_db: redis.Redis, queue: WorkQueue) -> None:
    db = bytes_db
    for i in range(4):
        queue.add_item(db, Item(b"d", id=f"i{i}"))
    for _ in range(4):
        assert queue.release(db, lease_now(db, queue), reason="retry")
    lease_now(db, queue, SHORT)
    time.sleep(EXPIRED)
    assert queue.light_clean(db).requeued == 1
    assert hash_fields(db, f"{P}:deliveries") == {"i0", "i1", "i2", "i3"}
    assert hash_fields(db, f"{P}:reasons") == {"i0", "i1", "i2", "i3"}
    done = []
    while (leased := queue.lease(db, 30, block=False)) is not None:
        assert queue.complete(db, leased)
        assert_no_bookkeeping(db, P, leased.id())
        done.append((leased.id(), leased.deliveries))
    assert sorted(done) == [("i0", 3), ("i1", 2), ("i2", 2), ("i3", 2)]
    assert not db.exists(f"{P}:deliveries")
    assert not db.exists(f"{P}:reasons")
    assert keys_under(db, f"{P}:") == set()


def test_completing_a_delayed_item_leaves_nothing_behind(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"d", id="a"))
    item = lease_now(db, queue)
    assert queue.release(db, item, delay=30, reason="later")
    assert queue.complete(db, Item(b"", id="a"))
    assert_no_bookkeeping(db, P, "a")
    assert keys_under(db, f"{P}:") == set()


# Delayed release --------------------------------------------------------------------------------


def test_delayed_item_is_not_leasable_before_its_delay(
    bytes_db: redis.Redis, queue: WorkQueue
) -> None:
    db = bytes_db
    queue.add_item(db, Item(b"d", id="a"))
    item = lease_now(db, queue)
    released = time.monotonic()
    assert queue.release(db, item, delay=0.4, reason="wait")
    assert get(db, keys_of(queue, "a").lease("a")) != item.lease_token.encode()
    assert lrange(db, f"{P}:processing") == []
    assert queue.lease(db, 30, block=False) is None
    queue.light_clean(db)
    assert queue.lease(db, 30, block=False) is None
    assert queue.deep_clean(db).requeued == 0
    assert foreign_deep_clean(db, P) == []  # the delay is a lease to other clients
    assert queue.lease(db, 30, block=False) is None
    assert time.monotonic() - released < 0.35, "the checks above took too long to mean anything"
    again = wait_for(lambda: queue.lease(db, 30, block=False), timeout=3, interval=0.01)
    assert time.monotonic() - released >= 0.39
    assert (again.id(), again.deliveries) == ("a", 2)
    assert reason_of(db, P, "a") == "wait"


def test_delayed_items_come_back_in_due_order(bytes_db: redis.Redis, queue: WorkQueue) -> None:
    db = bytes_db
    for name in ("a", "b", "c"):
        queue.add_item(db, Item(b"", id=name))
    held = {i.id(): i for i in (lease_now(db, queue) for _ in range(3))}
    assert queue.release(db, held["a"], delay=0.3)
    assert queue.release(db, held["b"], delay=0.1)
    assert queue.release(db, held["c"], delay=0.2)
    time.sleep(0.35)
    order = [lease_now(db, queue).id() for _ in range(3)]
    assert order == ["b", "c", "a"]


def _blocked_lease(db: redis.Redis, queue: WorkQueue, timeout: float, out: dict[str, Any]) -> None:
    started = time.monotonic()
    out["item"] = queue.lease(db, 30, timeout=timeout)
    out["at"] = time.monotonic()
    out["waited"] = out["at"] - started


@pytest.mark.parametrize("delay", [0.05, 0.3, 0.7])
def test_blocked_lease_gets_an_item_released_with_delay_soon_after_due(
    real_db: redis.Redis, queue: WorkQueue, delay: float
) -> None:
    db = real_db
    queue.add_item(db, Item(b"d", id="a"))
    item = lease_now(db, queue)
    assert queue.release(db, item, delay=delay)
    released = time.monotonic()
    out: dict[str, Any] = {}
    _blocked_lease(db, queue, 3, out)
    assert out["item"] is not None
    assert (out["item"].id(), out["item"].deliveries) == ("a", 2)
    late = out["at"] - released - delay
    assert late >= -0.005, f"leased {-late:.3f} s early"
    assert late < 0.1 + wake_slice(db), f"leased {late:.3f} s late"


def test_lease_blocked_before_a_delayed_release_wakes_when_it_is_due(
    real_db: redis.Redis, real_backend: Any, queue: WorkQueue
) -> None:
    """A worker already waiting when another worker releases an item with a delay."""
    db = real_db
    queue.add_item(db, Item(b"d", id="a"))
    item = lease_now(db, queue)
    waiter_db = real_backend.client()
    out: dict[str, Any] = {}
    thread = threading.Thread(target=_blocked_lease, args=(waiter_db, queue, 4, out), daemon=True)
    thread.start()
    try:
        wait_for(lambda: blocked_clients(db) == 1, timeout=5, what="the waiter to block")
        assert queue.release(db, item, delay=0.3)
        released = time.monotonic()
        thread.join(timeout=6)
        assert not thread.is_alive()
        assert out["item"] is not None, "the waiter never got the delayed item"
        assert out["item"].deliveries == 2
        late = out["at"] - released - 0.3
        assert late >= -0.005, f"leased {-late:.3f} s early"
        # Nothing was delayed when the waiter began to wait, so it did not register for a
        # wake-up (a waiting worker writes no key): it finds the item at its next look, within
        # one wait slice of the due time (the wire contract's blocking lease).
        bound = WAIT_SLICE_SECS + 0.1 + wake_slice(db)
        assert late < bound, f"leased {late:.3f} s late (past its next look)"
    finally:
        thread.join(timeout=6)


def test_delayed_release_is_visible_to_a_cleaner_of_another_client_only_after_due(
    real_db: redis.Redis, queue: WorkQueue
) -> None:
    """After the delay, the item is queued once, whichever cleaner runs."""
    db = real_db
    queue.add_item(db, Item(b"d", id="a"))
    assert queue.release(db, lease_now(db, queue), delay=0.1)
    time.sleep(0.15)
    foreign_deep_clean(db, P)
    queue.light_clean(db)
    foreign_deep_clean(db, P)
    queue.deep_clean(db)
    got = [i.id() for i in iter(lambda: queue.lease(db, 30, block=False), None)]
    assert got == ["a"]
