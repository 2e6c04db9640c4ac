"""Handlers for the flow-control tests, importable by spawned worker processes.

Each item's data is JSON ``{"url", "tag", "sleep": s}``; the handler sleeps ``sleep`` seconds
(if given), then records the time it finished (``time.time()``, one clock for every process of
the machine) in the list ``<tag>:at`` and its id in ``<tag>:done``.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from typing import Any

import redis

from redis_work_queue import Item

_clients: dict[str, redis.Redis] = {}


def job(url: str, tag: str, **options: Any) -> bytes:
    """The data of an item for these handlers."""
    return json.dumps({"url": url, "tag": tag, **options}).encode()


def _note(spec: dict[str, Any], item: Item) -> None:
    client = _clients.get(spec["url"])
    if client is None:
        client = _clients[spec["url"]] = redis.Redis.from_url(spec["url"], socket_timeout=5)
    pipe = client.pipeline(transaction=False)
    pipe.rpush(f"{spec['tag']}:at", repr(time.time()))
    pipe.rpush(f"{spec['tag']}:done", item.id())
    pipe.execute()


def stamp(item: Item) -> None:
    """Sleep as the item says, then record the time (a synchronous handler)."""
    spec = json.loads(item.data())
    if spec.get("sleep"):
        time.sleep(spec["sleep"])
    _note(spec, item)


async def astamp(item: Item) -> None:
    """Sleep as the item says, then record the time (an asyncio handler)."""
    spec = json.loads(item.data())
    if spec.get("sleep"):
        await asyncio.sleep(spec["sleep"])
    _note(spec, item)


def lease_time(item: Item) -> None:
    """Record the server's ms at which the item was leased (from its lease token), and which
    worker (process and thread) ran it."""
    spec = json.loads(item.data())
    client = _clients.get(spec["url"])
    if client is None:
        client = _clients[spec["url"]] = redis.Redis.from_url(spec["url"], socket_timeout=5)
    assert item.lease_token is not None
    who = f"{os.getpid()}-{threading.get_ident()}"
    client.rpush(f"{spec['tag']}:leased", f"{item.lease_token.rsplit('@', 1)[1]} {who}")


async def alease_time(item: Item) -> None:
    """As :func:`lease_time`, for an asyncio worker."""
    lease_time(item)
