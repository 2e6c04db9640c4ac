"""At-most-once leasing: the item is handed out and removed in one script, and is never
delivered again, whatever happens to the worker (even a SIGKILL right after the lease)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from helpers import wait_for
from lifecycle_helpers import (
    assert_no_bookkeeping,
    blocked_clients,
    foreign_deep_clean,
    keys_under,
)
from redis_work_queue import InvalidArgumentError, Item, KeyPrefix, WorkQueue

P = "amo"
QUEUE = KeyPrefix(P)
TESTS_DIR = Path(__file__).resolve().parent


def never_again(db: redis.Redis, queue: WorkQueue) -> None:
    """Every cleaner runs, and still nothing can be leased."""
    for _ in range(2):
        queue.light_clean(db)
        queue.deep_clean(db)
        foreign_deep_clean(db, P)
        assert queue.lease(db, 30, block=False) is None
        assert queue.lease(db, 30, block=False, at_most_once=True) is None


def test_at_most_once_hands_out_and_removes(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"\x00data\xff", id="a"))
    item = queue.lease(db, 30, block=False, at_most_once=True)
    assert item is not None
    assert (item.id(), item.data(), item.deliveries) == ("a", b"\x00data\xff", 1)
    assert item.lease_token is None
    assert_no_bookkeeping(db, P, "a")
    assert keys_under(db, f"{P}:") == set()
    assert queue.queue_len(db) == 0
    assert queue.processing(db) == 0
    never_again(db, queue)


def test_at_most_once_item_cannot_be_renewed_released_or_completed(
    db: redis.Redis, queue: WorkQueue
) -> None:
    queue.add_item(db, Item(b"d", id="a"))
    item = queue.lease(db, 30, block=False, at_most_once=True)
    assert item is not None
    with pytest.raises(InvalidArgumentError):
        queue.renew(db, item, 30)
    with pytest.raises(InvalidArgumentError):
        queue.release(db, item)
    assert queue.complete(db, item) is False  # it was completed when it was handed out
    never_again(db, queue)


def test_at_most_once_counts_the_delivery(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"d", id="a"))
    for _ in range(2):
        leased = queue.lease(db, 30, block=False)
        assert leased is not None
        assert queue.release(db, leased, reason="retry")
    item = queue.lease(db, 30, block=False, at_most_once=True)
    assert item is not None
    assert item.deliveries == 3
    assert_no_bookkeeping(db, P, "a")
    assert keys_under(db, f"{P}:") == set()


def test_at_most_once_respects_max_deliveries(db: redis.Redis) -> None:
    queue = WorkQueue(KeyPrefix(P), max_deliveries=1)
    queue.add_item(db, Item(b"d", id="a"))
    queue.add_item(db, Item(b"e", id="b"))
    first = queue.lease(db, 30, block=False)
    assert first is not None
    assert first.id() == "a"
    # Make "a" queued again with its single delivery used, as a cleaner that does not know the
    # limit would.
    WorkQueue(KeyPrefix(P)).release(db, first)
    got = queue.lease(db, 30, block=False, at_most_once=True)
    assert got is not None
    assert got.id() == "b"
    assert queue.lease(db, 30, block=False, at_most_once=True) is None
    assert [d.id for d in queue.dead_letters(db)] == ["a"]


def test_at_most_once_and_normal_leases_mix_in_order(db: redis.Redis, queue: WorkQueue) -> None:
    for i in range(6):
        queue.add_item(db, Item(b"", id=f"i{i}"))
    got = []
    for n in range(6):
        item = queue.lease(db, 30, block=False, at_most_once=n % 2 == 0)
        assert item is not None
        got.append((item.id(), item.lease_token is None))
    assert got == [(f"i{n}", n % 2 == 0) for n in range(6)]
    assert queue.processing(db) == 3
    assert queue.queue_len(db) == 0


def test_blocking_at_most_once(real_db: redis.Redis, real_backend: Any, queue: WorkQueue) -> None:
    out: dict[str, Any] = {}

    def wait() -> None:
        out["item"] = queue.lease(real_backend.client(), 30, timeout=5, at_most_once=True)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    try:
        wait_for(lambda: blocked_clients(real_db) == 1, timeout=5, what="the lease to block")
        queue.add_item(real_db, Item(b"late", id="late"))
        thread.join(timeout=6)
        assert not thread.is_alive()
    finally:
        thread.join(timeout=6)
    item = out["item"]
    assert item is not None
    assert (item.id(), item.data(), item.lease_token) == ("late", b"late", None)
    assert_no_bookkeeping(real_db, P, "late")
    assert keys_under(real_db, f"{P}:") == set()
    never_again(real_db, queue)


def test_blocking_at_most_once_timeout(real_db: redis.Redis, queue: WorkQueue) -> None:
    started = time.monotonic()
    assert queue.lease(real_db, 30, timeout=0.3, at_most_once=True) is None
    assert 0.25 <= time.monotonic() - started < 2


@pytest.mark.parametrize("path", ["queued", "blocking"])
def test_sigkilled_worker_never_gets_its_item_redelivered(
    real_db: redis.Redis, redis_url: str, queue: WorkQueue, path: str
) -> None:
    """A worker process leases at most once (from a queued item, or blocked on an empty queue
    when the item arrives) and is SIGKILLed at once: the item is gone for good."""
    db = real_db
    others = [f"other-{i}" for i in range(3)]
    if path == "queued":
        queue.add_item(db, Item(b"target", id="target"))
    for item_id in others:
        queue.add_item(db, Item(item_id, id=item_id))
    held: list[Item] = []
    if path == "blocking":
        # Empty the queue so that the worker blocks; the others come back at the end.
        held = [queue.lease(db, 30, block=False) for _ in others]  # type: ignore[misc]
    report = "amo-test:report"
    script = str(TESTS_DIR / "lifecycle_handlers.py")
    proc = subprocess.Popen(
        [sys.executable, script, "lease-once", redis_url, P, report, "20"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        if path == "blocking":
            wait_for(lambda: db.exists(f"{report}:ready"), timeout=15, what="worker start")
            wait_for(lambda: blocked_clients(db) == 1, timeout=15, what="worker to block")
            queue.add_item(db, Item(b"target", id="target"))
        raw = wait_for(lambda: db.get(report), timeout=15, what="the worker's lease")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stderr:
            proc.stderr.close()
    assert json.loads(raw) == {"id": "target", "token": None, "deliveries": 1}
    assert_no_bookkeeping(db, P, "target")
    for item in held:
        assert queue.release(db, item)
    for _ in range(2):
        queue.light_clean(db)
        queue.deep_clean(db)
        foreign_deep_clean(db, P)
    seen = []
    while (item := queue.lease(db, 30, block=False)) is not None:
        seen.append(item.id())
        assert queue.complete(db, item)
    assert sorted(seen) == others
    never_again(db, queue)
    assert keys_under(db, f"{P}:") == set()


def test_an_id_queued_twice_is_handed_out_once_in_one_batch(
    db: redis.Redis, queue: WorkQueue
) -> None:
    # A client of another implementation can leave an id on the main queue twice; both copies
    # fall in one batch's chunk, and the second meets an item already handed out and removed.
    queue.add_item(db, Item(b"d", id="a"))
    queue.add_item(db, Item(b"e", id="b"))
    db.lpush(f"{P}:queue", "a")
    items = queue.lease_many(db, 30, 10, block=False, at_most_once=True)
    assert sorted(item.id() for item in items) == ["a", "b"]
    assert all(item.deliveries == 1 for item in items)
    assert keys_under(db, f"{P}:") == set()
    never_again(db, queue)
