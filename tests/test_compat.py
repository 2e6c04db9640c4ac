"""Wire compatibility with other clients of the same design.

``ForeignClient`` below is written only from the reference document's "Technical details"
(shared/reference/mevitae-redis-work-queue.md), with plain Redis commands and the key names
spelled out literally: it deliberately does not use the library's key layout code.
"""

from __future__ import annotations

import secrets

import pytest
import redis

from conftest import Backend
from helpers import get, lrange, wait_for
from redis_work_queue import CleanReport, Item, KeyPrefix, WorkQueue


class ForeignClient:
    """A minimal non-atomic client of the design, as another implementation would do it."""

    def __init__(self, db: redis.Redis, prefix: str) -> None:
        self.db = db
        self.prefix = prefix
        self.session = secrets.token_hex(8)

    def _queue(self) -> str:
        return f"{self.prefix}:queue"

    def _processing(self) -> str:
        return f"{self.prefix}:processing"

    def _item(self, item_id: str) -> str:
        return f"{self.prefix}:item:{item_id}"

    def _lease(self, item_id: str) -> str:
        return f"{self.prefix}:lease:{item_id}"

    def add(self, item_id: str, data: bytes) -> None:
        """Store the data, then push the id to the left of the main queue."""
        self.db.set(self._item(item_id), data)
        self.db.lpush(self._queue(), item_id)

    def add_but_die_before_push(self, item_id: str, data: bytes) -> None:
        self.db.set(self._item(item_id), data)

    def lease(self, expiry_ms: int) -> tuple[str, bytes] | None:
        """RPOPLPUSH main -> processing, load the data (skip ids without any), set the lease."""
        while True:
            raw_id = self.db.rpoplpush(self._queue(), self._processing())
            if raw_id is None:
                return None
            item_id = raw_id.decode() if isinstance(raw_id, bytes) else raw_id
            data = self.db.get(self._item(item_id))
            if data is None:
                continue
            self.db.set(self._lease(item_id), self.session, px=expiry_ms)
            return item_id, data

    def complete(self, item_id: str) -> bool:
        """Delete the data key (this decides the result), the lease, and the processing entry."""
        removed = self.db.delete(self._item(item_id))
        self.db.delete(self._lease(item_id))
        self.db.lrem(self._processing(), 0, item_id)
        return removed == 1


PREFIX = "shared:jobs"


@pytest.fixture
def queue() -> WorkQueue:
    return WorkQueue(KeyPrefix(PREFIX))


@pytest.fixture
def foreign(backend: Backend) -> ForeignClient:
    return ForeignClient(backend.client(decode_responses=False), PREFIX)


def test_foreign_adds_we_lease_and_complete(
    db: redis.Redis, queue: WorkQueue, foreign: ForeignClient
) -> None:
    payload = bytes(range(256))
    foreign.add("f1", payload)
    foreign.add("f2", b"second")
    assert queue.queue_len(db) == 2
    item = queue.lease(db, 30, block=False)
    assert item is not None
    assert (item.id(), item.data()) == ("f1", payload)  # FIFO across clients
    assert lrange(db, f"{PREFIX}:processing") == [b"f1"]
    assert queue.complete(db, item) is True
    assert foreign.complete("f1") is False  # already completed
    assert not db.exists(f"{PREFIX}:item:f1", f"{PREFIX}:lease:f1")
    assert queue.queue_len(db) == 1
    assert queue.processing(db) == 0


def test_we_add_foreign_leases_and_completes(
    db: redis.Redis, queue: WorkQueue, foreign: ForeignClient
) -> None:
    queue.add_item(db, Item(b"ours-1", id="o1"))
    pipe = db.pipeline()
    queue.add_item_to_pipeline(pipe, Item(b"\x00ours-2", id="o2"))
    pipe.execute()
    # The layout is exactly what the document describes.
    assert get(db, f"{PREFIX}:item:o1") == b"ours-1"
    assert lrange(db, f"{PREFIX}:queue") == [b"o2", b"o1"]
    assert foreign.lease(30_000) == ("o1", b"ours-1")
    assert foreign.lease(30_000) == ("o2", b"\x00ours-2")
    assert foreign.lease(30_000) is None
    assert queue.processing(db) == 2
    assert queue.light_clean(db) == CleanReport(examined=2, requeued=0, dropped=0)  # live
    assert foreign.complete("o1") is True
    assert queue.complete(db, Item(b"", id="o1")) is False
    assert queue.complete(db, Item(b"", id="o2")) is True
    assert foreign.complete("o2") is False
    assert db.dbsize() == 0


def test_our_lease_is_visible_to_the_design(
    db: redis.Redis, queue: WorkQueue, foreign: ForeignClient
) -> None:
    """Our lease key is ``<prefix>:lease:<id>`` with an expiry; our processing entry is where
    other cleaners look for it."""
    foreign.add("x", b"d")
    item = queue.lease(db, 12.5, block=False)
    assert item is not None
    assert 0 < db.pttl(f"{PREFIX}:lease:x") <= 12_500
    assert get(db, f"{PREFIX}:lease:x") == item.lease_token.encode()
    assert lrange(db, f"{PREFIX}:processing") == [b"x"]
    assert lrange(db, f"{PREFIX}:queue") == []


def test_foreign_expired_lease_is_recovered_by_our_light_clean(
    db: redis.Redis, queue: WorkQueue, foreign: ForeignClient
) -> None:
    foreign.add("dies", b"work")
    assert foreign.lease(50) == ("dies", b"work")  # ... and the foreign worker dies
    assert lrange(db, f"{PREFIX}:processing") == [b"dies"]
    wait_for(lambda: not db.exists(f"{PREFIX}:lease:dies"), timeout=5, what="the lease to expire")
    assert queue.light_clean(db) == CleanReport(examined=1, requeued=1, dropped=0)
    assert lrange(db, f"{PREFIX}:queue") == [b"dies"]
    assert queue.processing(db) == 0
    item = queue.lease(db, 30, block=False)
    assert item is not None
    assert (item.id(), item.data()) == ("dies", b"work")
    assert queue.complete(db, item) is True
    assert db.dbsize() == 0


def test_foreign_half_added_item_is_recovered_by_our_deep_clean(
    db: redis.Redis, queue: WorkQueue, foreign: ForeignClient
) -> None:
    foreign.add("whole", b"w")
    foreign.add_but_die_before_push("half", b"h")
    assert queue.queue_len(db) == 1
    assert queue.deep_clean(db) == CleanReport(examined=2, requeued=1, dropped=0)
    assert lrange(db, f"{PREFIX}:queue") == [b"half", b"whole"]
    # And the foreign client can lease what our deep clean recovered.
    assert foreign.lease(30_000) == ("whole", b"w")
    assert foreign.lease(30_000) == ("half", b"h")


def test_foreign_completed_ids_are_dropped_by_us(
    db: redis.Redis, queue: WorkQueue, foreign: ForeignClient
) -> None:
    """Ids left behind by a foreign client (no data key) are not items: we drop them."""
    foreign.add("a", b"")
    foreign.add("b", b"")
    foreign.lease(30_000)
    db.delete(f"{PREFIX}:item:a")  # the foreign client died after DEL data only
    db.delete(f"{PREFIX}:item:b")  # completed while still queued
    assert queue.light_clean(db) == CleanReport(examined=1, requeued=0, dropped=1)
    assert queue.lease(db, 30, block=False) is None
    # Only the dead client's lease key is left, to expire on its own.
    assert db.keys("*") in ([b"shared:jobs:lease:a"], ["shared:jobs:lease:a"])
