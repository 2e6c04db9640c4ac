"""Worker health: registrations with a heartbeat, the fleet's light-clean gate, a health file.

Each running worker registers itself in every queue it serves (``lua/heartbeat.lua``):
``<P>:workers`` (sorted set, worker id -> ms its registration lapses) and ``<P>:worker:<id>``
(hash: host, pid, queues, started, beat, completed, failed, lost). Both expire on their own, so a
worker killed with SIGKILL vanishes from the listing once its registration lapses; a clean stop
removes it at once. Each queue's keys stay in that queue's slot (Redis Cluster safe).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from redis import Redis

from .ops.health import workers_steps
from .queue_base import QueueBase
from .results import WorkerInfo
from .transport import arun, run

if TYPE_CHECKING:
    from redis.asyncio import Redis as AsyncRedis

__all__ = ["WorkerInfo", "alive_workers", "live_workers", "touch"]


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
