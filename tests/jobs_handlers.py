"""Handlers for the job-control runner tests, importable by spawned worker processes.

Each item's JSON data says what to do: ``{"url", "tag", "returns": value, "raw": "bytes"|"str",
"progress": value, "wait": true}``. With ``progress`` the handler reports it; with ``wait`` it
then waits (at most ``WAIT_SECS``) until the key ``<tag>:go`` exists; then it returns
``returns`` (bytes or str with ``raw``, or the value itself: the runner keeps it as JSON).
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis

from redis_work_queue import Item
from redis_work_queue.runner import areport_progress, report_progress

WAIT_SECS = 30.0


def _wait(spec: dict[str, Any]) -> None:
    if not spec.get("wait"):
        return
    db = redis.Redis.from_url(spec["url"], socket_timeout=5)
    deadline = time.monotonic() + WAIT_SECS
    while time.monotonic() < deadline and not db.exists(f"{spec['tag']}:go"):
        time.sleep(0.02)


def _value(spec: dict[str, Any]) -> Any:
    value = spec.get("returns")
    if spec.get("raw") == "bytes":
        return str(value).encode()
    if spec.get("raw") == "str":
        return str(value)
    if spec.get("raw") == "set":
        return {1, 2}  # not JSON-able
    return value


def compute(item: Item) -> Any:
    """A synchronous handler (Worker, threads or processes)."""
    spec = json.loads(item.data())
    if "progress" in spec:
        assert report_progress(spec["progress"])
    _wait(spec)
    return _value(spec)


async def acompute(item: Item) -> Any:
    """An asyncio handler (AsyncWorker)."""
    import asyncio  # noqa: PLC0415

    spec = json.loads(item.data())
    if "progress" in spec:
        assert await areport_progress(spec["progress"])
    if spec.get("wait"):
        await asyncio.to_thread(_wait, spec)
    return _value(spec)
