"""The light clean: requeues expired leases from the processing list, in bounded steps."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis

from helpers import b, keys_left, lrange, wait_for
from redis_work_queue import CleanReport, Item, KeyPrefix, WorkQueue
from redis_work_queue.keyprefix import QueueKeys
from redis_work_queue.ops import cleaning
from redis_work_queue.ops.cleaning import CLEAN_FIRST
from servers import Proc

QUEUE = KeyPrefix("lc")
QUEUE_SHARDS = (1, 4)
#: Tests that read this queue's keys or its order across all items: unsharded only.
SHARDS_SKIP = {
    "test_expired_lease_is_requeued_and_leased_again",
    "test_forgets_bookkeeping_left_by_a_foreign_complete",
    "test_forgetting_is_bounded_per_pass",
    "test_ids_of_completed_items_are_dropped",
    "test_light_clean_of_100k_is_split_into_bounded_calls",
    "test_live_lease_is_never_requeued",
    "test_mixed_processing_list",
    "test_more_than_one_chunk",
    "test_requeued_items_go_to_the_end_of_the_queue",
}


def test_empty(db: redis.Redis, queue: WorkQueue) -> None:
    assert queue.light_clean(db) == CleanReport(examined=0, requeued=0, dropped=0)
    assert keys_left(db) == []


def test_expired_lease_is_requeued_and_leased_again(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"d", id="e"))
    first = queue.lease(db, 30, block=False)
    assert first is not None
    assert queue.light_clean(db) == CleanReport(examined=1, requeued=0, dropped=0)
    db.pexpire("lc:lease:e", 20)  # make the lease run out soon
    wait_for(lambda: not db.exists("lc:lease:e"), timeout=5, what="the lease to expire")
    assert queue.light_clean(db) == CleanReport(examined=1, requeued=1, dropped=0)
    assert lrange(db, "lc:queue") == [b"e"]
    assert lrange(db, "lc:processing") == []
    second = queue.lease(db, 30, block=False)
    assert second is not None
    assert second.id() == "e"
    assert second.data() == b"d"
    assert second.lease_token != first.lease_token
    assert queue.complete(db, second) is True


def test_live_lease_is_never_requeued(db: redis.Redis, queue: WorkQueue) -> None:
    for i in range(10):
        queue.add_item(db, Item(b"", id=str(i)))
    leased = [queue.lease(db, 30, block=False) for _ in range(10)]
    before = lrange(db, "lc:processing")
    for _ in range(3):
        assert queue.light_clean(db) == CleanReport(examined=10, requeued=0, dropped=0)
    assert lrange(db, "lc:processing") == before  # a full rotation keeps the order
    assert queue.queue_len(db) == 0
    for item in leased:
        assert item is not None
        assert db.exists(f"lc:lease:{item.id()}")


def test_ids_of_completed_items_are_dropped(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"", id="gone"))
    queue.lease(db, 30, block=False)
    # Another client completed it by deleting only the data key.
    db.delete("lc:item:gone")
    assert queue.light_clean(db) == CleanReport(examined=1, requeued=0, dropped=1)
    assert lrange(db, "lc:processing") == []
    assert queue.queue_len(db) == 0


def test_mixed_processing_list(db: redis.Redis, queue: WorkQueue) -> None:
    for i in range(9):
        queue.add_item(db, Item(b"", id=f"i{i}"))
    for _ in range(9):
        queue.lease(db, 30, block=False)
    for i in range(3):
        db.delete(f"lc:lease:i{i}")  # expired
    for i in range(3, 5):
        db.delete(f"lc:item:i{i}")  # completed elsewhere
    assert queue.light_clean(db) == CleanReport(examined=9, requeued=3, dropped=2)
    assert sorted(lrange(db, "lc:queue")) == [b"i0", b"i1", b"i2"]
    assert sorted(lrange(db, "lc:processing")) == [f"i{i}".encode() for i in range(5, 9)]
    assert queue.light_clean(db) == CleanReport(examined=4, requeued=0, dropped=0)


def test_requeued_items_go_to_the_end_of_the_queue(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"", id="old"))
    queue.lease(db, 30, block=False)
    queue.add_item(db, Item(b"", id="waiting"))
    db.delete("lc:lease:old")
    queue.light_clean(db)
    order = [queue.lease(db, 30, block=False) for _ in range(2)]
    assert [it.id() for it in order if it] == ["waiting", "old"]


def test_more_than_one_chunk(db: redis.Redis, queue: WorkQueue) -> None:
    total = CLEAN_FIRST * 5 + 17
    db.lpush("lc:processing", *[str(i) for i in range(total)])
    db.mset({f"lc:item:{i}": b"" for i in range(total) if i % 3 != 2})
    db.mset({f"lc:lease:{i}": b"t" for i in range(total) if i % 3 == 0})
    report = queue.light_clean(db)
    expected_requeued = sum(1 for i in range(total) if i % 3 == 1)
    expected_dropped = sum(1 for i in range(total) if i % 3 == 2)
    assert report == CleanReport(
        examined=total, requeued=expected_requeued, dropped=expected_dropped
    )
    assert queue.processing(db) == total - expected_requeued - expected_dropped
    assert queue.queue_len(db) == expected_requeued


def _setup_processing(db: redis.Redis, total: int) -> None:
    """Fill lc:processing with ``total`` ids in one quick server-side script: a third leased,
    a third with an expired lease, a third completed (no data key)."""
    db.eval(
        """
        local total = tonumber(ARGV[1])
        local batch = {}
        for i = 1, total do
          local id = tostring(i)
          batch[#batch + 1] = id
          local kind = i % 3
          if kind ~= 2 then redis.call('SET', 'lc:item:' .. id, 'x') end
          if kind == 0 then redis.call('SET', 'lc:lease:' .. id, 't', 'EX', 3600) end
          if #batch == 5000 then
            redis.call('LPUSH', 'lc:processing', unpack(batch))
            batch = {}
          end
        end
        if #batch > 0 then redis.call('LPUSH', 'lc:processing', unpack(batch)) end
        return redis.call('LLEN', 'lc:processing')
        """,
        0,
        total,
    )


@pytest.mark.slow
def test_light_clean_of_100k_is_split_into_bounded_calls(
    redis_server_factory: Callable[[], Proc],
    queue: WorkQueue,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """100k ids on the processing list: the clean is split into many script calls, each
    examining at most CLEAN_MAX ids, sized from the server time of the calls before it (the
    longest call's time is a bench row: see bench/run.py)."""
    real_db = redis_server_factory().client()
    total = 100_000
    _setup_processing(real_db, total)
    assert real_db.llen("lc:processing") == total
    budgets: list[int] = []
    timed: list[int] = []
    original = cleaning.light_clean_call

    def spy(keys: QueueKeys, budget: int, *args: Any) -> Any:
        budgets.append(int(budget))
        return original(keys, budget, *args)

    real_update = cleaning.Pace.update

    def update(self: cleaning.Pace, done: int, elapsed_us: int) -> None:
        timed.append(elapsed_us)
        real_update(self, done, elapsed_us)

    monkeypatch.setattr(cleaning, "light_clean_call", spy)
    monkeypatch.setattr(cleaning.Pace, "update", update)
    report = queue.light_clean(real_db)
    requeued = sum(1 for i in range(1, total + 1) if i % 3 == 1)
    dropped = sum(1 for i in range(1, total + 1) if i % 3 == 2)
    assert report == CleanReport(examined=total, requeued=requeued, dropped=dropped)
    assert real_db.llen("lc:queue") == requeued
    assert real_db.llen("lc:processing") == total - requeued - dropped
    assert len(budgets) >= total // cleaning.CLEAN_MAX
    assert max(budgets) <= cleaning.CLEAN_MAX
    assert budgets[0] == cleaning.CLEAN_FIRST
    assert all(us > 0 for us in timed)  # every call reported its server time


def test_forgets_bookkeeping_left_by_a_foreign_complete(db: redis.Redis, queue: WorkQueue) -> None:
    """A client of another implementation completes an item leased here (DEL data, LREM, DEL
    lease): its delivery count and reason are left behind, and the light clean drops them."""
    queue.add_item(db, Item(b"", id="f"))
    queue.add_item(db, Item(b"", id="kept"))
    assert queue.lease(db, 30, block=False) is not None
    db.hset("lc:reasons", mapping={"f": "boom", "kept": "x"})
    db.delete("lc:item:f")
    db.lrem("lc:processing", 0, "f")
    db.delete("lc:lease:f")
    assert queue.light_clean(db) == CleanReport(forgotten=1)  # one item, both entries
    assert not db.exists("lc:deliveries")
    assert [b(k) for k in db.hkeys("lc:reasons")] == [b"kept"]


def test_forgetting_is_bounded_per_pass(
    db: redis.Redis, queue: WorkQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cleaning, "FORGET_PER_PASS", 50)
    total = 1000
    db.hset("lc:deliveries", mapping={f"g{i}": 1 for i in range(total)})
    first = queue.light_clean(db).forgotten
    assert 0 < first < total
    forgotten, passes = first, 1
    while forgotten < total and passes < 50:
        forgotten += queue.light_clean(db).forgotten
        passes += 1
    assert forgotten == total
    assert not db.exists("lc:deliveries")
