"""Handlers that fail in every way a handler can, importable by worker processes and ``rwq``.

An item's JSON data says what to do: ``{"url", "tag", "how": ..., "sleep": s}``. Each call first
records the item's id in ``<tag>:ran`` (a list, in Redis: nothing depends on the process
surviving), then does what ``how`` says:

- ``ok``: return (its id then goes to ``<tag>:done`` too);
- ``system-exit``, ``keyboard-interrupt``, ``generator-exit``, ``cancelled``: raise
  ``SystemExit(3)``, ``KeyboardInterrupt``, ``GeneratorExit``, ``asyncio.CancelledError``;
- ``unencodable``: raise a ``ValueError`` whose text holds a lone surrogate (no UTF-8 for it);
- ``bad-str``: raise an exception whose ``__str__`` raises;
- ``bad-str-repr``: raise one whose ``__str__`` and ``__repr__`` both raise;
- ``exit``: end the process at once with ``os._exit(7)``;
- ``sleep``: sleep ``sleep`` seconds, then return as ``ok``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

import redis

from redis_work_queue import Item

#: A lone surrogate: Python text, but no UTF-8 encodes it.
UNENCODABLE = json.loads('"\\ud800 in the message"')

_clients: dict[str, redis.Redis] = {}


def job(url: str, tag: str, how: str, **options: Any) -> bytes:
    """The data of an item for these handlers."""
    return json.dumps({"url": url, "tag": tag, "how": how, **options}).encode()


def connect(url: str) -> redis.Redis:
    client = _clients.get(url)
    if client is None:
        client = _clients[url] = redis.Redis.from_url(url, socket_timeout=10)
    return client


class StrBroken(Exception):
    """An exception whose text cannot be had."""

    def __str__(self) -> str:
        raise RuntimeError("no text for this one")


class StrAndReprBroken(StrBroken):
    """An exception whose text and representation cannot be had."""

    def __repr__(self) -> str:
        raise RuntimeError("no representation either")


def _begin(item: Item) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(item.data())
    connect(spec["url"]).rpush(f"{spec['tag']}:ran", item.id())
    return spec


def _fail(how: str) -> None:
    if how == "system-exit":
        raise SystemExit(3)
    if how == "keyboard-interrupt":
        raise KeyboardInterrupt
    if how == "generator-exit":
        raise GeneratorExit
    if how == "cancelled":
        raise asyncio.CancelledError
    if how == "unencodable":
        raise ValueError(UNENCODABLE)
    if how == "bad-str":
        raise StrBroken("hidden")
    if how == "bad-str-repr":
        raise StrAndReprBroken("hidden")
    if how == "exit":
        os._exit(7)


def _end(item: Item, spec: dict[str, Any]) -> None:
    connect(spec["url"]).rpush(f"{spec['tag']}:done", item.id())


def misbehave(item: Item) -> None:
    """Do what the item's data says (a synchronous handler)."""
    spec = _begin(item)
    if spec["how"] == "sleep":
        time.sleep(spec["sleep"])
    _fail(spec["how"])
    _end(item, spec)


async def amisbehave(item: Item) -> None:
    """Do what the item's data says (an asyncio handler)."""
    spec = _begin(item)
    if spec["how"] == "sleep":
        await asyncio.sleep(spec["sleep"])
    _fail(spec["how"])
    _end(item, spec)
