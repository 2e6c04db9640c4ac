"""Worker functions run in spawned processes by test_processes.py.

They live in their own module, importable by name, so that the 'spawn' start method can find
them. Every worker talks to the test's own redis-server through its URL and reports what it did
through Redis lists (outside the queue's prefix), so that nothing depends on pipes surviving a
killed process. Every loop has a deadline.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import redis

from redis_work_queue import Item, KeyPrefix, WorkQueue


def _connect(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=60)


def complete_racer(
    url: str, prefix: str, ids: list[str], reverse: bool, barrier: Any, wins_key: str
) -> None:
    """Wait for every racer, then try to complete every id; record the ids this process won."""
    db = _connect(url)
    queue = WorkQueue(KeyPrefix(prefix))
    order = list(reversed(ids)) if reverse else list(ids)
    barrier.wait(timeout=60)
    wins = [item_id for item_id in order if queue.complete(db, Item(b"", id=item_id))]
    pipe = db.pipeline()
    for item_id in wins:
        pipe.rpush(wins_key, json.dumps({"pid": os.getpid(), "id": item_id}))
    pipe.execute()


def drain_worker(
    url: str,
    prefix: str,
    lease_secs: float,
    record_key: str,
    stop_key: str,
    deadline_secs: float,
) -> None:
    """Lease and complete items until ``stop_key`` exists (or the deadline passes).

    For every lease it records the id, the token, the token found in the lease key, the times
    the lease call started and returned and complete() was called, and what it returned.
    """
    db = _connect(url)
    queue = WorkQueue(KeyPrefix(prefix))
    deadline = time.monotonic() + deadline_secs
    while time.monotonic() < deadline:
        asked = time.time()
        item = queue.lease(db, lease_secs, timeout=0.2)
        got = time.time()
        if item is None:
            if db.exists(stop_key):
                return
            continue
        stored = db.get(queue.keys.lease(item.id()))
        completing = time.time()
        completed = queue.complete(db, item)
        db.rpush(
            record_key,
            json.dumps(
                {
                    "pid": os.getpid(),
                    "id": item.id(),
                    "data": item.data().decode("utf-8", "replace"),
                    "token": item.lease_token,
                    "stored_token": stored.decode() if stored is not None else None,
                    "asked": asked,
                    "got": got,
                    "completing": completing,
                    "done": time.time(),
                    "completed": completed,
                    "lease_secs": lease_secs,
                }
            ),
        )


def lease_and_hang(
    url: str, prefix: str, lease_secs: float, leased_key: str, leased_event: Any
) -> None:
    """Lease one item, say so, then hang until the test kills this process."""
    db = _connect(url)
    queue = WorkQueue(KeyPrefix(prefix))
    item = queue.lease(db, lease_secs, timeout=30)
    if item is None:
        return
    db.set(leased_key, json.dumps({"id": item.id(), "token": item.lease_token}))
    leased_event.set()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # "working"; the test SIGKILLs us here
        time.sleep(0.5)


def cleaner(url: str, prefix: str, stop_key: str, report_key: str, deadline_secs: float) -> None:
    """Alternate deep and light cleans until ``stop_key`` exists; record the totals."""
    db = _connect(url)
    queue = WorkQueue(KeyPrefix(prefix))
    deadline = time.monotonic() + deadline_secs
    rounds = deep_requeued = light_requeued = 0
    while time.monotonic() < deadline and not db.exists(stop_key):
        deep_requeued += queue.deep_clean(db).requeued
        light_requeued += queue.light_clean(db).requeued
        rounds += 1
    db.rpush(
        report_key,
        json.dumps({"rounds": rounds, "deep": deep_requeued, "light": light_requeued}),
    )
