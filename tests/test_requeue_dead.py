"""Requeueing dead letters: all of them past the ones whose ids are live again, in bounded
chunks; and a requeued item starts afresh, whatever the bookkeeping its id gathered while it
was dead."""

from __future__ import annotations

import time

import pytest
import redis

from lifecycle_helpers import deliveries_of, reason_of
from redis_work_queue import Item, KeyPrefix, WorkQueue
from redis_work_queue.cli import main
from redis_work_queue.ops.queue import DEAD_CHUNK

P = "rqd"
QUEUE = KeyPrefix(P)
QUEUE_OPTIONS = {"max_deliveries": 1}


def bury(db: redis.Redis, queue: WorkQueue, ids: list[str]) -> None:
    """Add ``ids`` and bury them, oldest first (max_deliveries=1: one release buries)."""
    queue.add_items(db, [Item(b"dead " + i.encode(), id=i) for i in ids])
    for _ in ids:
        item = queue.lease(db, 30, block=False)
        assert item is not None
        assert queue.release(db, item, reason="broken")
        time.sleep(0.0015)  # one dead letter per millisecond: the order is the burial order


@pytest.fixture
def live_first(db: redis.Redis, queue: WorkQueue) -> tuple[list[str], list[str]]:
    """A whole chunk of the oldest dead letters have ids live again; 100 more do not."""
    live = [f"d{i:04d}" for i in range(DEAD_CHUNK)]
    free = [f"d{i:04d}" for i in range(DEAD_CHUNK, DEAD_CHUNK + 100)]
    bury(db, queue, live + free)
    assert queue.add_items(db, [Item(b"new", id=i) for i in live]) == [True] * len(live)
    return live, free


def test_requeue_all_goes_past_the_dead_letters_that_stay(
    db: redis.Redis, queue: WorkQueue, live_first: tuple[list[str], list[str]]
) -> None:
    live, free = live_first
    seen: list[int] = []
    assert queue.requeue_dead(db, None, seen.append) == len(free)
    assert seen[-1] == len(free)
    assert len(seen) <= 3  # bounded chunks: one passes over the live ids, one requeues
    assert queue.dead_count(db) == len(live)
    assert sorted(d.id for d in queue.dead_letters(db, 0, 1000)) == live
    assert queue.queue_len(db) == len(live) + len(free)
    # The dead letters that stayed keep their data; the live items keep theirs.
    assert queue.item_data(db, live[0]) == b"new"
    assert queue.item_data(db, live[0], dead=True) == b"dead " + live[0].encode()
    assert queue.item_data(db, free[0]) == b"dead " + free[0].encode()
    assert queue.requeue_dead(db) == 0


def test_rwq_requeue_all_counts_what_it_requeued(
    real_db: redis.Redis, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    queue = WorkQueue(QUEUE, max_deliveries=1)
    live = [f"d{i:04d}" for i in range(DEAD_CHUNK)]
    free = [f"f{i:04d}" for i in range(100)]
    bury(real_db, queue, live + free)
    queue.add_items(real_db, [Item(b"new", id=i) for i in live])
    capsys.readouterr()
    try:
        code = main(["--url", redis_url, "dead-letters", P, "--requeue", "--all"])
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    assert code == 0
    assert f"requeued {len(free)} dead letters of {P}" in capsys.readouterr().out
    assert queue.dead_count(real_db) == len(live)


def test_purge_all_still_purges_every_dead_letter(
    db: redis.Redis, queue: WorkQueue, live_first: tuple[list[str], list[str]]
) -> None:
    live, free = live_first
    assert queue.purge_dead(db) == len(live) + len(free)
    assert queue.dead_count(db) == 0
    assert queue.item_data(db, live[0]) == b"new"


def test_a_requeued_item_starts_afresh_after_its_id_lived_and_expired_while_dead(
    db: redis.Redis,
) -> None:
    """The id is buried; re-added with a time to live, leased, released with a reason, then
    left to expire: its deliveries and reason stay behind. Requeueing the dead letter by id must
    start it afresh: the next lease hands it out as its first delivery, with no reason."""
    queue = WorkQueue(QUEUE, max_deliveries=2)
    queue.add_item(db, Item(b"first", id="a"))
    for reason in ("one", "two"):
        item = queue.lease(db, 30, block=False)
        assert item is not None
        assert queue.release(db, item, reason=reason)
    assert [(d.id, d.deliveries, d.reason) for d in queue.dead_letters(db)] == [("a", 2, "two")]

    assert queue.add_item(db, Item(b"second", id="a"), ttl=0.3)
    again = queue.lease(db, 30, block=False)
    assert again is not None and again.data() == b"second"
    assert queue.release(db, again, reason="stale")
    assert (deliveries_of(db, P, "a"), reason_of(db, P, "a")) == (1, "stale")
    deadline = time.monotonic() + 5
    while queue.item_data(db, "a") is not None:
        assert time.monotonic() < deadline, "the item did not expire"
        time.sleep(0.05)

    assert queue.requeue_dead(db, ["a"]) == 1
    assert queue.dead_count(db) == 0
    assert reason_of(db, P, "a") is None
    item = queue.lease(db, 30, block=False)
    assert item is not None
    assert (item.id(), item.data(), item.deliveries) == ("a", b"first", 1)
    assert queue.dead_count(db) == 0
    # One more delivery is allowed before the limit buries it.
    assert queue.release(db, item, reason="three")
    item = queue.lease(db, 30, block=False)
    assert item is not None and item.deliveries == 2
    assert queue.release(db, item, reason="four")
    assert [(d.id, d.deliveries, d.reason) for d in queue.dead_letters(db)] == [("a", 2, "four")]
