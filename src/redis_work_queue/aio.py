"""AsyncWorkQueue: the asyncio API, on ``redis.asyncio`` clients.

Every method has the name, arguments, result and errors of its synchronous twin (see there for
the details); only the call is awaited. Both run the same operations from :mod:`.ops`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from . import cluster
from .cleaning import CleanReport, ProgressCallback
from .item import Item
from .ops import (
    DeadLetter,
    FlushReport,
    PendingItem,
    QueuedItem,
    QueueStats,
    Released,
    max_block,
)
from .protocol import ScriptCall, arun
from .workqueue import PIPELINE_CHUNK, QueueBase, _first_call, lease_from_steps, one_call


class AsyncWorkQueue(QueueBase):
    """A reliable work queue, for asyncio code (``redis.asyncio`` clients).

    The constructor's arguments are those of :class:`QueueBase`; every method is the awaitable
    twin of the :class:`WorkQueue` method of the same name.
    """

    async def add_item(
        self,
        db: Redis,
        item: Item,
        delay: float | datetime | None = None,
        ttl: float | None = None,
        replicas: int | None = None,
    ) -> bool:
        """See :meth:`WorkQueue.add_item`."""
        return await arun(db, self.ops.add_one(item, False, delay, ttl, replicas))

    async def add_unique_item(
        self,
        db: Redis,
        item: Item,
        delay: float | datetime | None = None,
        ttl: float | None = None,
        replicas: int | None = None,
    ) -> None:
        """See :meth:`WorkQueue.add_unique_item`."""
        await arun(db, self.ops.add_one(item, True, delay, ttl, replicas))

    async def add_items(
        self,
        db: Redis,
        items: Iterable[Item],
        unique: bool = False,
        delay: float | datetime | None = None,
        ttl: float | None = None,
        replicas: int | None = None,
    ) -> list[bool]:
        """See :meth:`WorkQueue.add_items`."""
        return await arun(db, self.ops.add(items, unique, delay, ttl, replicas))

    def add_unique_item_to_pipeline(self, pipeline: Pipeline, item: Item) -> None:
        """See :meth:`WorkQueue.add_unique_item_to_pipeline` (not awaited: it only queues)."""
        self.ops.queue_add_on(pipeline, item)

    def add_item_to_pipeline(self, pipeline: Pipeline, item: Item) -> None:
        """See :meth:`WorkQueue.add_item_to_pipeline`."""
        self.add_unique_item_to_pipeline(pipeline, item)

    async def lease(
        self,
        db: Redis,
        lease_secs: float,
        block: bool = True,
        timeout: float = 0,
        at_most_once: bool = False,
    ) -> Item | None:
        """See :meth:`WorkQueue.lease`."""
        steps = self.ops.lease_one(lease_secs, block, timeout, at_most_once, max_block(db))
        return await arun(db, steps)

    async def lease_many(
        self,
        db: Redis,
        lease_secs: float,
        count: int,
        block: bool = True,
        timeout: float = 0,
        at_most_once: bool = False,
    ) -> list[Item]:
        """See :meth:`WorkQueue.lease_many`."""
        steps = self.ops.lease(lease_secs, block, timeout, at_most_once, max_block(db), count)
        return await arun(db, steps)

    async def renew(self, db: Redis, item: Item, lease_secs: float) -> bool:
        """See :meth:`WorkQueue.renew`."""
        return await arun(db, self.ops.renew(item, lease_secs))

    async def release(
        self, db: Redis, item: Item, delay: float = 0, reason: str | None = None
    ) -> bool:
        """See :meth:`WorkQueue.release`."""
        return await arun(db, self.ops.release(item, delay, reason))

    async def release_outcome(
        self,
        db: Redis,
        item: Item,
        delay: float = 0,
        reason: str | None = None,
        undo: bool = False,
    ) -> Released:
        """See :meth:`WorkQueue.release_outcome`."""
        return await arun(db, self.ops.release_outcome(item, delay, reason, undo))

    async def renew_many(self, db: Redis, items: Iterable[Item], lease_secs: float) -> list[bool]:
        """See :meth:`WorkQueue.renew_many`."""
        return await _apipelined(db, [_first_call(self.ops.renew(i, lease_secs)) for i in items])

    async def give_back(
        self, db: Redis, items: Iterable[Item], reason: str | None = None
    ) -> list[bool]:
        """See :meth:`WorkQueue.give_back`."""
        calls = [_first_call(self.ops.release(i, 0, reason, undo=True)) for i in items]
        return await _apipelined(db, calls)

    @asynccontextmanager
    async def leased(
        self,
        db: Redis,
        lease_secs: float,
        block: bool = True,
        timeout: float = 0,
        retry_delay: float = 0,
    ) -> AsyncIterator[Item | None]:
        """See :meth:`WorkQueue.leased`; use with ``async with``."""
        item = await self.lease(db, lease_secs, block=block, timeout=timeout)
        if item is None:
            yield None
            return
        try:
            yield item
        except BaseException as err:
            reason = f"{type(err).__name__}: {err}"
            await self.release(db, item, delay=retry_delay, reason=reason)
            raise
        await self.complete(db, item)

    async def complete(self, db: Redis, item: Item, replicas: int | None = None) -> bool:
        """See :meth:`WorkQueue.complete`."""
        return await arun(db, self.ops.complete_one(item, replicas))

    async def complete_many(
        self, db: Redis, items: Iterable[Item], replicas: int | None = None
    ) -> list[Item]:
        """See :meth:`WorkQueue.complete_many`."""
        return await arun(db, self.ops.complete(items, replicas))

    async def light_clean(self, db: Redis) -> CleanReport:
        """See :meth:`WorkQueue.light_clean`."""
        return await arun(db, self.ops.light_clean())

    async def deep_clean(self, db: Redis, progress: ProgressCallback | None = None) -> CleanReport:
        """See :meth:`WorkQueue.deep_clean`."""
        return await arun(db, self.ops.deep_clean(progress))

    async def dead_letters(self, db: Redis, start: int = 0, count: int = 100) -> list[DeadLetter]:
        """See :meth:`WorkQueue.dead_letters`."""
        return await arun(db, self.ops.dead_letters(start, count))

    async def dead_count(self, db: Redis) -> int:
        """See :meth:`WorkQueue.dead_count`."""
        return await arun(db, self.ops.length(self.keys.dead, "ZCARD"))

    async def requeue_dead(self, db: Redis, ids: Iterable[str] | None = None) -> int:
        """See :meth:`WorkQueue.requeue_dead`."""
        return await arun(db, self.ops.requeue_dead(ids))

    async def purge_dead(self, db: Redis, ids: Iterable[str] | None = None) -> int:
        """See :meth:`WorkQueue.purge_dead`."""
        return await arun(db, self.ops.purge_dead(ids))

    async def stats(self, db: Redis) -> QueueStats:
        """See :meth:`WorkQueue.stats`."""
        return await arun(db, self.ops.stats())

    async def peek(self, db: Redis, start: int = 0, count: int = 10) -> list[QueuedItem]:
        """See :meth:`WorkQueue.peek`."""
        return await arun(db, self.ops.peek(start, count))

    async def pending(self, db: Redis, start: int = 0, count: int = 10) -> list[PendingItem]:
        """See :meth:`WorkQueue.pending`."""
        return await arun(db, self.ops.pending(start, count))

    async def flush(self, db: Redis) -> FlushReport:
        """See :meth:`WorkQueue.flush`."""
        return await arun(db, self.ops.flush())

    async def queue_len(self, db: Redis) -> int:
        """See :meth:`WorkQueue.queue_len`."""
        return await arun(db, self.ops.length(self.keys.queue))

    async def processing(self, db: Redis) -> int:
        """See :meth:`WorkQueue.processing`."""
        return await arun(db, self.ops.length(self.keys.processing))


async def lease_from(
    db: Redis,
    queues: Sequence[AsyncWorkQueue],
    lease_secs: float,
    block: bool = True,
    timeout: float = 0,
    at_most_once: bool = False,
) -> tuple[AsyncWorkQueue, Item] | None:
    """See :func:`redis_work_queue.workqueue.lease_from`."""
    steps = lease_from_steps(
        queues, lease_secs, block, timeout, at_most_once, max_block(db), one_call(db, queues)
    )
    return await arun(db, steps)


async def _apipelined(db: Redis, calls: Sequence[ScriptCall]) -> list[bool]:
    """Send independent script calls in pipelines of ``PIPELINE_CHUNK``; their flags."""
    flags: list[bool] = []
    for start in range(0, len(calls), PIPELINE_CHUNK):
        pipe = db.pipeline(transaction=False)
        for call in calls[start : start + PIPELINE_CHUNK]:
            if cluster.is_cluster(db):
                cluster.slot_of((*call.keys, *call.slot_keys))
            call.script.queue_on(pipe, call.keys, call.args)
        flags += (bool(int(reply)) for reply in await pipe.execute())
    return flags
