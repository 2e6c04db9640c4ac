"""AsyncWorkQueue: the asyncio API, on ``redis.asyncio`` clients.

Every method has the name, arguments, result and errors of its synchronous twin (see there for
the details); only the call is awaited. Both run the same operations (:mod:`.ops`,
:mod:`.queue_base`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime

from . import results, transport
from .clients import AsyncClient, AsyncPipeline
from .flow import RateLimit
from .item import Item
from .ops import events as events_ops
from .ops import flow as flow_ops
from .ops import jobs, listing
from .ops import lease as lease_ops
from .ops import schedules as schedule_ops
from .ops import sharded as sharded_ops
from .ops.events import Event
from .ops.jobs import Cancelled, ItemState, Renewed
from .ops.listing import DelayedItem
from .ops.queue import Adding
from .ops.sharded import ShardStats
from .queue_base import QueueBase, ops_of, ops_of_one
from .transport import arun


class AsyncWorkQueue(QueueBase):
    """A reliable work queue, for asyncio code (``redis.asyncio`` clients).

    The constructor's arguments are those of :class:`QueueBase`; every method is the awaitable
    twin of the :class:`WorkQueue` method of the same name.
    """

    async def add_item(
        self,
        db: AsyncClient,
        item: Item,
        delay: float | datetime | None = None,
        ttl: float | None = None,
        replicas: int | None = None,
        group: str | None = None,
    ) -> bool:
        """See :meth:`WorkQueue.add_item`."""
        return await arun(db, self.ops.add_one(item, False, Adding(delay, ttl, replicas, group)))

    async def add_unique_item(
        self,
        db: AsyncClient,
        item: Item,
        delay: float | datetime | None = None,
        ttl: float | None = None,
        replicas: int | None = None,
    ) -> None:
        """See :meth:`WorkQueue.add_unique_item`."""
        await arun(db, self.ops.add_one(item, True, Adding(delay, ttl, replicas)))

    async def add_items(
        self,
        db: AsyncClient,
        items: Iterable[Item],
        unique: bool = False,
        delay: float | datetime | None = None,
        ttl: float | None = None,
        replicas: int | None = None,
        group: str | Sequence[str | None] | None = None,
    ) -> list[bool]:
        """See :meth:`WorkQueue.add_items`."""
        return await arun(db, self.ops.add(items, unique, Adding(delay, ttl, replicas, group)))

    def add_unique_item_to_pipeline(self, pipeline: AsyncPipeline, item: Item) -> None:
        """See :meth:`WorkQueue.add_unique_item_to_pipeline` (not awaited: it only queues)."""
        transport.queue_on(pipeline, *self.ops.pipeline_add(item))

    def add_item_to_pipeline(self, pipeline: AsyncPipeline, item: Item) -> None:
        """See :meth:`WorkQueue.add_item_to_pipeline`."""
        self.add_unique_item_to_pipeline(pipeline, item)

    async def lease(
        self,
        db: AsyncClient,
        lease_secs: float,
        block: bool = True,
        timeout: float = 0,
        at_most_once: bool = False,
    ) -> Item | None:
        """See :meth:`WorkQueue.lease`."""
        steps = self.ops.lease_one(lease_secs, block, timeout, at_most_once)
        return await arun(db, steps)

    async def lease_many(
        self,
        db: AsyncClient,
        lease_secs: float,
        count: int,
        block: bool = True,
        timeout: float = 0,
        at_most_once: bool = False,
    ) -> list[Item]:
        """See :meth:`WorkQueue.lease_many`."""
        steps = self.ops.lease(lease_secs, block, timeout, at_most_once, count)
        return await arun(db, steps)

    async def renew(self, db: AsyncClient, item: Item, lease_secs: float) -> bool:
        """See :meth:`WorkQueue.renew`."""
        return bool(await arun(db, self.ops.renew(item, lease_secs)))

    async def release(
        self, db: AsyncClient, item: Item, delay: float = 0, reason: str | None = None
    ) -> bool:
        """See :meth:`WorkQueue.release`."""
        return await arun(db, self.ops.release(item, delay, reason))

    async def release_outcome(
        self,
        db: AsyncClient,
        item: Item,
        delay: float = 0,
        reason: str | None = None,
        undo: bool = False,
    ) -> results.Released:
        """See :meth:`WorkQueue.release_outcome`."""
        return await arun(db, self.ops.release_outcome(item, delay, reason, undo))

    async def renew_many(
        self, db: AsyncClient, items: Iterable[Item], lease_secs: float
    ) -> list[bool]:
        """See :meth:`WorkQueue.renew_many`."""
        return await arun(db, self.ops.renew_many(items, lease_secs))

    async def give_back(
        self, db: AsyncClient, items: Iterable[Item], reason: str | None = None
    ) -> list[bool]:
        """See :meth:`WorkQueue.give_back`."""
        return await arun(db, self.ops.give_back(items, reason))

    @asynccontextmanager
    async def leased(
        self,
        db: AsyncClient,
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

    async def complete(
        self,
        db: AsyncClient,
        item: Item,
        replicas: int | None = None,
        result: bytes | str | None = None,
    ) -> bool:
        """See :meth:`WorkQueue.complete`."""
        return await arun(db, self.ops.complete_one(item, replicas, result))

    async def complete_many(
        self, db: AsyncClient, items: Iterable[Item], replicas: int | None = None
    ) -> list[Item]:
        """See :meth:`WorkQueue.complete_many`."""
        return await arun(db, self.ops.complete(items, replicas))

    async def light_clean(self, db: AsyncClient) -> results.CleanReport:
        """See :meth:`WorkQueue.light_clean`."""
        return await arun(db, self.ops.light_clean())

    async def deep_clean(
        self, db: AsyncClient, progress: results.ProgressCallback | None = None
    ) -> results.CleanReport:
        """See :meth:`WorkQueue.deep_clean`."""
        return await arun(db, self.ops.deep_clean(progress))

    async def dead_letters(
        self,
        db: AsyncClient,
        start: int = 0,
        count: int = 100,
        preview_bytes: int | None = None,
    ) -> list[results.DeadLetter]:
        """See :meth:`WorkQueue.dead_letters`."""
        return await arun(db, self.ops.dead_letters(start, count, preview_bytes))

    async def dead_count(self, db: AsyncClient) -> int:
        """See :meth:`WorkQueue.dead_count`."""
        return await arun(db, self.ops.length(self.keys.dead, "ZCARD"))

    async def requeue_dead(
        self,
        db: AsyncClient,
        ids: Iterable[str] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """See :meth:`WorkQueue.requeue_dead`."""
        return await arun(db, self.ops.requeue_dead(ids, progress))

    async def purge_dead(self, db: AsyncClient, ids: Iterable[str] | None = None) -> int:
        """See :meth:`WorkQueue.purge_dead`."""
        return await arun(db, self.ops.purge_dead(ids))

    async def stats(
        self, db: AsyncClient, groups: Iterable[str] | None = None, top_groups: int = 0
    ) -> results.QueueStats:
        """See :meth:`WorkQueue.stats`."""
        return await arun(db, self.ops.stats(groups, top_groups))

    async def counts(self, db: AsyncClient) -> results.QueueCounts:
        """See :meth:`WorkQueue.counts`."""
        return await arun(db, self.ops.counts())

    async def peek(
        self,
        db: AsyncClient,
        start: int = 0,
        count: int = 10,
        preview_bytes: int | None = None,
    ) -> list[results.QueuedItem]:
        """See :meth:`WorkQueue.peek`."""
        return await arun(db, self.ops.peek(start, count, preview_bytes))

    async def item_data(self, db: AsyncClient, item_id: str, dead: bool = False) -> bytes | None:
        """See :meth:`WorkQueue.item_data`."""
        return await arun(db, self.ops.item_data(item_id, dead))

    async def pending(
        self, db: AsyncClient, start: int = 0, count: int = 10
    ) -> list[results.PendingItem]:
        """See :meth:`WorkQueue.pending`."""
        return await arun(db, self.ops.pending(start, count))

    async def delayed(
        self,
        db: AsyncClient,
        start: int = 0,
        count: int = 10,
        preview_bytes: int | None = None,
    ) -> list[DelayedItem]:
        """See :meth:`WorkQueue.delayed`."""
        return await arun(db, listing.delayed(self.keys, start, count, preview_bytes))

    async def flush(
        self, db: AsyncClient, progress: Callable[[int], None] | None = None
    ) -> results.FlushReport:
        """See :meth:`WorkQueue.flush`."""
        return await arun(db, self.ops.flush(progress))

    async def queue_len(self, db: AsyncClient) -> int:
        """See :meth:`WorkQueue.queue_len`."""
        return await arun(db, self.ops.length(self.keys.queue))

    async def processing(self, db: AsyncClient) -> int:
        """See :meth:`WorkQueue.processing`."""
        return await arun(db, self.ops.length(self.keys.processing))

    # Job control by id ------------------------------------------------------------------------

    async def state(self, db: AsyncClient, item_id: str) -> ItemState:
        """See :meth:`WorkQueue.state`."""
        return await arun(db, jobs.state(self.ops, item_id))

    async def states(self, db: AsyncClient, ids: Iterable[str]) -> list[ItemState]:
        """See :meth:`WorkQueue.states`."""
        return await arun(db, jobs.states(self.ops, ids))

    # Schedules (see docs/schedules.md) ---------------------------------------------------------

    async def schedule(
        self,
        db: AsyncClient,
        name: str,
        *,
        cron: str | None = None,
        every: float | None = None,
        tz: str = "UTC",
        data: bytes | str = b"",
        start: datetime | float | None = None,
        end: datetime | float | None = None,
        catch_up: schedule_ops.CatchUp = "one",
        overlap: schedule_ops.Overlap = "add",
    ) -> bool:
        """See :meth:`WorkQueue.schedule`."""
        name = schedule_ops.check_name(name)  # the name is checked before the definition
        spec = schedule_ops.Spec.of(cron, every, tz, start, end, catch_up, overlap)
        return await arun(db, schedule_ops.schedule_steps(self.keys, name, spec, data))

    async def schedules(self, db: AsyncClient) -> list[schedule_ops.Schedule]:
        """See :meth:`WorkQueue.schedules`."""
        return await arun(db, schedule_ops.list_steps(self.keys))

    async def pause_schedule(self, db: AsyncClient, name: str) -> bool:
        """See :meth:`WorkQueue.pause_schedule`."""
        return await arun(db, schedule_ops.pause_steps(self.keys, name))

    async def resume_schedule(self, db: AsyncClient, name: str) -> bool:
        """See :meth:`WorkQueue.resume_schedule`."""
        return await arun(db, schedule_ops.resume_steps(self.keys, name))

    async def remove_schedule(self, db: AsyncClient, name: str) -> bool:
        """See :meth:`WorkQueue.remove_schedule`."""
        return await arun(db, schedule_ops.remove_steps(self.keys, name))

    async def run_schedules(
        self, db: AsyncClient, limit: int = schedule_ops.DUE_LIMIT
    ) -> list[str]:
        """See :meth:`WorkQueue.run_schedules`."""
        return await arun(db, schedule_ops.run_steps(self.keys, limit))

    async def cancel(self, db: AsyncClient, item_id: str) -> Cancelled:
        """See :meth:`WorkQueue.cancel`."""
        return await arun(db, jobs.cancel(self.ops, item_id))

    async def promote(self, db: AsyncClient, item_id: str) -> bool:
        """See :meth:`WorkQueue.promote`."""
        return await arun(db, jobs.promote(self.ops, item_id))

    async def retry(self, db: AsyncClient, item_id: str) -> bool:
        """See :meth:`WorkQueue.retry`."""
        return await arun(db, jobs.retry(self.ops, item_id))

    async def reschedule(self, db: AsyncClient, item_id: str, delay: float | datetime) -> bool:
        """See :meth:`WorkQueue.reschedule`."""
        return await arun(db, jobs.reschedule(self.ops, item_id, delay))

    async def renew_outcome(self, db: AsyncClient, item: Item, lease_secs: float) -> Renewed:
        """See :meth:`WorkQueue.renew_outcome`."""
        return await arun(db, jobs.renew_outcome(self.ops, item, lease_secs))

    async def result(self, db: AsyncClient, item_id: str, timeout: float | None = None) -> bytes:
        """See :meth:`WorkQueue.result`."""
        return await arun(db, jobs.result(self.ops, item_id, timeout))

    async def report_progress(self, db: AsyncClient, item: Item, progress: object) -> bool:
        """See :meth:`WorkQueue.report_progress`."""
        return await arun(db, jobs.report_progress(self.ops, item, progress))

    async def shard_stats(self, db: AsyncClient) -> list[ShardStats]:
        """See :meth:`WorkQueue.shard_stats`."""
        return await arun(db, sharded_ops.shard_stats(self.ops))

    async def set_rate_limit(self, db: AsyncClient, limit: RateLimit | None) -> None:
        """See :meth:`WorkQueue.set_rate_limit`."""
        await arun(db, flow_ops.set_rate_limit(self.ops, limit))

    async def set_group_concurrency(self, db: AsyncClient, limit: int | None) -> None:
        """See :meth:`WorkQueue.set_group_concurrency`."""
        await arun(db, flow_ops.set_group_concurrency(self.ops, limit))

    async def set_group_rate_limit(
        self, db: AsyncClient, group: str, limit: RateLimit | None
    ) -> bool:
        """See :meth:`WorkQueue.set_group_rate_limit`."""
        return await arun(db, flow_ops.set_group_rate_limit(self.ops, group, limit))

    async def set_default_group_rate_limit(self, db: AsyncClient, limit: RateLimit | None) -> None:
        """See :meth:`WorkQueue.set_default_group_rate_limit`."""
        await arun(db, flow_ops.set_default_group_rate_limit(self.ops, limit))

    async def pause_group(self, db: AsyncClient, group: str) -> bool:
        """See :meth:`WorkQueue.pause_group`."""
        return await arun(db, flow_ops.pause_group(self.ops, group))

    async def resume_group(self, db: AsyncClient, group: str) -> bool:
        """See :meth:`WorkQueue.resume_group`."""
        return await arun(db, flow_ops.resume_group(self.ops, group))

    async def events(
        self, db: AsyncClient, since: str = "0", block: float | None = None
    ) -> AsyncIterator[Event]:
        """See :meth:`WorkQueue.events`; use with ``async for``."""
        feed = events_ops.Feed(self.ops, since, block)
        while (page := feed.page()) is not None:
            for event in await arun(db, page):
                yield event


async def lease_from(
    db: AsyncClient,
    queues: Sequence[AsyncWorkQueue],
    lease_secs: float,
    block: bool = True,
    timeout: float = 0,
    at_most_once: bool = False,
) -> tuple[AsyncWorkQueue, Item] | None:
    """See :func:`redis_work_queue.workqueue.lease_from`."""
    steps = lease_ops.lease_from(
        ops_of(queues, "lease_from"), lease_secs, block, timeout, at_most_once
    )
    found = await arun(db, steps)
    return None if found is None else (queues[found[0]], found[1])


async def complete_and_lease_from(
    db: AsyncClient,
    queue: AsyncWorkQueue,
    item: Item,
    queues: Sequence[AsyncWorkQueue],
    lease_secs: float,
) -> tuple[bool, tuple[AsyncWorkQueue, Item] | None]:
    """See :func:`redis_work_queue.workqueue.complete_and_lease_from`."""
    what = "complete_and_lease_from"
    steps = lease_ops.complete_and_lease_from(
        ops_of_one(queue, what), item, ops_of(queues, what), lease_secs
    )
    done, found = await arun(db, steps)
    return done, None if found is None else (queues[found[0]], found[1])
