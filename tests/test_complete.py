"""Completing items: exactly one True per item, every trace removed."""

from __future__ import annotations

import threading

import redis

from helpers import keys_left, lrange
from plugins.backends import Backend
from redis_work_queue import Item, KeyPrefix, WorkQueue

QUEUE = KeyPrefix("done")
QUEUE_SHARDS = (1, 4)
#: Tests that read this queue's keys or its order across all items: unsharded only.
SHARDS_SKIP = {
    "test_complete_after_lease_expired_and_requeued",
    "test_complete_deep_in_a_long_processing_list_leaves_the_entry_for_the_clean",
    "test_complete_leaves_other_items_alone",
}


def test_complete_leased_item_removes_every_trace(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"d", id="c"))
    item = queue.lease(db, 30, block=False)
    assert item is not None
    assert queue.complete(db, item) is True
    assert not db.exists("done:item:c")
    assert not db.exists("done:lease:c")
    assert lrange(db, "done:processing") == []
    assert keys_left(db) == []


def test_complete_returns_true_once(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"d", id="once"))
    item = queue.lease(db, 30, block=False)
    assert item is not None
    assert queue.complete(db, item) is True
    assert queue.complete(db, item) is False
    assert queue.complete(db, Item(b"other data", id="once")) is False


def test_complete_by_id_only(db: redis.Redis, queue: WorkQueue) -> None:
    """Any Item with the same id completes it; the data does not matter."""
    queue.add_item(db, Item(b"d", id="by-id"))
    queue.lease(db, 30, block=False)
    assert queue.complete(db, Item(b"", id="by-id")) is True
    assert keys_left(db) == []


def test_complete_unknown_item(db: redis.Redis, queue: WorkQueue) -> None:
    assert queue.complete(db, Item(b"d", id="never-added")) is False
    assert keys_left(db) == []


def test_complete_queued_item_is_never_leased(db: redis.Redis, queue: WorkQueue) -> None:
    """Completing an item that is still queued: no worker leases it afterwards."""
    queue.add_item(db, Item(b"d", id="early"))
    queue.add_item(db, Item(b"d", id="next"))
    assert queue.complete(db, Item(b"", id="early")) is True
    item = queue.lease(db, 30, block=False)
    assert item is not None
    assert item.id() == "next"
    assert queue.lease(db, 30, block=False) is None


def test_complete_after_lease_expired_and_requeued(db: redis.Redis, queue: WorkQueue) -> None:
    """A slow worker whose lease expired can still complete the item (the data is the item):
    it is removed from the main queue's point of view and never leased again."""
    queue.add_item(db, Item(b"d", id="slow"))
    item = queue.lease(db, 30, block=False)
    assert item is not None
    db.delete("done:lease:slow")  # the lease expired
    assert queue.light_clean(db).requeued == 1
    assert queue.complete(db, item) is True
    assert queue.lease(db, 30, block=False) is None
    assert keys_left(db) == []


def test_complete_leaves_other_items_alone(db: redis.Redis, queue: WorkQueue) -> None:
    for i in range(4):
        queue.add_item(db, Item(str(i).encode(), id=str(i)))
    leased = [queue.lease(db, 30, block=False) for _ in range(3)]
    assert all(leased)
    assert queue.complete(db, leased[1]) is True  # type: ignore[arg-type]
    assert lrange(db, "done:processing") == [b"2", b"0"]
    assert queue.queue_len(db) == 1
    for kept in ("0", "2"):
        assert db.exists(f"done:lease:{kept}")
        assert db.exists(f"done:item:{kept}")


def test_concurrent_complete_threads(real_backend: Backend, queue: WorkQueue) -> None:
    """Threads racing to complete the same items: exactly one True per item."""
    db = real_backend.client()
    ids = [f"r{i}" for i in range(100)]
    for item_id in ids:
        queue.add_item(db, Item(b"", id=item_id))
    while queue.lease(db, 30, block=False) is not None:
        pass
    wins: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(6)

    def racer() -> None:
        client = real_backend.client()
        barrier.wait(timeout=10)
        for item_id in ids:
            if queue.complete(client, Item(b"", id=item_id)):
                with lock:
                    wins.append(item_id)

    threads = [threading.Thread(target=racer, daemon=True) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert sorted(wins) == sorted(ids)
    assert keys_left(db) == []


def test_complete_deep_in_a_long_processing_list_leaves_the_entry_for_the_clean(
    db: redis.Redis, queue: WorkQueue
) -> None:
    """An entry found near neither end of the processing list stays there: stats, pending and
    the counts stay truthful, and the light clean drops it."""
    queue.add_items(db, [Item(b"", id=f"i{n}") for n in range(300)])
    held = queue.lease_many(db, 30, 300, block=False)
    middle = held[150]
    assert queue.complete(db, middle) is True
    assert b"i150" in lrange(db, "done:processing")
    assert queue.stats(db).leased == 299
    assert queue.stats(db).expired == 0
    assert "i150" not in {row.id for row in queue.pending(db, 0, 1000)}
    assert len(queue.pending(db, 0, 1000)) == 299
    assert queue.complete(db, middle) is False
    for _ in range(3):  # a pass examines every entry: 299 live leases go back, one drops
        queue.light_clean(db)
    assert b"i150" not in lrange(db, "done:processing")
    assert queue.processing(db) == 299
    assert queue.complete(db, held[0]) is True and queue.complete(db, held[-1]) is True
    assert queue.processing(db) == 297
