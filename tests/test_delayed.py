"""Delayed items: never handed out before they are due (not even a millisecond early), handed
to a worker already blocked on the queue within a few milliseconds after, without busy polling,
and never queued early or twice by a cleaner (ours, or one written from the wire contract)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import redis

from helpers import (
    blocked_clients,
    get,
    keys_left,
    keys_of,
    lrange,
    node_client,
    raw,
    shard_prefixes,
    wait_for,
    wake_slice,
)
from plugins.backends import Backend
from redis_work_queue import InvalidArgumentError, Item, KeyPrefix, WorkQueue, transport
from redis_work_queue.calls import Sleep
from redis_work_queue.ops.lease import WAIT_SLICE_SECS

QUEUE = KeyPrefix("delayed")
QUEUE_SHARDS = (1, 4)
#: Tests that read this queue's keys or its order across all items: unsharded only.
SHARDS_SKIP = {
    "test_aware_datetime_in_another_zone_is_the_same_instant",
    "test_delayed_item_waits_for_its_due_time",
    "test_due_item_whose_delay_lease_lapsed_is_still_handed_out_once",
    "test_due_items_are_leased_soonest_first",
    "test_due_time_in_the_past_or_zero_delay_is_leasable_at_once",
    "test_never_leasable_before_due_in_a_tight_loop",  # counts one call per empty lease
    "test_ttl_shorter_than_delay_never_hands_it_out",
}


def due_ms(db: redis.Redis, queue: WorkQueue, item_id: str) -> int:
    """The due time (server ms) the library recorded for a delayed item."""
    score = db.zscore(keys_of(queue, item_id).delayed, item_id)
    assert score is not None, f"{item_id!r} is not delayed"
    return int(score)


def leased_at_ms(item: Item) -> int:
    """The server time (ms) at which ``item`` was leased, from its lease token."""
    assert item.lease_token is not None
    return int(item.lease_token.rpartition("@")[2])


def reference_deep_clean(db: redis.Redis, queue: WorkQueue) -> list[bytes]:
    """The deep clean of the wire contract, as another implementation would write it, on
    each shard of ``queue`` (the queue itself when unsharded)."""
    found: list[bytes] = []
    for prefix in shard_prefixes(queue):
        found += reference_deep_clean_of(node_client(db, f"{prefix}:queue"), prefix)
    return found


def reference_deep_clean_of(db: redis.Redis, prefix: str) -> list[bytes]:
    """The deep clean of the wire contract on one queue's server.

    Every ``<prefix>:item:*`` key whose id is in neither list and has no
    ``<prefix>:lease:<id>`` key is removed from the processing list and pushed onto the main
    queue.
    """
    item_prefix = f"{prefix}:item:".encode()
    queued = set(lrange(db, f"{prefix}:queue"))
    processing = set(lrange(db, f"{prefix}:processing"))
    requeued: list[bytes] = []
    cursor: Any = 0
    while True:
        cursor, keys = raw(db, "SCAN", cursor, "MATCH", f"{prefix}:item:*", "COUNT", 100)
        for key in keys:
            item_id = bytes(key)[len(item_prefix) :]
            if item_id in queued or item_id in processing:
                continue
            if raw(db, "EXISTS", f"{prefix}:lease:".encode() + item_id):
                continue
            raw(db, "LREM", f"{prefix}:processing", 0, item_id)
            raw(db, "LPUSH", f"{prefix}:queue", item_id)
            requeued.append(item_id)
        if int(cursor) == 0:
            return requeued


class CallLog:
    """Every call the library sends, by the name of the thread that sent it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: dict[str, list[Any]] = {}
        original = transport.execute

        def recording(db: Any, call: Any) -> Any:
            name = threading.current_thread().name
            self.calls.setdefault(name, []).append(call)
            return original(db, call)

        monkeypatch.setattr(transport, "execute", recording)

    def redis_calls(self, thread: str) -> int:
        return sum(not isinstance(c, Sleep) for c in self.calls.get(thread, []))


def run_in_thread(name: str, target: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Start ``target`` in a daemon thread; its result and return time land in the dict."""
    out: dict[str, Any] = {}

    def body() -> None:
        try:
            out["result"] = target()
        except BaseException as err:  # reported by the test
            out["error"] = err
        out["returned"] = time.time()

    thread = threading.Thread(target=body, name=name, daemon=True)
    thread.start()
    return thread, out


# Not before due ---------------------------------------------------------------------------------


def test_delayed_item_waits_for_its_due_time(db: redis.Redis, queue: WorkQueue) -> None:
    before = time.time()
    assert queue.add_item(db, Item(b"later", id="d"), delay=0.3)
    due = due_ms(db, queue, "d")
    assert before * 1000 + 300 - 1 <= due <= time.time() * 1000 + 300 + 1
    assert get(db, "delayed:item:d") == b"later"
    assert queue.lease(db, 30, block=False) is None
    assert queue.lease_many(db, 30, 5, block=False) == []
    assert queue.stats(db).delayed == 1
    assert queue.stats(db).queued == 0
    assert queue.peek(db) == []
    assert queue.queue_len(db) == 0
    # its id is taken: adding it again is refused, as for a queued item
    assert queue.add_item(db, Item(b"other", id="d")) is False
    assert queue.add_items(db, [Item(b"other", id="d")], delay=5) == [False]
    time.sleep(max(due / 1000 - time.time(), 0) + 0.01)
    item = queue.lease(db, 30, block=False)
    assert item is not None
    assert (item.id(), item.data(), item.deliveries) == ("d", b"later", 1)
    assert leased_at_ms(item) >= due
    assert queue.stats(db).delayed == 0
    assert queue.lease(db, 30, block=False) is None


@pytest.mark.parametrize("kind", ["seconds", "datetime"])
def test_never_leasable_before_due_in_a_tight_loop(
    real_db: redis.Redis, queue: WorkQueue, kind: str
) -> None:
    """Lease attempts in a tight loop: every attempt that returned before the due time (so
    that the server ran it before then) got nothing; the first attempt sent after it got the
    item; the lease time recorded by the server is never before the due time."""
    db = real_db
    delay: float | datetime = 0.4
    if kind == "datetime":
        delay = datetime.now(timezone.utc) + timedelta(seconds=0.4)
    assert queue.add_item(db, Item(b"x", id="d"), delay=delay)
    due = due_ms(db, queue, "d")
    if isinstance(delay, datetime):
        assert due == round(delay.timestamp() * 1000)
    last_empty_return = 0.0
    attempts = 0
    deadline = time.monotonic() + 5
    while True:
        assert time.monotonic() < deadline, "the item never came due"
        sent = time.time() * 1000
        item = queue.lease(db, 30, block=False)
        returned = time.time() * 1000
        attempts += 1
        if returned < due:
            # the server ran the script at or before `returned`, before the due time
            assert item is None, f"handed out {due - returned:.3f} ms before due"
            last_empty_return = returned
        elif item is not None:
            break
        else:
            # sent at or after due + 1 ms: the server's clock said due, so it must be there
            assert sent < due + 1, f"not handed out {sent - due:.3f} ms after due"
    assert leased_at_ms(item) >= due
    assert item.id() == "d"
    assert attempts > 100
    # the loop did probe the last few milliseconds before the due time
    assert due - last_empty_return < 10
    assert queue.lease(db, 30, block=False) is None


def test_naive_datetime_is_refused(db: redis.Redis, queue: WorkQueue) -> None:
    naive = datetime.now() + timedelta(seconds=10)  # naive: the point of the test
    with pytest.raises(InvalidArgumentError):
        queue.add_item(db, Item(b"x", id="a"), delay=naive)
    with pytest.raises(InvalidArgumentError):
        queue.add_items(db, [Item(b"x", id="a"), Item(b"y", id="b")], delay=naive)
    with pytest.raises(InvalidArgumentError):
        queue.add_unique_item(db, Item(b"x", id="a"), delay=naive)
    assert keys_left(db) == []


@pytest.mark.parametrize("bad", [-0.001, float("nan"), float("inf"), "1", True, 10**10])
def test_bad_delays_are_refused(db: redis.Redis, queue: WorkQueue, bad: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        queue.add_item(db, Item(b"x", id="a"), delay=bad)
    assert keys_left(db) == []


def test_due_time_in_the_past_or_zero_delay_is_leasable_at_once(
    db: redis.Redis, queue: WorkQueue
) -> None:
    past = datetime.now(timezone.utc) - timedelta(minutes=5)
    assert queue.add_item(db, Item(b"p", id="past"), delay=past)
    assert queue.add_item(db, Item(b"z", id="zero"), delay=0)
    other_zone = datetime.now(timezone(timedelta(hours=-7))) - timedelta(seconds=1)
    assert queue.add_item(db, Item(b"o", id="zone"), delay=other_zone)
    assert queue.stats(db).delayed == 0
    got = queue.lease_many(db, 30, 5, block=False)
    assert [i.id() for i in got] == ["past", "zero", "zone"]


def test_aware_datetime_in_another_zone_is_the_same_instant(
    db: redis.Redis, queue: WorkQueue
) -> None:
    instant = datetime.now(timezone.utc) + timedelta(hours=1)
    queue.add_item(db, Item(b"", id="utc"), delay=instant)
    queue.add_item(
        db, Item(b"", id="zoned"), delay=instant.astimezone(timezone(timedelta(hours=5)))
    )
    assert due_ms(db, queue, "utc") == due_ms(db, queue, "zoned")
    assert due_ms(db, queue, "utc") == round(instant.timestamp() * 1000)


def test_due_items_are_leased_soonest_first(bytes_db: redis.Redis, queue: WorkQueue) -> None:
    db = bytes_db
    queue.add_item(db, Item(b"", id="c"), delay=0.25)
    queue.add_item(db, Item(b"", id="a"), delay=0.05)
    queue.add_items(db, [Item(b"", id="b1"), Item(b"", id="b2")], delay=0.15)
    queue.add_item(db, Item(b"", id="later"), delay=30)
    time.sleep(0.3)
    got = queue.lease_many(db, 30, 10, block=False)
    assert [i.id() for i in got] == ["a", "b1", "b2", "c"]
    assert queue.stats(db).delayed == 1


def test_completing_a_delayed_item_removes_it(bytes_db: redis.Redis, queue: WorkQueue) -> None:
    db = bytes_db
    queue.add_item(db, Item(b"", id="d"), delay=0.1)
    assert queue.complete(db, Item(b"", id="d"))
    assert queue.stats(db).delayed == 0
    assert keys_left(db) == []
    time.sleep(0.15)
    assert queue.lease(db, 30, block=False) is None
    assert queue.light_clean(db).requeued == 0
    assert queue.lease(db, 30, block=False) is None


# A worker already waiting ---------------------------------------------------------------------


@pytest.mark.parametrize("delay", [0.3, 1.2])
def test_blocked_worker_gets_the_item_just_after_due_without_polling(
    real_backend: Backend, queue: WorkQueue, monkeypatch: pytest.MonkeyPatch, delay: float
) -> None:
    admin = real_backend.client()
    log = CallLog(monkeypatch)
    name = f"waiter-{delay}"
    thread, out = run_in_thread(name, lambda: queue.lease(real_backend.client(), 30, timeout=30))
    try:
        wait_for(lambda: blocked_clients(admin) >= 1, timeout=5, what="the worker to block")
        assert queue.add_item(admin, Item(b"later", id="d"), delay=delay)
        due = due_ms(admin, queue, "d")
        thread.join(delay + 5)
        assert not thread.is_alive()
    finally:
        queue.add_item(admin, Item(b"", id="unblock"))
        thread.join(10)
    assert "error" not in out, out.get("error")
    item = out["result"]
    assert item is not None
    assert item.id() == "d"
    late = leased_at_ms(item) - due
    # Nothing was delayed when the worker began to wait, so it was not registered (a worker
    # waiting on a queue with nothing delayed writes nothing): it finds the item at its next
    # look, at most one wait slice after it is due; then within a few ms.
    bound = 100 if delay > WAIT_SLICE_SECS else WAIT_SLICE_SECS * 1000 + 100
    bound += wake_slice(admin) * 1000
    assert 0 <= late < bound, f"leased {late} ms after due"
    assert out["returned"] * 1000 - due < bound
    # a few blocking waits and lease calls, not a poll every few milliseconds
    assert log.redis_calls(name) <= 25, log.calls[name]


def test_blocked_worker_whose_timeout_ends_before_due_gets_nothing(
    real_backend: Backend, queue: WorkQueue
) -> None:
    admin = real_backend.client()
    queue.add_item(admin, Item(b"", id="d"), delay=0.8)
    due = due_ms(admin, queue, "d")
    started = time.monotonic()
    assert queue.lease(real_backend.client(), 30, timeout=0.3) is None
    assert 0.25 <= time.monotonic() - started < 0.7
    assert time.time() * 1000 < due
    assert queue.stats(admin).delayed == 1


def test_blocked_worker_wakes_for_an_item_due_sooner_than_the_one_it_waits_for(
    real_backend: Backend, queue: WorkQueue
) -> None:
    admin = real_backend.client()
    queue.add_item(admin, Item(b"", id="late"), delay=20)
    thread, out = run_in_thread(
        "sooner", lambda: queue.lease(real_backend.client(), 30, timeout=10)
    )
    try:
        wait_for(lambda: blocked_clients(admin) >= 1, timeout=5, what="the worker to block")
        queue.add_item(admin, Item(b"", id="soon"), delay=0.3)
        due = due_ms(admin, queue, "soon")
        thread.join(5)
        assert not thread.is_alive()
    finally:
        queue.add_item(admin, Item(b"", id="unblock"))
        thread.join(10)
    item = out["result"]
    assert item is not None
    assert item.id() == "soon"
    assert 0 <= leased_at_ms(item) - due < 100 + wake_slice(admin) * 1000
    assert queue.stats(admin).delayed == 1
    # the empty wake-up id pushed for the worker leaves nothing behind
    assert b"" not in lrange(admin, queue.keys.queue)
    assert b"" not in lrange(admin, queue.keys.processing)


def test_a_plain_item_still_wakes_a_worker_waiting_for_a_delayed_one(
    real_backend: Backend, queue: WorkQueue
) -> None:
    admin = real_backend.client()
    queue.add_item(admin, Item(b"", id="late"), delay=20)
    thread, out = run_in_thread("plain", lambda: queue.lease(real_backend.client(), 30, timeout=10))
    try:
        wait_for(lambda: blocked_clients(admin) >= 1, timeout=5, what="the worker to block")
        added = time.time()
        queue.add_item(admin, Item(b"", id="now"))
        thread.join(5)
    finally:
        queue.add_item(admin, Item(b"", id="unblock"))
        thread.join(10)
    assert out["result"].id() == "now"
    assert out["returned"] - added < 0.1 + wake_slice(admin)


# Cleaners -------------------------------------------------------------------------------------


def test_cleaners_leave_a_delayed_item_alone_before_due_and_queue_it_once_after(
    bytes_db: redis.Redis, queue: WorkQueue
) -> None:
    db = bytes_db
    # Due in a second: the checks before it take a few ms, or a few hundred on a busy machine.
    queue.add_item(db, Item(b"x", id="d"), delay=1.0)
    due = due_ms(db, queue, "d")
    queue.light_clean(db)
    assert queue.deep_clean(db).requeued == 0
    assert reference_deep_clean(db, queue) == []
    queue.light_clean(db)
    leased = queue.lease(db, 30, block=False)
    assert time.time() * 1000 < due, "the test was too slow to check before the due time"
    assert leased is None
    assert queue.queue_len(db) == 0
    assert queue.stats(db).delayed == 1
    time.sleep(max(due / 1000 - time.time(), 0) + 0.01)
    # after due: every cleaner in turn, then lease: the item is handed out exactly once
    queue.light_clean(db)
    assert queue.deep_clean(db).requeued == 0
    assert reference_deep_clean(db, queue) == []
    queue.light_clean(db)
    assert queue.queue_len(db) == 1
    item = queue.lease(db, 30, block=False)
    assert item is not None
    assert item.id() == "d"
    assert queue.lease(db, 30, block=False) is None
    assert queue.deep_clean(db).requeued == 0
    assert reference_deep_clean(db, queue) == []
    assert queue.stats(db) == queue.stats(db).__class__(
        queued=0, leased=1, expired=0, delayed=0, dead=0
    )


def test_reference_deep_clean_after_due_but_before_promotion(
    bytes_db: redis.Redis, queue: WorkQueue
) -> None:
    """Due, not yet promoted by any lease or clean: the delay lease still stands (until
    shortly after the due time), so the reference deep clean leaves the item alone."""
    db = bytes_db
    queue.add_item(db, Item(b"x", id="d"), delay=0.05)
    time.sleep(0.1)
    assert queue.stats(db).delayed == 1  # nobody promoted it yet
    assert reference_deep_clean(db, queue) == []
    got = [queue.lease(db, 30, block=False) for _ in range(3)]
    assert [i.id() for i in got if i] == ["d"]


def test_delayed_item_released_with_a_delay_obeys_the_cleaners(
    bytes_db: redis.Redis, queue: WorkQueue
) -> None:
    db = bytes_db
    queue.add_item(db, Item(b"x", id="r"))
    item = queue.lease(db, 30, block=False)
    assert item is not None
    assert queue.release(db, item, delay=0.3, reason="later")
    assert reference_deep_clean(db, queue) == []
    assert queue.deep_clean(db).requeued == 0
    queue.light_clean(db)
    assert queue.lease(db, 30, block=False) is None
    time.sleep(0.35)
    again = queue.lease(db, 30, block=False)
    assert again is not None
    assert again.deliveries == 2
    assert queue.lease(db, 30, block=False) is None


@pytest.mark.parametrize("reference_clean_first", [False, True])
def test_due_item_whose_delay_lease_lapsed_is_still_handed_out_once(
    bytes_db: redis.Redis, queue: WorkQueue, reference_clean_first: bool
) -> None:
    """The delay lease lasts until 60 s after the due time. When no lease call and no clean
    ran on the queue in that minute (workers down for a deploy, say), the lease key is gone by
    the time a worker comes back. The item must still be handed out, exactly once, whether or
    not a reference deep clean requeued it meanwhile. (Simulated: the lease key is deleted,
    as its expiry would.)"""
    db = bytes_db
    queue.add_item(db, Item(b"x", id="d"), delay=0.05)
    time.sleep(0.1)
    assert get(db, queue.keys.lease("d")) == b"delayed"
    db.delete(queue.keys.lease("d"))  # the 60 s grace has passed
    if reference_clean_first:
        assert reference_deep_clean(db, queue) == [b"d"]
    got = [queue.lease(db, 30, block=False) for _ in range(3)]
    assert [i.id() for i in got if i] == ["d"]
    queue.light_clean(db)
    assert queue.deep_clean(db).requeued == 0
    assert queue.lease(db, 30, block=False) is None


def test_light_clean_promotes_every_due_item(bytes_db: redis.Redis, queue: WorkQueue) -> None:
    """light_clean: "Due delayed items are promoted" -- all of them, also when the processing
    list is short (clients of other implementations only see items on the main queue)."""
    db = bytes_db
    queue.add_items(db, [Item(b"", id=f"d{i}") for i in range(20)], delay=0.05)
    time.sleep(0.1)
    queue.light_clean(db)
    stats = queue.stats(db)
    assert (stats.queued, stats.delayed) == (20, 0)


def test_ttl_shorter_than_delay_never_hands_it_out(bytes_db: redis.Redis, queue: WorkQueue) -> None:
    db = bytes_db
    queue.add_item(db, Item(b"", id="d"), delay=0.2, ttl=0.1)
    time.sleep(0.25)
    assert queue.lease(db, 30, block=False) is None
    queue.light_clean(db)
    assert queue.deep_clean(db).requeued == 0
    assert reference_deep_clean(db, queue) == []
    assert queue.lease(db, 30, block=False) is None
    assert queue.stats(db).delayed == 0
    # only the delay lease may linger (it expires on its own), beside the counters
    assert set(raw(db, "KEYS", "*")) <= {b"delayed:lease:d", b"delayed:counts"}
