"""Worker health: registrations with a heartbeat, the fleet's light-clean gate, a health file.

Each running worker registers itself in every queue it serves (``lua/heartbeat.lua``):
``<P>:workers`` (sorted set, worker id -> ms its registration lapses) and ``<P>:worker:<id>``
(hash: host, pid, queues, started, beat, completed, failed, lost). Both expire on their own, so a
worker killed with SIGKILL vanishes from the listing once its registration lapses; a clean stop
removes it at once. Each queue's keys stay in that queue's slot (Redis Cluster safe).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from . import scripts
from .keyprefix import QueueKeys
from .ops import decode
from .protocol import Command, ScriptCall, Steps, arun, run
from .queue_base import QueueBase


@dataclass(frozen=True)
class WorkerInfo:
    """A live worker of a queue, as its last heartbeat described it.

    Attributes:
        id: The worker's id (``host:pid:random``).
        host: The host it runs on.
        pid: Its process id.
        queues: The queues it serves, highest priority first.
        started: When it started (Unix time, seconds).
        beat: When it last beat (Unix time, seconds, server clock).
        lapses: When its registration lapses unless it beats again (Unix time, seconds).
        completed: Items it completed so far.
        failed: Items whose handler failed (timeouts included).
        lost: Items it lost (completed elsewhere, or whose lease it could not renew).
    """

    id: str
    host: str
    pid: int
    queues: tuple[str, ...]
    started: float
    beat: float
    lapses: float
    completed: int
    failed: int
    lost: int

    def as_dict(self) -> dict[str, Any]:
        """The worker as a JSON-ready dict."""
        return {
            "id": self.id,
            "host": self.host,
            "pid": self.pid,
            "queues": list(self.queues),
            "started": self.started,
            "beat": self.beat,
            "lapses": self.lapses,
            "completed": self.completed,
            "failed": self.failed,
            "lost": self.lost,
        }


def heartbeat_steps(
    keys: QueueKeys,
    worker_id: str,
    ttl_ms: int,
    fields: dict[str, str | int | float],
    durations: Mapping[str, int] | None = None,
) -> Steps[int]:
    """Register (or, with ``ttl_ms`` 0, unregister) a worker; returns the live worker count.

    ``durations`` (histogram field -> increment, see :mod:`.durations`) are added to
    ``<P>:durations`` in the same call.
    """
    deltas = [(name, value) for name, value in (durations or {}).items() if value]
    args: list[scripts.Arg] = [worker_id, ttl_ms, len(deltas)]
    for name, value in deltas:
        args += (name, value)
    for name, field_value in fields.items():
        args += (name, field_value)
    call = ScriptCall(
        scripts.load("heartbeat"),
        keys.script_keys,
        (*keys.script_args, *args),
        None,
        (keys.workers, keys.worker(worker_id), keys.durations),
    )
    return int((yield call))


def clean_gate_steps(keys: QueueKeys, worker_id: str, interval_ms: int) -> Steps[bool]:
    """Take the fleet's turn to light-clean the queue: True for at most one worker per interval.

    It is ``SET <P>:cleaned <worker> NX PX <interval>``; the caller cleans after. A worker that
    dies between the two leaves the turn unused: the next interval cleans.
    """
    reply = yield Command(
        ("SET", keys.cleaned, worker_id, "NX", "PX", interval_ms),
        route=keys.queue,
        slot_keys=(keys.cleaned,),
    )
    return reply is not None


def _text(fields: dict[Any, Any], name: str) -> str:
    value = fields.get(name.encode(), fields.get(name, b""))
    return decode(value) if isinstance(value, bytes | str) else str(value)


def _number(fields: dict[Any, Any], name: str) -> float:
    try:
        return float(_text(fields, name) or 0)
    except ValueError:
        return 0.0


def workers_steps(keys: QueueKeys) -> Steps[list[WorkerInfo]]:
    """The queue's live workers (registrations not lapsed), oldest registration first."""
    seconds, micros = yield Command(("TIME",), route=keys.queue)
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    rows = yield Command(
        ("ZRANGE", keys.workers, f"({now_ms}", "+inf", "BYSCORE", "WITHSCORES"),
        route=keys.queue,
        slot_keys=(keys.workers,),
    )
    if rows and isinstance(rows[0], list | tuple):  # RESP3: [[member, score], ...]
        pairs = [(row[0], row[1]) for row in rows]
    else:
        pairs = list(zip(rows[::2], rows[1::2], strict=True))
    found: list[WorkerInfo] = []
    for raw_id, lapses in pairs:
        worker_id = decode(raw_id)
        key = keys.worker(worker_id)
        flat = yield Command(("HGETALL", key), route=keys.queue, slot_keys=(key,))
        fields = flat if isinstance(flat, dict) else dict(zip(flat[::2], flat[1::2], strict=True))
        if not fields:
            continue
        queues = _text(fields, "queues")
        found.append(
            WorkerInfo(
                id=worker_id,
                host=_text(fields, "host"),
                pid=int(_number(fields, "pid")),
                queues=tuple(queues.split("\n")) if queues else (),
                started=_number(fields, "started"),
                beat=_number(fields, "beat") / 1000,
                lapses=float(lapses) / 1000,
                completed=int(_number(fields, "completed")),
                failed=int(_number(fields, "failed")),
                lost=int(_number(fields, "lost")),
            )
        )
    return found


def live_workers(db: Redis, queue: QueueBase) -> list[WorkerInfo]:
    """List the live workers of ``queue``: those whose heartbeat has not lapsed.

    Args:
        db: The Redis client.
        queue: The queue (a ``WorkQueue``).

    Returns:
        One :class:`WorkerInfo` per live worker, oldest registration first.
    """
    return run(db, workers_steps(queue.keys))


async def alive_workers(db: AsyncRedis, queue: QueueBase) -> list[WorkerInfo]:
    """Asynchronous :func:`live_workers`, for a ``redis.asyncio`` client."""
    return await arun(db, workers_steps(queue.keys))


def touch(path: str | os.PathLike[str]) -> None:
    """Create ``path`` or set its modification time to now (a liveness probe reads it)."""
    target = Path(path)
    target.touch()
    os.utime(target)
