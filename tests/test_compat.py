"""Wire compatibility with other clients of the same design.

``ForeignClient`` below is written only from the reference document's "Technical details"
(shared/reference/mevitae-redis-work-queue.md), with plain Redis commands and the key names
spelled out literally: it deliberately does not use the library's key layout code.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from helpers import b, get, keys_left, lrange, wait_for
from plugins.backends import Backend
from redis_work_queue import CleanReport, Item, KeyPrefix, WorkQueue, lease_from
from redis_work_queue.ops.lease import LeasePlan, LeaseRequest
from redis_work_queue.transport import run


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
    assert keys_left(db) == []


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
    assert keys_left(db) == []


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


# Races with a client that leases in separate commands, and a queue at rest --------------------


@pytest.fixture
def any_queue(queue_kind: Callable[..., WorkQueue]) -> WorkQueue:
    """Our queue on the shared prefix, on the sync and the asyncio API."""
    return queue_kind(KeyPrefix(PREFIX))


def test_an_id_requeued_between_a_foreign_move_and_lease_is_kept_where_cleaners_look(
    db: redis.Redis, any_queue: WorkQueue, foreign: ForeignClient
) -> None:
    foreign.add("s", b"stranded")
    assert foreign.db.rpoplpush(f"{PREFIX}:queue", f"{PREFIX}:processing") == b"s"
    assert any_queue.light_clean(db).requeued == 1  # no lease yet: requeued
    foreign.db.set(f"{PREFIX}:lease:s", foreign.session, px=300)  # the foreign lease lands
    assert lrange(db, f"{PREFIX}:processing") == []
    assert any_queue.lease(db, 30, block=False) is None  # leased: left to its holder ...
    assert lrange(db, f"{PREFIX}:processing") == [b"s"]  # ... and where a clean will see it
    assert any_queue.lease(db, 30, block=False) is None
    foreign.db.lpush(f"{PREFIX}:queue", "s")  # another stray copy: not pushed twice
    assert any_queue.lease(db, 30, block=False) is None
    assert lrange(db, f"{PREFIX}:processing") == [b"s"]
    wait_for(lambda: not db.exists(f"{PREFIX}:lease:s"), timeout=5, what="the lease to expire")
    assert any_queue.light_clean(db).requeued == 1
    item = any_queue.lease(db, 30, block=False)
    assert item is not None and (item.id(), item.data()) == ("s", b"stranded")


def test_a_delayed_item_met_on_the_main_queue_stays_delayed(
    db: redis.Redis, any_queue: WorkQueue
) -> None:
    any_queue.add_item(db, Item(b"later", id="d"), delay=60)
    db.lpush(f"{PREFIX}:queue", "d")  # a stray copy (its lease is the delay's)
    assert any_queue.lease(db, 30, block=False) is None
    assert lrange(db, f"{PREFIX}:processing") == []
    assert any_queue.stats(db).delayed == 1


#: A look at the queue by a worker about to block (a lease of 30 s).
WAITER_LOOK = LeaseRequest(count=1, lease_ms=30_000, block=True)


#: The other queue of a worker blocked on two: a worker blocked on one queue with nothing
#: delayed is not registered (its BRPOPLPUSH is woken by any push); one on several always is.
OTHER = KeyPrefix(PREFIX + "-other")


def _register_and_die(queue: WorkQueue, db: redis.Redis, ms: int) -> None:
    """What a worker does before it blocks on ``queue`` and another: the lease script registers
    it; then it is killed."""

    def steps() -> Any:
        plan = LeasePlan([queue.ops, WorkQueue(OTHER).ops])
        look = plan.lease(WAITER_LOOK, "t", 1, register_ms=ms, waiter="dead-waiter")
        return (yield look)

    assert run(db, steps()) == -1  # nothing to lease, nothing delayed


def test_a_worker_killed_while_waiting_leaves_no_keys(
    db: redis.Redis, queue: WorkQueue, foreign: ForeignClient
) -> None:
    _register_and_die(queue, db, 400)
    assert 0 < db.pttl(f"{PREFIX}:waiting") <= 400
    foreign.add("f", b"")  # a foreign push wakes nobody ...
    queue.add_item(db, Item(b"", id="o"))  # ... ours leaves a wake-up token, expiring too
    assert 0 < db.pttl(f"{PREFIX}:wake") <= 400
    wait_for(
        lambda: not db.exists(f"{PREFIX}:waiting", f"{PREFIX}:wake", f"{OTHER.prefix}:waiting"),
        timeout=5,
        what="the registration to lapse",
    )
    assert sorted(b(k) for k in db.keys("*")) == [
        b"shared:jobs:counts",
        b"shared:jobs:item:f",
        b"shared:jobs:item:o",
        b"shared:jobs:queue",
    ]


def test_a_wake_up_marker_taken_by_a_foreign_worker_is_dropped_at_our_next_look(
    db: redis.Redis, queue: WorkQueue, foreign: ForeignClient
) -> None:
    _register_and_die(queue, db, 5000)  # a worker of ours is registered, about to block
    queue.add_item(db, Item(b"soon", id="d"), delay=30)  # earlier than anything: a wake-up
    assert lrange(db, f"{PREFIX}:queue") == [b""]
    assert foreign.lease(30_000) is None  # a foreign worker pops the marker and drops it ...
    assert lrange(db, f"{PREFIX}:processing") == [b""]  # ... leaving it on the processing list

    def look_again() -> Any:
        return (yield queue.ops.plan.lease(WAITER_LOOK, "t", 1, 5000, "dead-waiter", True))

    assert 0 < run(db, look_again()) <= 30_000  # our worker's next look: the item's due time
    assert lrange(db, f"{PREFIX}:processing") == []
    assert lrange(db, f"{PREFIX}:queue") == []


def test_a_foreign_item_with_the_empty_id_keeps_its_processing_entry(
    db: redis.Redis, queue: WorkQueue, foreign: ForeignClient
) -> None:
    foreign.add("", b"empty id")
    assert foreign.lease(30_000) == ("", b"empty id")
    _register_and_die(queue, db, 5000)

    def look_again() -> Any:
        return (yield queue.ops.plan.lease(WAITER_LOOK, "t", 1, 5000, "dead-waiter", True))

    assert run(db, look_again()) == -1
    assert lrange(db, f"{PREFIX}:processing") == [b""]  # its entry, not a marker: kept
    assert foreign.complete("") is True


def test_a_worker_blocked_on_several_queues_finds_a_foreign_push_within_a_second(
    real_backend: Backend,
) -> None:
    db = real_backend.client()
    high, low = WorkQueue(KeyPrefix(PREFIX)), WorkQueue(KeyPrefix(PREFIX + "-low"))
    got: list[tuple[Any, float]] = []

    def wait() -> None:
        worker_db = real_backend.client()
        worker_db.client_setname("several")
        got.append((lease_from(worker_db, [high, low], 30, timeout=10), time.monotonic()))

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    wait_for(
        lambda: any(
            c.get("name") == "several" and c.get("cmd") == "blpop" for c in db.client_list()
        ),
        timeout=10,
        what="the worker to block",
    )
    ForeignClient(db, PREFIX).add("f", b"foreign")  # no wake-up token: found at the next look
    pushed = time.monotonic()
    waiter.join(10)
    assert got and got[0][0] is not None and got[0][0][1].id() == "f"
    assert got[0][1] - pushed < 1.5


def test_an_id_held_by_a_deep_clean_met_on_the_main_queue_is_only_dropped(
    db: redis.Redis, any_queue: WorkQueue
) -> None:
    """The deep clean requeues the ids it holds itself: a lease leaves them off the processing
    list (where its light-clean pass would requeue them a second time)."""
    any_queue.add_item(db, Item(b"held", id="h"))
    db.set(f"{PREFIX}:lease:h", "deep-clean:run", px=60_000)
    assert any_queue.lease(db, 30, block=False) is None
    assert lrange(db, f"{PREFIX}:processing") == []
    assert lrange(db, f"{PREFIX}:queue") == []
