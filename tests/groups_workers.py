"""Worker functions of tests/test_groups_processes.py, run in spawned processes.

They live in their own module, importable by name, so that the 'spawn' start method finds them.
Each talks to the test's own redis-server through its URL and reports through a Redis list
outside the queue's prefix; every loop has a deadline.
"""

from __future__ import annotations

import os
import time

import redis

from redis_work_queue import KeyPrefix, WorkQueue


def holding_worker(url: str, prefix: str, cap: int, hold_secs: float, done_key: str) -> None:
    """Lease items (one second leases, renewed while held), hold each ``hold_secs``, complete
    it; stop when the queue has been empty for five seconds (or after a minute).

    Before each completion the worker notes the id under ``done_key:completing:<pid>``, so that
    a test can tell an item this worker completed just before it was killed (and never recorded
    as done) from an item the queue lost.
    """
    db = redis.Redis.from_url(url, socket_timeout=30)
    queue = WorkQueue(KeyPrefix(prefix), group_concurrency=cap)
    deadline = time.monotonic() + 60
    idle_since = time.monotonic()
    while time.monotonic() < deadline:
        item = queue.lease(db, 1.0, block=True, timeout=0.2)
        if item is None:
            if time.monotonic() - idle_since > 5.0:
                return
            continue
        time.sleep(hold_secs)
        db.rpush(f"{done_key}:completing:{os.getpid()}", item.id())
        if queue.complete(db, item):
            db.rpush(done_key, item.id())
        idle_since = time.monotonic()
