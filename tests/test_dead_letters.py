"""max_deliveries and the dead-letter store: burying, paging, requeueing, purging, and no
cleaner (ours or another client's) ever bringing a dead letter back."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
import redis

from lifecycle_helpers import (
    assert_no_bookkeeping,
    deliveries_of,
    foreign_deep_clean,
    keys_under,
)
from redis_work_queue import DeadLetter, InvalidArgumentError, Item, KeyPrefix, WorkQueue

P = "dl"
QUEUE_SHARDS = (1, 4)
#: Tests that read this queue's keys, its order across all items, or clean it as another client
#: of the unsharded layout: unsharded only.
SHARDS_SKIP = {
    "test_burial_is_atomic_under_a_concurrent_foreign_cleaner",
    "test_dead_letter_keys_are_not_item_keys",
    "test_foreign_deep_clean_recovers_lost_items",
    "test_items_below_the_limit_are_unaffected",
    "test_no_deep_clean_brings_back_an_expired_dead_letter",
    "test_requeue_all_in_chunks",
}
SHORT = 0.05
EXPIRED = 0.12


@pytest.fixture
def make(queue_shards: int) -> Callable[[int | None], WorkQueue]:
    """Make the module's queue with a delivery limit (sharded on a sharded run)."""

    def build(max_deliveries: int | None) -> WorkQueue:
        shards = {"shards": queue_shards} if queue_shards > 1 else {}
        return WorkQueue(KeyPrefix(P), max_deliveries=max_deliveries, **shards)

    return build


def lease_now(db: redis.Redis, queue: WorkQueue, lease_secs: float = 30) -> Item:
    item = queue.lease(db, lease_secs, block=False)
    assert item is not None
    return item


def nothing_leasable(db: redis.Redis, queue: WorkQueue) -> bool:
    return queue.lease(db, 30, block=False) is None


# The limit --------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -1, 1.5, "3", True])
def test_max_deliveries_must_be_a_positive_int(bad: object) -> None:
    with pytest.raises(InvalidArgumentError):
        WorkQueue(KeyPrefix(P), max_deliveries=bad)  # type: ignore[arg-type]


def test_max_deliveries_property(make: Callable[..., WorkQueue]) -> None:
    assert make(None).max_deliveries is None
    assert make(4).max_deliveries == 4


@pytest.mark.parametrize("limit", [1, 3])
def test_last_release_buries_the_item(
    make: Callable[..., WorkQueue], db: redis.Redis, limit: int
) -> None:
    queue = make(limit)
    queue.add_item(db, Item(b"\x00payload\xff", id="a"))
    for n in range(1, limit + 1):
        item = lease_now(db, queue)
        assert item.deliveries == n
        assert queue.release(db, item, reason=f"failure {n}") is True
    assert nothing_leasable(db, queue)
    assert queue.dead_count(db) == 1
    [dead] = queue.dead_letters(db)
    assert isinstance(dead, DeadLetter)
    assert (dead.id, dead.data, dead.deliveries, dead.reason) == (
        "a",
        b"\x00payload\xff",
        limit,
        f"failure {limit}",
    )
    assert abs(dead.died_at - time.time()) < 5
    assert dead.item() == Item(b"\x00payload\xff", id="a")
    assert_no_bookkeeping(db, P, "a")
    assert queue.queue_len(db) == 0
    assert queue.processing(db) == 0


def test_release_without_a_reason_keeps_the_last_one(
    make: Callable[..., WorkQueue], db: redis.Redis
) -> None:
    queue = make(2)
    queue.add_item(db, Item(b"d", id="a"))
    assert queue.release(db, lease_now(db, queue), reason="first try failed")
    assert queue.release(db, lease_now(db, queue))
    [dead] = queue.dead_letters(db)
    assert dead.reason == "first try failed"


def test_delayed_release_on_the_last_delivery_buries_at_once(
    make: Callable[..., WorkQueue], db: redis.Redis
) -> None:
    queue = make(1)
    queue.add_item(db, Item(b"d", id="a"))
    assert queue.release(db, lease_now(db, queue), delay=60, reason="late")
    assert queue.dead_count(db) == 1
    assert queue.dead_letters(db)[0].reason == "late"
    assert_no_bookkeeping(db, P, "a")


def test_last_lease_expiry_buries_the_item_on_light_clean(
    make: Callable[..., WorkQueue], bytes_db: redis.Redis
) -> None:
    db = bytes_db
    queue = make(2)
    queue.add_item(db, Item(b"d", id="a"))
    assert queue.release(db, lease_now(db, queue), reason="boom")
    item = lease_now(db, queue, SHORT)
    assert item.deliveries == 2
    time.sleep(EXPIRED)
    report = queue.light_clean(db)
    assert (report.requeued, report.dead) == (0, 1)
    assert nothing_leasable(db, queue)
    [dead] = queue.dead_letters(db)
    assert (dead.id, dead.deliveries, dead.reason) == ("a", 2, "lease expired")
    assert_no_bookkeeping(db, P, "a")
    assert queue.release(db, item) is False  # the buried item's last holder cannot act on it
    assert queue.renew(db, item, 30) is False
    assert queue.dead_count(db) == 1


def test_expiries_alone_bury_after_the_limit(
    make: Callable[..., WorkQueue], bytes_db: redis.Redis
) -> None:
    db = bytes_db
    queue = make(3)
    queue.add_item(db, Item(b"d", id="a"))
    handed_out = 0
    for _ in range(5):
        item = queue.lease(db, SHORT, block=False)
        if item is None:
            break
        handed_out += 1
        assert item.deliveries == handed_out
        time.sleep(EXPIRED)
        queue.light_clean(db)
    assert handed_out == 3
    assert queue.dead_count(db) == 1
    assert queue.dead_letters(db)[0].deliveries == 3


def test_limit_holds_when_a_client_without_the_limit_cleans(
    make: Callable[..., WorkQueue], bytes_db: redis.Redis
) -> None:
    """A cleaner that does not know the limit requeues the item; the next lease buries it."""
    db = bytes_db
    limited, unlimited = make(1), make(None)
    limited.add_item(db, Item(b"d", id="a"))
    assert lease_now(db, limited, SHORT).deliveries == 1
    time.sleep(EXPIRED)
    assert unlimited.light_clean(db).requeued == 1
    assert nothing_leasable(db, limited)
    assert limited.dead_count(db) == 1
    assert limited.dead_letters(db)[0].deliveries == 1


def test_items_below_the_limit_are_unaffected(
    make: Callable[..., WorkQueue], db: redis.Redis
) -> None:
    queue = make(2)
    queue.add_item(db, Item(b"d", id="a"))
    queue.add_item(db, Item(b"e", id="b"))
    assert queue.release(db, lease_now(db, queue))  # a: 1 of 2
    b = lease_now(db, queue)
    assert b.id() == "b"
    assert queue.complete(db, b)
    a = lease_now(db, queue)
    assert (a.id(), a.deliveries) == ("a", 2)
    assert queue.complete(db, a)
    assert queue.dead_count(db) == 0
    assert keys_under(db, f"{P}:") == set()


# Paging -----------------------------------------------------------------------------------------


def bury_all(db: redis.Redis, queue: WorkQueue, ids: list[str]) -> None:
    """Bury ``ids`` in this order (queue limit 1), a few ms apart so their order is strict."""
    for item_id in ids:
        queue.add_item(db, Item(f"data-{item_id}", id=item_id))
        item = lease_now(db, queue)
        assert item.id() == item_id
        assert queue.release(db, item, reason=f"r-{item_id}")
        time.sleep(0.002)


def test_dead_letters_pages_oldest_first(make: Callable[..., WorkQueue], db: redis.Redis) -> None:
    queue = make(1)
    ids = [f"d{i}" for i in range(7)]
    bury_all(db, queue, ids)
    assert queue.dead_count(db) == 7
    everything = queue.dead_letters(db)
    assert [d.id for d in everything] == ids
    assert [d.data for d in everything] == [f"data-{i}".encode() for i in ids]
    assert [d.reason for d in everything] == [f"r-{i}" for i in ids]
    died = [d.died_at for d in everything]
    assert died == sorted(died)
    assert [d.id for d in queue.dead_letters(db, 0, 3)] == ids[:3]
    assert [d.id for d in queue.dead_letters(db, 3, 3)] == ids[3:6]
    assert [d.id for d in queue.dead_letters(db, 6, 3)] == ids[6:]
    assert queue.dead_letters(db, 7, 3) == []
    assert [d.id for d in queue.dead_letters(db, -2, 2)] == ids[-2:]
    assert [d.id for d in queue.dead_letters(db, -2, 10)] == ids[-2:]
    assert [d.id for d in queue.dead_letters(db, -3, 1)] == [ids[-3]]
    # Paging through the whole store sees every dead letter once.
    seen: list[str] = []
    start = 0
    while page := queue.dead_letters(db, start, 2):
        seen.extend(d.id for d in page)
        start += len(page)
    assert seen == ids


def test_dead_letters_with_a_preview_cut_the_data_and_give_the_whole_size(
    db: redis.Redis, queue_kind: Callable[..., WorkQueue]
) -> None:
    queue = queue_kind(KeyPrefix(P), max_deliveries=1)
    datas = {"small": b"tiny", "big": b"\x01\x02" * 5000, "none": b""}
    for item_id, data in datas.items():
        queue.add_item(db, Item(data, id=item_id))
        assert queue.release(db, lease_now(db, queue), reason=f"r-{item_id}")
        time.sleep(0.002)  # buried a few ms apart: their order is strict
    page = queue.dead_letters(db, 0, 10, preview_bytes=6)
    assert [(d.id, d.data, d.size, d.truncated) for d in page] == [
        ("small", b"tiny", 4, False),
        ("big", b"\x01\x02" * 3, 10_000, True),
        ("none", b"", 0, False),
    ]
    assert [d.reason for d in page] == ["r-small", "r-big", "r-none"]
    assert [d.deliveries for d in page] == [1, 1, 1]
    whole = queue.dead_letters(db)
    assert [(d.data, d.size, d.truncated) for d in whole] == [
        (data, len(data), False) for data in datas.values()
    ]
    assert [d.died_at for d in whole] == [d.died_at for d in page]
    assert [(d.data, d.size) for d in queue.dead_letters(db, -2, 1, preview_bytes=0)] == [
        (b"", 10_000)
    ]
    # The whole data of one dead letter, on demand; a cut record cannot become an item.
    assert queue.item_data(db, "big", dead=True) == datas["big"]
    assert queue.item_data(db, "big") is None  # no live item of that id
    assert queue.item_data(db, "nope", dead=True) is None
    with pytest.raises(InvalidArgumentError, match="preview_bytes"):
        page[1].item()
    assert page[0].item().data() == b"tiny"
    assert whole[1].item().data() == datas["big"]


@pytest.mark.parametrize("bad", [(0, 0), (0, -1), ("0", 1), (0, 1.5), (True, 1)])
def test_dead_letters_rejects_bad_paging(
    make: Callable[..., WorkQueue], db: redis.Redis, bad: tuple[object, object]
) -> None:
    with pytest.raises(InvalidArgumentError):
        make(1).dead_letters(db, *bad)  # type: ignore[arg-type]


def test_empty_store(make: Callable[..., WorkQueue], db: redis.Redis) -> None:
    queue = make(1)
    assert queue.dead_count(db) == 0
    assert queue.dead_letters(db) == []
    assert queue.requeue_dead(db) == 0
    assert queue.purge_dead(db) == 0
    assert queue.requeue_dead(db, ["nope"]) == 0
    assert queue.purge_dead(db, ["nope"]) == 0
    assert keys_under(db, f"{P}:") == set()


def test_ids_with_odd_characters_survive_burial(
    make: Callable[..., WorkQueue], db: redis.Redis
) -> None:
    queue = make(1)
    odd = ["a:b", "{tag}", "sp ace", "gl*b?[x]", "ünï"]
    bury_all(db, queue, odd)
    assert [d.id for d in queue.dead_letters(db)] == odd
    assert queue.requeue_dead(db, ["gl*b?[x]", "ünï"]) == 2
    got = {lease_now(db, queue).id() for _ in range(2)}
    assert got == {"gl*b?[x]", "ünï"}
    assert queue.purge_dead(db, ["sp ace"]) == 1
    assert [d.id for d in queue.dead_letters(db)] == ["a:b", "{tag}"]


# Requeue and purge ------------------------------------------------------------------------------


def test_requeue_some_resets_their_counts(make: Callable[..., WorkQueue], db: redis.Redis) -> None:
    queue = make(2)
    ids = ["a", "b", "c"]
    for item_id in ids:
        queue.add_item(db, Item(f"data-{item_id}", id=item_id))
    for _ in range(6):
        assert queue.release(db, lease_now(db, queue), reason="bad")
    assert queue.dead_count(db) == 3
    assert queue.requeue_dead(db, ["b", "c", "missing"]) == 2
    assert queue.dead_count(db) == 1
    assert [d.id for d in queue.dead_letters(db)] == ["a"]
    assert queue.queue_len(db) == 2
    for item_id in ("b", "c"):
        assert deliveries_of(db, P, item_id) == 0
    got = {}
    for _ in range(2):
        item = lease_now(db, queue)
        got[item.id()] = (item.data(), item.deliveries)
    assert got == {"b": (b"data-b", 1), "c": (b"data-c", 1)}
    assert queue.requeue_dead(db, ["b"]) == 0  # not dead (it is leased): nothing happens


def test_requeue_all(make: Callable[..., WorkQueue], db: redis.Redis) -> None:
    queue = make(1)
    ids = [f"d{i}" for i in range(5)]
    bury_all(db, queue, ids)
    assert queue.requeue_dead(db) == 5
    assert queue.dead_count(db) == 0
    assert queue.dead_letters(db) == []
    leased = [lease_now(db, queue) for _ in ids]
    assert sorted(i.id() for i in leased) == ids
    assert all(i.deliveries == 1 for i in leased)
    for item in leased:
        assert queue.complete(db, item)
    assert keys_under(db, f"{P}:") == set()


def test_requeue_all_in_chunks(make: Callable[..., WorkQueue], bytes_db: redis.Redis) -> None:
    """More dead letters than one requeue step takes (DEAD_CHUNK = 500)."""
    db = bytes_db
    queue = make(1)
    n = 1203
    pipe = db.pipeline(transaction=False)
    for i in range(n):
        pipe.set(f"{P}:item:{i}", b"x")
        pipe.lpush(f"{P}:queue", str(i))
    pipe.execute()
    for _ in range(n):
        assert queue.release(db, lease_now(db, queue))
    assert queue.dead_count(db) == n
    assert queue.requeue_dead(db) == n
    assert queue.dead_count(db) == 0
    assert queue.queue_len(db) == n


def test_requeued_item_is_buried_again_after_the_limit(
    make: Callable[..., WorkQueue], db: redis.Redis
) -> None:
    queue = make(2)
    queue.add_item(db, Item(b"d", id="a"))
    for _ in range(2):
        assert queue.release(db, lease_now(db, queue))
    assert queue.requeue_dead(db, ["a"]) == 1
    for n in (1, 2):
        item = lease_now(db, queue)
        assert item.deliveries == n
        assert queue.release(db, item, reason="again")
    assert nothing_leasable(db, queue)
    [dead] = queue.dead_letters(db)
    assert (dead.id, dead.deliveries, dead.reason) == ("a", 2, "again")


def test_dead_letter_whose_id_is_live_again_stays_dead(
    make: Callable[..., WorkQueue], db: redis.Redis
) -> None:
    queue = make(1)
    queue.add_item(db, Item(b"old", id="a"))
    assert queue.release(db, lease_now(db, queue))
    assert queue.add_item(db, Item(b"new", id="a"))  # the id is free again
    assert queue.requeue_dead(db, ["a"]) == 0
    assert queue.requeue_dead(db) == 0
    assert queue.dead_count(db) == 1
    assert queue.dead_letters(db)[0].data == b"old"
    item = lease_now(db, queue)
    assert (item.data(), item.deliveries) == (b"new", 1)
    assert nothing_leasable(db, queue)


def test_purge_some_and_all(make: Callable[..., WorkQueue], db: redis.Redis) -> None:
    queue = make(1)
    ids = [f"d{i}" for i in range(5)]
    bury_all(db, queue, ids)
    assert queue.purge_dead(db, ["d1", "d3", "zz"]) == 2
    assert [d.id for d in queue.dead_letters(db)] == ["d0", "d2", "d4"]
    assert queue.purge_dead(db, ["d1"]) == 0
    assert queue.purge_dead(db) == 3
    assert queue.dead_count(db) == 0
    assert nothing_leasable(db, queue)
    assert queue.requeue_dead(db) == 0
    assert keys_under(db, f"{P}:") == set()


def test_purge_leaves_live_items_alone(make: Callable[..., WorkQueue], db: redis.Redis) -> None:
    queue = make(1)
    queue.add_item(db, Item(b"old", id="a"))
    assert queue.release(db, lease_now(db, queue))
    queue.add_item(db, Item(b"new", id="a"))
    queue.add_item(db, Item(b"other", id="b"))
    assert queue.purge_dead(db) == 1
    assert queue.queue_len(db) == 2
    assert {lease_now(db, queue).data() for _ in range(2)} == {b"new", b"other"}


# No cleaner brings a dead letter back -----------------------------------------------------------


def test_foreign_deep_clean_recovers_lost_items(
    make: Callable[..., WorkQueue], db: redis.Redis
) -> None:
    """The foreign deep clean below is not vacuous: it does requeue a lost item."""
    queue = make(1)
    db.set(f"{P}:item:lost", b"x")  # a data key in neither list, without a lease
    assert foreign_deep_clean(db, P) == ["lost"]
    assert lease_now(db, queue).id() == "lost"
    assert foreign_deep_clean(db, P) == []  # leased now


def test_no_deep_clean_brings_back_a_released_dead_letter(
    make: Callable[..., WorkQueue], db: redis.Redis
) -> None:
    queue = make(2)
    for item_id in ("a", "b"):
        queue.add_item(db, Item(b"d", id=item_id))
    for _ in range(4):
        assert queue.release(db, lease_now(db, queue), reason="bad")
    assert queue.dead_count(db) == 2
    for _ in range(2):
        assert foreign_deep_clean(db, P) == []
        assert queue.deep_clean(db).requeued == 0
        assert queue.light_clean(db).requeued == 0
    assert nothing_leasable(db, queue)
    assert queue.dead_count(db) == 2
    assert queue.queue_len(db) == 0


def test_no_deep_clean_brings_back_an_expired_dead_letter(
    make: Callable[..., WorkQueue], bytes_db: redis.Redis
) -> None:
    db = bytes_db
    queue = make(1)
    for item_id in ("a", "b", "c"):
        queue.add_item(db, Item(b"d", id=item_id))
    held = [lease_now(db, queue, SHORT) for _ in range(3)]
    assert queue.complete(db, held[2])
    time.sleep(EXPIRED)
    # Before any light clean, a foreign deep clean legitimately requeues expired items (it is
    # the reference design's recovery). The items were delivered max times: the next lease
    # buries them instead of handing them out.
    requeued = foreign_deep_clean(db, P)
    assert sorted(requeued) == ["a", "b"]
    assert nothing_leasable(db, queue)
    assert queue.dead_count(db) == 2
    assert foreign_deep_clean(db, P) == []
    assert queue.deep_clean(db).requeued == 0
    assert nothing_leasable(db, queue)
    assert sorted(d.id for d in queue.dead_letters(db)) == ["a", "b"]


def test_light_clean_burial_then_foreign_deep_clean(
    make: Callable[..., WorkQueue], bytes_db: redis.Redis
) -> None:
    db = bytes_db
    queue = make(1)
    queue.add_item(db, Item(b"d", id="a"))
    lease_now(db, queue, SHORT)
    time.sleep(EXPIRED)
    assert queue.light_clean(db).dead == 1
    assert foreign_deep_clean(db, P) == []
    assert queue.deep_clean(db).requeued == 0
    assert nothing_leasable(db, queue)
    assert queue.dead_count(db) == 1


def test_dead_letter_keys_are_not_item_keys(
    make: Callable[..., WorkQueue], db: redis.Redis
) -> None:
    """Whatever the store's layout, no key of it matches ``<prefix>:item:*`` or a lease."""
    queue = make(1)
    bury_all(db, queue, ["a", "b"])
    remaining = keys_under(db, f"{P}:")
    assert remaining
    assert not any(k.startswith((f"{P}:item:", f"{P}:lease:")) for k in remaining)
    assert not any(k in {f"{P}:queue", f"{P}:processing"} for k in remaining)


def test_burial_is_atomic_under_a_concurrent_foreign_cleaner(
    make: Callable[..., WorkQueue], real_db: redis.Redis
) -> None:
    """A foreign deep clean racing releases and light cleans never resurrects a dead letter."""
    db = real_db
    queue = make(2)
    n = 60
    for i in range(n):
        queue.add_item(db, Item(b"d", id=f"i{i}"))
    stop = threading.Event()
    resurrected: list[str] = []

    def foreign() -> None:
        other = redis.Redis(connection_pool=db.connection_pool)
        while not stop.is_set():
            foreign_deep_clean(other, P)

    thread = threading.Thread(target=foreign, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while queue.dead_count(db) < n and time.monotonic() < deadline:
            item = queue.lease(db, 30, block=False)
            if item is None:
                queue.light_clean(db)
                continue
            if item.deliveries > 2:
                resurrected.append(item.id())
            assert queue.release(db, item, reason="bad")
    finally:
        stop.set()
        thread.join(timeout=10)
    assert resurrected == []
    assert queue.dead_count(db) == n
    foreign_deep_clean(db, P)
    assert nothing_leasable(db, queue)
