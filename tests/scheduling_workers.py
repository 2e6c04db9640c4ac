"""Worker functions run in spawned processes by the scheduling tests (test_priority.py).

Module-level functions, importable by name for the 'spawn' start method. They report through
Redis lists outside the queues' prefixes, so nothing depends on a pipe surviving a killed
process, and every wait is bounded.
"""

from __future__ import annotations

import json
import os

import redis

from redis_work_queue import KeyPrefix, WorkQueue
from redis_work_queue.workqueue import lease_from


def multi_queue_waiter(
    url: str, prefixes: list[str], socket_timeout: float, report_key: str, timeout: float
) -> None:
    """Block in a lease over ``prefixes`` (highest priority first); report what it got.

    ``socket_timeout`` bounds each blocking wait (half of it), and so how long the worker's
    registration on the queues outlives the worker when it is killed.
    """
    db = redis.Redis.from_url(url, socket_timeout=socket_timeout)
    queues = [WorkQueue(KeyPrefix(prefix)) for prefix in prefixes]
    db.rpush(report_key, json.dumps({"pid": os.getpid(), "event": "leasing"}))
    got = lease_from(db, queues, 30, timeout=timeout)
    if got is None:
        db.rpush(report_key, json.dumps({"pid": os.getpid(), "event": "timeout"}))
        return
    queue, item = got
    db.rpush(
        report_key,
        json.dumps(
            {"pid": os.getpid(), "event": "leased", "queue": queue.name.prefix, "id": item.id()}
        ),
    )
