"""Handlers for the runner tests, importable by spawned worker processes.

Each item's JSON data says what to do: ``{"url", "tag", "sleep": s, "fail": true, "hang": true,
"deep": n}``. A handler records its start in ``<tag>:started`` and each success in
``<tag>:done`` (lists of ids), in Redis, so that nothing depends on the process surviving.
``hang`` waits until the key ``<tag>:release`` exists (at most ``HANG_SECS``): a stuck job that
the test can let go. Every wait has a deadline.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import redis

from redis_work_queue import Item

HANG_SECS = 60.0

_clients: dict[str, redis.Redis] = {}


def connect(url: str) -> redis.Redis:
    """One client per URL and process, with short timeouts (the server may be down)."""
    client = _clients.get(url)
    if client is None:
        client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=2)
        _clients[url] = client
    return client


def job(url: str, tag: str, **options: Any) -> bytes:
    """The data of an item for these handlers."""
    return json.dumps({"url": url, "tag": tag, **options}).encode()


class HandlerBoom(Exception):
    """Raised by a handler told to fail."""


def _explode(depth: int, message: str) -> None:
    if depth > 0:
        _bounce(depth - 1, message)  # two functions in turn: no repeated frames to fold
        return
    raise HandlerBoom(message)


def _bounce(depth: int, message: str) -> None:
    _explode(depth, message)


def _note(spec: dict[str, Any], key: str, item: Item) -> None:
    for _ in range(100):  # the server may be restarting under the test
        try:
            connect(spec["url"]).rpush(f"{spec['tag']}:{key}", item.id())
            return
        except redis.ConnectionError:
            time.sleep(0.1)


def record(item: Item) -> None:
    """Do what the item's data says (a synchronous handler)."""
    spec = json.loads(item.data())
    _note(spec, "started", item)
    if spec.get("sleep"):
        time.sleep(spec["sleep"])
    if spec.get("hang"):
        deadline = time.monotonic() + HANG_SECS
        db = connect(spec["url"])
        while time.monotonic() < deadline and not db.exists(f"{spec['tag']}:release"):
            time.sleep(0.05)
    if spec.get("fail"):
        _explode(spec.get("deep", 0), f"boom on delivery {item.deliveries} of {item.id()}")
    _note(spec, "done", item)


async def arecord(item: Item) -> None:
    """Do what the item's data says (an asyncio handler: its waits can be cancelled)."""
    spec = json.loads(item.data())
    _note(spec, "started", item)
    if spec.get("sleep"):
        await asyncio.sleep(spec["sleep"])
    if spec.get("hang"):
        deadline = time.monotonic() + HANG_SECS
        db = connect(spec["url"])
        while time.monotonic() < deadline and not db.exists(f"{spec['tag']}:release"):
            await asyncio.sleep(0.05)
    if spec.get("fail"):
        _explode(spec.get("deep", 0), f"boom on delivery {item.deliveries} of {item.id()}")
    _note(spec, "done", item)
