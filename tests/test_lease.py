"""Leasing: non-blocking, blocking with and without timeout, lease length, tokens, FIFO, and
the blocking path's move-then-claim."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis

from helpers import b, blocked_clients, dump_state, get, keys_left, lrange, wait_for
from plugins.backends import Backend
from redis_work_queue import Item, KeyPrefix, WorkQueue, transport
from redis_work_queue.calls import Command
from redis_work_queue.ops import LEASE_BUDGET
from redis_work_queue.ops.lease import claim_call

QUEUE = KeyPrefix("lease")
QUEUE_SHARDS = (1, 4)
#: Tests that read this queue's keys or its order across all items: unsharded only.
SHARDS_SKIP = {
    "test_a_batch_counts_each_delivery_once",
    "test_blocking_lease_waits_for_an_item_pushed_later",
    "test_claim_does_not_unlist_an_item_another_worker_leased",
    "test_claim_fails_cleanly_when_a_cleaner_requeued_first",
    "test_claim_script_returns_nothing_once_the_id_was_requeued",
    "test_fifo_order",
    "test_ids_without_data_are_skipped",
    "test_lease_moves_to_processing_and_sets_token",
    "test_lease_secs_has_millisecond_precision",
    "test_only_stale_ids_gives_none",
    "test_stray_copy_of_a_leased_item_is_dropped",
    "test_worker_dying_between_move_and_claim",
}


def test_non_blocking_lease_on_empty_queue(db: redis.Redis, queue: WorkQueue) -> None:
    assert queue.lease(db, 10, block=False) is None
    assert queue.lease(db, 10, block=False, timeout=5) is None
    assert keys_left(db) == []


def test_lease_with_timeout_returns_none_after_about_the_timeout(
    db: redis.Redis, queue: WorkQueue
) -> None:
    started = time.monotonic()
    assert queue.lease(db, 10, timeout=0.3) is None
    elapsed = time.monotonic() - started
    assert 0.25 <= elapsed < 2.0
    assert keys_left(db) == []


def test_lease_moves_to_processing_and_sets_token(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"d", id="i"))
    item = queue.lease(db, 30, block=False)
    assert item is not None
    assert (item.id(), item.data()) == ("i", b"d")
    assert isinstance(item.lease_token, str)
    assert item.lease_token
    assert get(db, "lease:lease:i") == item.lease_token.encode()
    assert lrange(db, "lease:processing") == [b"i"]
    assert queue.queue_len(db) == 0
    assert queue.processing(db) == 1
    assert get(db, "lease:item:i") == b"d"  # the data stays until completion


def test_tokens_differ_between_leases(db: redis.Redis, queue: WorkQueue) -> None:
    for i in range(20):
        queue.add_item(db, Item(b"", id=str(i)))
    tokens = set()
    while (item := queue.lease(db, 30, block=False)) is not None:
        tokens.add(item.lease_token)
    assert len(tokens) == 20


@pytest.mark.parametrize("lease_secs", [0.25, 1.234, 7, 3600.5])
def test_lease_secs_has_millisecond_precision(
    db: redis.Redis, queue: WorkQueue, lease_secs: float
) -> None:
    queue.add_item(db, Item(b"", id="t"))
    before = time.monotonic()
    assert queue.lease(db, lease_secs, block=False) is not None
    pttl = db.pttl("lease:lease:t")
    spent_ms = (time.monotonic() - before) * 1000
    requested = round(lease_secs * 1000)
    assert requested - spent_ms - 5 <= pttl <= requested


def test_fifo_order(db: redis.Redis, queue: WorkQueue) -> None:
    ids = [f"item-{i}" for i in range(30)]
    for item_id in ids:
        queue.add_item(db, Item(item_id.encode(), id=item_id))
    leased = []
    while (item := queue.lease(db, 30, block=False)) is not None:
        leased.append(item.id())
    assert leased == ids


def test_counts(db: redis.Redis, queue: WorkQueue) -> None:
    assert (queue.queue_len(db), queue.processing(db)) == (0, 0)
    for i in range(5):
        queue.add_item(db, Item(b"", id=str(i)))
    assert (queue.queue_len(db), queue.processing(db)) == (5, 0)
    first = queue.lease(db, 30, block=False)
    second = queue.lease(db, 30, block=False)
    assert (queue.queue_len(db), queue.processing(db)) == (3, 2)
    assert first is not None
    assert second is not None
    queue.complete(db, first)
    assert (queue.queue_len(db), queue.processing(db)) == (3, 1)


def test_ids_without_data_are_skipped(db: redis.Redis, queue: WorkQueue) -> None:
    """Ids of completed items (no data key) are dropped, never handed out, even more of them
    than one script call examines."""
    queue.add_item(db, Item(b"real", id="real"))
    db.rpush("lease:queue", *[f"gone-{i}" for i in range(LEASE_BUDGET * 2 + 7)])
    item = queue.lease(db, 30, block=False)
    assert item is not None
    assert item.id() == "real"
    assert queue.queue_len(db) == 0
    assert lrange(db, "lease:processing") == [b"real"]


def test_only_stale_ids_gives_none(db: redis.Redis, queue: WorkQueue) -> None:
    db.rpush("lease:queue", *[f"gone-{i}" for i in range(LEASE_BUDGET + 3)])
    assert queue.lease(db, 30, block=False) is None
    assert queue.lease(db, 30, timeout=0.05) is None
    assert keys_left(db) == []


def test_stray_copy_of_a_leased_item_is_dropped(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"x", id="x"))
    held = queue.lease(db, 30, block=False)
    assert held is not None
    db.lpush("lease:queue", "x")  # a stray copy (e.g. another client re-added it)
    assert queue.lease(db, 30, block=False) is None
    assert get(db, "lease:lease:x") == held.lease_token.encode()  # the lease is untouched
    assert lrange(db, "lease:processing") == [b"x"]
    assert queue.queue_len(db) == 0


def test_a_batch_counts_each_delivery_once(db: redis.Redis, queue: WorkQueue) -> None:
    """A batch reads its ids' delivery counts and writes the new ones in one call each: counts
    carried over from earlier deliveries go up by one, and an id met twice in the batch (a
    stray copy) is handed out and counted once."""
    queue.add_items(db, [Item(b"d", id=i) for i in ("a", "b", "c")])
    first = queue.lease_many(db, 30, 2, block=False)
    assert [(i.id(), i.deliveries) for i in first] == [("a", 1), ("b", 1)]
    assert all(queue.release(db, i) for i in first)
    db.lpush("lease:queue", "c")
    again = queue.lease_many(db, 30, 10, block=False)
    assert sorted((i.id(), i.deliveries) for i in again) == [("a", 2), ("b", 2), ("c", 1)]
    counts = {b(k): b(v) for k, v in db.hgetall("lease:deliveries").items()}
    assert counts == {b"a": b"2", b"b": b"2", b"c": b"1"}
    assert queue.queue_len(db) == 0


def test_blocking_lease_returns_item_when_queue_has_one(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"b", id="b"))
    item = queue.lease(db, 30, timeout=5)
    assert item is not None
    assert item.id() == "b"


def test_blocking_lease_waits_for_an_item_pushed_later(
    real_backend: Backend, queue: WorkQueue
) -> None:
    """A blocking lease on an empty queue gets an item another client adds while it waits."""
    db = real_backend.client()
    watcher = real_backend.client()
    result: dict[str, Any] = {}

    def worker() -> None:
        client = real_backend.client()
        started = time.monotonic()
        result["item"] = queue.lease(client, 30, timeout=20)
        result["waited"] = time.monotonic() - started

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    try:
        wait_for(
            lambda: blocked_clients(watcher) >= 1,
            timeout=10,
            what="the worker to block in BRPOPLPUSH",
        )
        assert "item" not in result
        queue.add_item(db, Item(b"late", id="late"))
    finally:
        thread.join(timeout=20)
    assert not thread.is_alive()
    item = result["item"]
    assert item is not None
    assert (item.id(), item.data()) == ("late", b"late")
    assert result["waited"] < 15
    assert get(db, "lease:lease:late") == item.lease_token.encode()
    assert lrange(db, "lease:processing") == [b"late"]
    assert queue.queue_len(db) == 0


def test_blocking_lease_without_timeout(real_backend: Backend, queue: WorkQueue) -> None:
    """timeout=0 waits for ever (until an item comes)."""
    db = real_backend.client()
    result: dict[str, Any] = {}

    def worker() -> None:
        result["item"] = queue.lease(real_backend.client(), 30)

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    try:
        wait_for(
            lambda: blocked_clients(db) >= 1,
            timeout=10,
            what="the worker to block",
        )
        queue.add_item(db, Item(b"v", id="forever"))
    finally:
        thread.join(timeout=20)
    assert not thread.is_alive()
    assert result["item"].id() == "forever"


def test_worker_dying_between_move_and_claim(db: redis.Redis, queue: WorkQueue) -> None:
    """The blocking path moves the id with BRPOPLPUSH, then claims it in a script. A worker
    killed in between leaves the id on the processing list with no lease: light_clean
    requeues it and it is leased normally."""
    queue.add_item(db, Item(b"d", id="orphan"))
    moved = db.brpoplpush("lease:queue", "lease:processing", timeout=1)  # ... and "dies"
    assert moved in (b"orphan", "orphan")
    assert lrange(db, "lease:processing") == [b"orphan"]
    assert not db.exists("lease:lease:orphan")
    report = queue.light_clean(db)
    assert (report.examined, report.requeued, report.dropped) == (1, 1, 0)
    assert lrange(db, "lease:queue") == [b"orphan"]
    assert queue.processing(db) == 0
    item = queue.lease(db, 30, block=False)
    assert item is not None
    assert item.id() == "orphan"
    assert queue.complete(db, item) is True
    assert keys_left(db) == []


def _intercept_move(
    monkeypatch: pytest.MonkeyPatch, before_move: Any, after_move: Any
) -> dict[str, list[Any]]:
    """Wrap the blocking move: the first time, ``before_move()`` runs just before BRPOPLPUSH
    (the lease script has already found the queue empty) and ``after_move(moved)`` right after
    it, i.e. between the move and the claim."""
    original = transport.execute
    calls: dict[str, list[Any]] = {"moves": []}

    def intercepted(db: redis.Redis, call: Any) -> Any:
        if not (isinstance(call, Command) and call.args[0] == "BRPOPLPUSH"):
            return original(db, call)
        first = not calls["moves"]
        if first:
            before_move()
        moved = original(db, call)
        calls["moves"].append(moved)
        if first and moved is not None:
            after_move(moved)
        return moved

    monkeypatch.setattr(transport, "execute", intercepted)
    return calls


def test_claim_fails_cleanly_when_a_cleaner_requeued_first(
    backend: Backend, sync_queue: WorkQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the worker's move and its claim, a light clean requeues the unleased id. The
    claim must not lease it (it is no longer on the processing list); lease() retries and
    leases it properly from the queue, so it ends up leased once, listed once."""
    queue = sync_queue  # spies on the synchronous driver
    db = backend.client()
    other = backend.client()
    reports = []
    calls = _intercept_move(
        monkeypatch,
        lambda: queue.add_item(other, Item(b"d", id="raced")),
        lambda moved: reports.append(queue.light_clean(other)),
    )
    item = queue.lease(db, 30, timeout=2)
    assert calls["moves"][0] in (b"raced", "raced")
    assert reports[0].requeued == 1
    assert item is not None
    assert item.id() == "raced"
    assert get(db, "lease:lease:raced") == item.lease_token.encode()
    assert lrange(db, "lease:processing") == [b"raced"]
    assert queue.queue_len(db) == 0
    assert queue.complete(db, item) is True
    assert keys_left(db) == []


def test_claim_does_not_unlist_an_item_another_worker_leased(
    real_backend: Backend, sync_queue: WorkQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between worker A's move and its claim, a cleaner requeues the id and worker B leases
    it. A's claim fails (the item is B's), but it must not remove B's entry from the
    processing list: a leased item must stay on the processing list, or, if B dies, no light
    clean can ever recover it (only a deep clean would)."""
    queue = sync_queue  # spies on the synchronous driver
    db = real_backend.client()
    other = real_backend.client()
    held: dict[str, Any] = {}

    def cleaner_and_worker_b(moved: Any) -> None:
        assert queue.light_clean(other).requeued == 1
        held["b"] = queue.lease(other, 1.0, block=False)

    _intercept_move(
        monkeypatch,
        lambda: queue.add_item(other, Item(b"d", id="contested")),
        cleaner_and_worker_b,
    )
    assert queue.lease(db, 30, timeout=0.1) is None  # A gets nothing: the item is B's
    b_item = held["b"]
    assert b_item is not None
    assert b_item.id() == "contested"
    assert get(db, "lease:lease:contested") == b_item.lease_token.encode()
    assert lrange(db, "lease:processing") == [b"contested"], (
        "worker A's failed claim removed worker B's processing entry"
    )
    # Worker B dies; once its lease expires the light clean must give the item back.
    wait_for(lambda: not db.exists("lease:lease:contested"), timeout=5, what="lease expiry")
    assert queue.light_clean(db).requeued == 1
    again = queue.lease(db, 30, block=False)
    assert again is not None
    assert again.id() == "contested"


def test_claim_script_returns_nothing_once_the_id_was_requeued(
    db: redis.Redis, queue: WorkQueue
) -> None:
    """The claim script itself: after a cleaner gave the moved id back to the main queue it
    returns 0 and writes nothing (no lease, lists untouched)."""
    queue.add_item(db, Item(b"d", id="late-claim"))
    db.brpoplpush("lease:queue", "lease:processing", timeout=1)
    assert queue.light_clean(db).requeued == 1
    before = dump_state(db)
    claim = claim_call(queue.ops.keys, 30_000, "token", "0", b"late-claim", "", 0)
    reply = transport.execute(db, claim)
    assert reply == 0
    assert dump_state(db) == before
    assert not db.exists("lease:lease:late-claim")
    # While the id is still on the processing list the same call does lease it.
    db.brpoplpush("lease:queue", "lease:processing", timeout=1)
    row = transport.execute(db, claim)
    assert [row[0], bytes(row[1]), bytes(row[2]), row[3]] == [1, b"late-claim", b"d", 1]
    assert get(db, "lease:lease:late-claim") == b"token@%d" % row[4]
