"""Per-group rate limits: a group's own limit, or that of every group, kept in Redis and kept by
every lease of the fleet. A group that has used its allowance waits off the ring of turns while
the others take theirs, and comes back when its pacing clock lets it; a blocked lease is told
how long to wait. Its rows of the write-check and out-of-memory tables are here too."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis

import flow_handlers
from checks import LEASE_SECS, PREFIX, OomCheck, WriteCheck, oom_test, write_check_test
from helpers import dump_state, in_thread
from redis_work_queue import (
    AsyncWorker,
    AsyncWorkQueue,
    GroupStats,
    InvalidArgumentError,
    Item,
    KeyPrefix,
    RateLimit,
    Worker,
    WorkQueue,
)
from redis_work_queue.errors import InvalidArgumentTypeError

QUEUE = KeyPrefix("grq")
GK = WorkQueue(QUEUE).keys
#: A limit that does not refill during a test: the burst is all a group gets.
SLOW = RateLimit(1, 100.0)


def _add(db: redis.Redis, queue: WorkQueue, group: str, n: int) -> None:
    items = [Item(b"d", id=f"{group}{k}") for k in range(n)]
    assert all(queue.add_items(db, items, group=group))


def _drain(db: redis.Redis, queue: WorkQueue) -> list[str]:
    order = []
    while (item := queue.lease(db, LEASE_SECS, block=False)) is not None:
        order.append(item.id())
        assert queue.complete(db, item)
    return order


def test_a_limited_group_is_skipped_while_the_others_take_their_turns(
    db: redis.Redis, queue: WorkQueue
) -> None:
    _add(db, queue, "A", 5)
    _add(db, queue, "B", 5)
    assert queue.set_group_rate_limit(db, "A", RateLimit(1, 100.0, burst=2))
    assert _drain(db, queue) == ["A0", "B0", "A1", "B1", "B2", "B3", "B4"]
    stats = queue.stats(db, groups=["A", "B"])
    assert stats.groups["A"] == GroupStats(3, 0, False, RateLimit(1, 100.0, 2), True)
    assert stats.groups["B"] == GroupStats(0, 0, False, None, False)
    assert stats.grouped == 3
    # Removing its limit brings it back to the ring at once.
    assert queue.set_group_rate_limit(db, "A", None)
    assert not queue.set_group_rate_limit(db, "A", None)
    assert _drain(db, queue) == ["A2", "A3", "A4"]
    assert queue.stats(db, groups=["A"]).groups["A"] == GroupStats(0, 0, False)


def test_lease_many_takes_a_limited_group_up_to_its_burst(
    db: redis.Redis, queue: WorkQueue
) -> None:
    _add(db, queue, "A", 6)
    queue.set_group_rate_limit(db, "A", RateLimit(1, 100.0, burst=3))
    items = queue.lease_many(db, LEASE_SECS, 10, block=False)
    assert [item.id() for item in items] == ["A0", "A1", "A2"]
    assert queue.lease_many(db, LEASE_SECS, 10, block=False) == []


def test_the_limit_of_every_group_and_a_groups_own(db: redis.Redis, queue_kind: Any) -> None:
    queue = queue_kind(QUEUE, group_rate_limit=SLOW)
    for group in "ABC":
        _add(db, queue, group, 3)
    queue.set_group_rate_limit(db, "B", RateLimit(1, 100.0, burst=2))
    assert sorted(_drain(db, queue)) == ["A0", "B0", "B1", "C0"]
    stats = queue.stats(db, groups=["A", "B"])
    assert stats.group_rate_limit == SLOW
    assert stats.groups["A"].rate_limit == SLOW and stats.groups["A"].rate_limited
    assert stats.groups["B"].rate_limit == RateLimit(1, 100.0, 2)
    # A later declaration does not override the limit in force; a change does, from each
    # group's next turn (and removing it lets a waiting group back when its clock says so).
    other = queue_kind(QUEUE, group_rate_limit=RateLimit(50, 1.0))
    assert other.lease(db, LEASE_SECS, block=False) is None
    assert queue.stats(db).group_rate_limit == SLOW
    queue.set_default_group_rate_limit(db, None)
    assert queue.stats(db).group_rate_limit is None
    queue.set_group_rate_limit(db, "A", None)  # brings A back at once: it has no limit now
    queue.set_group_rate_limit(db, "B", None)
    queue.set_group_rate_limit(db, "C", None)
    assert sorted(_drain(db, queue)) == ["A1", "A2", "B2", "C1", "C2"]


def test_a_group_refills_at_its_rate(db: redis.Redis, queue: WorkQueue) -> None:
    _add(db, queue, "A", 4)
    _add(db, queue, "B", 1)
    queue.set_group_rate_limit(db, "A", RateLimit(10, 1.0))  # one item every 100 ms
    first = queue.lease(db, LEASE_SECS, block=False)
    assert first is not None and first.id() == "A0"
    second = queue.lease(db, LEASE_SECS, block=False)
    assert second is not None and second.id() == "B0"
    assert queue.lease(db, LEASE_SECS, block=False) is None  # A waits out its 100 ms
    # A blocking lease sleeps until A's clock lets it, and no longer.
    start = time.monotonic()
    took = []
    for _ in range(3):
        item = queue.lease(db, LEASE_SECS, timeout=5)
        assert item is not None
        took.append(item.id())
    elapsed = time.monotonic() - start
    assert took == ["A1", "A2", "A3"]
    assert 0.2 <= elapsed < 2.0, elapsed


def test_a_blocked_lease_wakes_when_the_group_may_lease_again(real_db: redis.Redis) -> None:
    queue = WorkQueue(QUEUE)
    _add(real_db, queue, "A", 2)
    queue.set_group_rate_limit(real_db, "A", RateLimit(1, 0.5))
    assert queue.lease(real_db, LEASE_SECS, block=False) is not None
    start = time.monotonic()
    got = queue.lease(real_db, LEASE_SECS, timeout=5)  # blocks on the server until told
    elapsed = time.monotonic() - start
    assert got is not None and got.id() == "A1"
    assert 0.3 <= elapsed < 1.5, elapsed


def test_many_limited_groups_wait_off_the_ring(db: redis.Redis, queue: WorkQueue) -> None:
    """200 groups each out of its allowance: a lease takes the unlimited group's items at once,
    and the waiting groups cost it no turns."""
    queue.set_default_group_rate_limit(db, SLOW)
    for k in range(200):
        _add(db, queue, f"g{k}-", 2)
    assert len(_drain(db, queue)) == 200  # one each; then each waits off the ring
    assert db.llen(GK.groups) == 1  # the pacer alone
    assert db.zcard(GK.groups_paced) == 200
    queue.set_group_rate_limit(db, "free", RateLimit(1000, 1.0, burst=1000))
    _add(db, queue, "free", 5)
    assert _drain(db, queue) == [f"free{k}" for k in range(5)]


def test_a_cluster_queue_with_a_hash_tag_keeps_a_groups_limit(cluster_db: Any) -> None:
    queue = WorkQueue(KeyPrefix("{grq}"), group_rate_limit=SLOW)
    for group in ("A", "B"):
        items = [Item(b"d", id=f"{group}{k}") for k in range(2)]
        assert all(queue.add_items(cluster_db, items, group=group))
    assert queue.set_group_rate_limit(cluster_db, "B", RateLimit(1, 100.0, burst=2))
    got = queue.lease_many(cluster_db, LEASE_SECS, 5, block=False)
    assert [item.id() for item in got] == ["A0", "B0", "B1"]
    assert queue.complete_many(cluster_db, got) == got
    assert queue.lease(cluster_db, LEASE_SECS, block=False) is None
    stats = queue.stats(cluster_db, groups=["A"])
    assert stats.groups["A"] == GroupStats(1, 0, False, SLOW, True)
    queue.set_default_group_rate_limit(cluster_db, None)
    assert queue.set_group_rate_limit(cluster_db, "A", None) is False  # it had none of its own
    assert _drain(cluster_db, queue) == ["A1"]


def test_bad_input_is_refused_before_anything_is_written(db: redis.Redis, queue: WorkQueue) -> None:
    with pytest.raises(InvalidArgumentError, match="must not be empty"):
        queue.set_group_rate_limit(db, "", SLOW)
    with pytest.raises(InvalidArgumentError, match="at most 256 bytes"):
        queue.set_group_rate_limit(db, "x" * 257, SLOW)
    with pytest.raises(InvalidArgumentTypeError, match="must be a str"):
        queue.set_group_rate_limit(db, 7, SLOW)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentTypeError, match="must be a RateLimit"):
        queue.set_group_rate_limit(db, "A", 10)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentTypeError, match="must be a RateLimit"):
        queue.set_default_group_rate_limit(db, (10, 1.0))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentTypeError, match="group_rate_limit must be a RateLimit"):
        WorkQueue(QUEUE, group_rate_limit=10)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="sharded queue"):
        WorkQueue(QUEUE, shards=2, group_rate_limit=SLOW)
    sharded = WorkQueue(QUEUE, shards=2)
    with pytest.raises(InvalidArgumentError, match="sharded queue"):
        sharded.set_group_rate_limit(db, "A", SLOW)
    with pytest.raises(InvalidArgumentError, match="sharded queue"):
        sharded.set_default_group_rate_limit(db, SLOW)
    assert dump_state(db) == {}


def test_a_removal_on_a_queue_without_groups_writes_nothing(
    db: redis.Redis, queue: WorkQueue
) -> None:
    queue.set_default_group_rate_limit(db, None)
    assert not queue.set_group_rate_limit(db, "A", None)
    assert dump_state(db) == {}


# The proof ----------------------------------------------------------------------------------------

RATE, BURST, SECONDS = 20, 2, 3


def test_a_limited_group_keeps_to_its_rate_while_the_other_runs_at_full_speed(
    real_backend: Any,
) -> None:
    """A thread worker of four slots and an asyncio worker of two on a queue of two groups, A
    limited to 20 per second (burst 2) by the workers' queues: in every 1 s window (by the
    server's lease times) A gets at most 22 leases, and 20 a second over the run, while B is
    leased as fast as the workers go."""
    db = real_backend.client()
    url = real_backend.url
    producer = WorkQueue(QUEUE)
    producer.set_group_rate_limit(db, "A", RateLimit(RATE, 1.0, burst=BURST))
    for group in "AB":
        data = flow_handlers.job(url, f"grq-run:{group}")
        for start in range(0, 4000, 500):
            items = [Item(data, id=f"{group}{k}") for k in range(start, start + 500)]
            assert all(producer.add_items(db, items, group=group))
    options: dict[str, Any] = {"lease_secs": 10, "poll_secs": 0.5, "heartbeat_secs": None}
    workers: list[Any] = [
        Worker(url, [WorkQueue(QUEUE)], flow_handlers.lease_time, concurrency=4, **options),
        AsyncWorker(
            url, [AsyncWorkQueue(QUEUE)], flow_handlers.alease_time, concurrency=2, **options
        ),
    ]
    runs = [
        in_thread(
            lambda w=worker: (
                asyncio.run(w.run(signals=())) if isinstance(w, AsyncWorker) else w.run(signals=())
            )
        )
        for worker in workers
    ]
    time.sleep(SECONDS)
    for worker in workers:
        worker.stop()
    for thread, out in runs:
        thread.join(timeout=30)
        assert out and not isinstance(out[0], BaseException), out
    leased = {
        group: sorted(int(row.split()[0]) for row in db.lrange(f"grq-run:{group}:leased", 0, -1))
        for group in "AB"
    }
    times = leased["A"]
    most = max(sum(1 for t in times[i:] if t < start + 1000) for i, start in enumerate(times))
    counts = {group: len(rows) for group, rows in leased.items()}
    assert most <= RATE + BURST, (most, counts)
    # Busy at the limit: the run's leases of A, less a second's worth for the workers' start.
    assert counts["A"] >= RATE * (SECONDS - 1), counts
    assert counts["B"] > 5 * counts["A"], counts


# Write checks and out of memory -------------------------------------------------------------------


def _paced(db: redis.Redis) -> None:
    """Group "a" waiting out a short limit that has just run out (its clock lets it back when
    the checked call runs), and group "b" under the limit of every group."""
    queue = WorkQueue(PREFIX)
    queue.set_default_group_rate_limit(db, RateLimit(1, 100.0))
    queue.set_group_rate_limit(db, "a", RateLimit(1, 0.02))
    assert queue.add_items(db, [Item(b"g", id=f"g{k}") for k in range(3)], group="a")
    assert queue.add_items(db, [Item(b"h", id=f"h{k}") for k in range(3)], group="b")
    taken = queue.lease_many(db, LEASE_SECS, 4, block=False)
    assert {item.id() for item in taken} >= {"g0", "h0"}
    time.sleep(0.03)


WRITE_CHECKS = [
    WriteCheck(
        "lease-group-rate",
        "a",
        lambda s: WorkQueue(PREFIX).lease_many(s.db, LEASE_SECS, 6, block=False),
        prepare=_paced,
    ),
    WriteCheck(
        "lease-group-rate-declared",
        "a",
        lambda s: WorkQueue(PREFIX, group_rate_limit=RateLimit(5, 1.0)).lease(
            s.db, LEASE_SECS, block=False
        ),
    ),
    WriteCheck(
        "set_group_rate_limit",
        "a",
        lambda s: WorkQueue(PREFIX).set_group_rate_limit(s.db, "a", RateLimit(5, 1.0)),
        prepare=_paced,
    ),
    WriteCheck(
        "set_default_group_rate_limit",
        "a",
        lambda s: WorkQueue(PREFIX).set_default_group_rate_limit(s.db, RateLimit(5, 1.0)),
    ),
]
#: Every row x every key the scripts write x every wrong type.
test_group_rate_calls_check_types_first = write_check_test(WRITE_CHECKS)


OOM_CHECKS = [
    OomCheck(
        "set_group_rate_limit",
        lambda q, db, _: q.set_group_rate_limit(db, "a", RateLimit(5, 1.0)),
        refused=True,
    ),
    OomCheck(
        "set_default_group_rate_limit",
        lambda q, db, _: q.set_default_group_rate_limit(db, RateLimit(5, 1.0)),
        refused=True,
    ),
]
test_group_rate_calls_out_of_memory = oom_test(OOM_CHECKS)
