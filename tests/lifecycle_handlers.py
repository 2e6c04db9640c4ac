"""Handlers and small programs for the job-lifecycle tests, importable by spawned processes.

The handlers are module-level functions, so that worker processes (spawned, or ``rwq worker``
run with this directory on its path) can import them by name. Each item says what its handler
should do in its JSON data, so one handler serves every test:

    {"url": ..., "tag": ..., "sleep": s, "wait_key": k, "fail_until": n, "fail": true}

Every call is recorded in Redis (outside the queue's prefix, under ``<tag>:``), so that nothing
depends on pipes or on the process surviving:

- ``<tag>:calls``: hash id -> number of handler calls;
- ``<tag>:log``: list of JSON records {id, deliveries, pid, start, end, outcome};
- ``<tag>:started``: list of ids, pushed as each call starts.

Every wait has a deadline. Run as a script, the module also offers ``lease-once``: lease one
item at most once, say so in Redis, and hang until killed.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import redis

from redis_work_queue import Item, KeyPrefix, WorkQueue

#: No handler or helper program waits longer than this for anything.
DEADLINE_SECS = 30.0

_clients: dict[str, redis.Redis] = {}


def connect(url: str) -> redis.Redis:
    """One client per URL and process."""
    client = _clients.get(url)
    if client is None:
        client = redis.Redis.from_url(url, socket_timeout=60)
        _clients[url] = client
    return client


def job(url: str, tag: str, **options: Any) -> bytes:
    """The data of an item for :func:`handle`."""
    return json.dumps({"url": url, "tag": tag, **options}).encode()


class HandlerFailure(Exception):
    """Raised by a handler told to fail."""


def handle(item: Item) -> None:
    """Do what the item's data says, recording the call in Redis."""
    spec = json.loads(item.data())
    db = connect(spec["url"])
    tag = spec["tag"]
    start = time.time()
    db.rpush(f"{tag}:started", item.id())
    db.hincrby(f"{tag}:calls", item.id(), 1)
    outcome = "ok"
    try:
        if spec.get("sleep"):
            time.sleep(spec["sleep"])
        if spec.get("wait_key"):
            deadline = time.monotonic() + spec.get("wait_secs", DEADLINE_SECS)
            while not db.exists(spec["wait_key"]) and time.monotonic() < deadline:
                time.sleep(0.01)
        if spec.get("fail") or item.deliveries <= spec.get("fail_until", 0):
            outcome = "failed"
            raise HandlerFailure(f"failing delivery {item.deliveries} of {item.id()}")
    finally:
        record = {
            "id": item.id(),
            "deliveries": item.deliveries,
            "pid": os.getpid(),
            "start": start,
            "end": time.time(),
            "outcome": outcome,
        }
        db.rpush(f"{tag}:log", json.dumps(record))


def log(db: redis.Redis, tag: str) -> list[dict[str, Any]]:
    """The records :func:`handle` wrote under ``tag``."""
    return [json.loads(raw) for raw in db.lrange(f"{tag}:log", 0, -1)]


def calls(db: redis.Redis, tag: str) -> dict[str, int]:
    """Handler calls per id under ``tag``."""
    return {
        (k.decode() if isinstance(k, bytes) else k): int(v)
        for k, v in db.hgetall(f"{tag}:calls").items()
    }


def lease_once(url: str, prefix: str, report_key: str, timeout: str) -> None:
    """Lease one item at most once, record it under ``report_key``, then hang until killed."""
    db = connect(url)
    queue = WorkQueue(KeyPrefix(prefix))
    db.set(f"{report_key}:ready", os.getpid())
    item = queue.lease(db, 30, timeout=float(timeout), at_most_once=True)
    if item is None:
        db.set(report_key, json.dumps(None))
        return
    db.set(
        report_key,
        json.dumps({"id": item.id(), "token": item.lease_token, "deliveries": item.deliveries}),
    )
    deadline = time.monotonic() + DEADLINE_SECS
    while time.monotonic() < deadline:  # "working": the test SIGKILLs us here
        time.sleep(0.05)


def main(argv: list[str]) -> int:
    """``lifecycle_handlers.py lease-once URL PREFIX REPORT_KEY TIMEOUT``."""
    if len(argv) == 5 and argv[0] == "lease-once":
        lease_once(*argv[1:])
        return 0
    print(f"usage: {sys.argv[0]} lease-once URL PREFIX REPORT_KEY TIMEOUT", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
