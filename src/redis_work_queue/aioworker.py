"""AsyncWorker: the worker runner for asyncio handlers.

It behaves as :class:`redis_work_queue.worker.Worker`: lease (over the queues in priority
order), call the handler, complete on return, release with exponential backoff on an exception,
renew the leases of running handlers in the background, and stop cleanly on SIGTERM/SIGINT (a
second signal releases what is still held). Concurrency is a number of tasks on one event loop.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import redis.asyncio as aredis
from redis.exceptions import RedisError

from .aio import AsyncWorkQueue, lease_from
from .item import Item
from .protocol import arun
from .worker import WorkerStats, backoff_delay, check_options

logger = logging.getLogger(__name__)

AsyncHandler = Callable[[Item], Awaitable[Any]]


class AsyncWorker:
    """Runs the coroutine ``handler`` over items leased from ``queues``.

    Args:
        db: A ``redis.asyncio`` client, or a URL.
        queues: The queues to work on, highest priority first.
        handler: ``async def handler(item)``; a return completes the item, an exception
            releases it for a retry.
        lease_secs: Lease length; renewed every third of it while the handler runs.
        concurrency: How many handlers run at once (tasks).
        backoff: Delay before the first retry of a failed item, doubled per further delivery.
        max_backoff: The longest retry delay.
        poll_secs: How often an idle task looks at the stop flag.

    Raises:
        InvalidArgumentError: An argument is out of range.
    """

    def __init__(
        self,
        db: aredis.Redis | str,
        queues: Sequence[AsyncWorkQueue],
        handler: AsyncHandler,
        *,
        lease_secs: float = 30.0,
        concurrency: int = 1,
        backoff: float = 1.0,
        max_backoff: float = 300.0,
        poll_secs: float = 1.0,
    ) -> None:
        check_options(
            queues,
            AsyncWorkQueue,
            handler,
            concurrency,
            lease_secs,
            poll_secs,
            backoff,
            max_backoff,
        )
        self.db = aredis.Redis.from_url(db) if isinstance(db, str) else db
        self.queues = list(queues)
        self.handler = handler
        self.lease_secs = float(lease_secs)
        self.concurrency = concurrency
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.poll_secs = float(poll_secs)
        self.stats = WorkerStats()
        self._stop = asyncio.Event()
        self._abort = asyncio.Event()
        self._held: dict[int, tuple[AsyncWorkQueue, Item]] = {}
        self._lost: set[int] = set()
        self._signals = 0

    def stop(self) -> None:
        """Lease nothing more; let running handlers finish."""
        self._stop.set()

    def _on_signal(self, signum: int) -> None:
        self._signals += 1
        if self._signals == 1:
            logger.info("%s: finishing running jobs, leasing no more", signal.Signals(signum).name)
            self._stop.set()
        else:
            logger.warning("%s again: releasing held items", signal.Signals(signum).name)
            self._abort.set()

    async def run(
        self, signals: Sequence[signal.Signals] = (signal.SIGTERM, signal.SIGINT)
    ) -> WorkerStats:
        """Work until :meth:`stop` is called or a signal arrives; return the counts."""
        loop = asyncio.get_running_loop()
        installed = []
        for sig in signals:
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
                installed.append(sig)
            except (NotImplementedError, RuntimeError):  # not the main thread, or no support
                pass
        renewer = asyncio.create_task(self._renew_loop(), name="rwq-renewer")
        tasks = [
            asyncio.create_task(self._loop(n), name=f"rwq-worker-{n}")
            for n in range(self.concurrency)
        ]
        aborter = asyncio.create_task(self._abort.wait())
        try:
            done, _ = await asyncio.wait([*tasks, aborter], return_when=asyncio.FIRST_COMPLETED)
            if aborter in done:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                await self._release_all("worker aborted")
            else:
                await asyncio.gather(*tasks)
        finally:
            aborter.cancel()
            renewer.cancel()
            for sig in installed:
                loop.remove_signal_handler(sig)
        logger.info("worker stopped: %s", self.stats)
        return self.stats

    async def _loop(self, number: int) -> None:
        while not self._stop.is_set():
            leased = await lease_from(self.db, self.queues, self.lease_secs, timeout=self.poll_secs)
            if leased is None:
                continue
            queue, item = leased
            if self._stop.is_set():
                # Leased as the stop came: give it back uncounted, at the front of the line.
                await arun(self.db, queue.ops.release(item, 0, "worker stopping", undo=True))
                return
            self._held[number] = (queue, item)
            try:
                await self.handler(item)
            except Exception as err:
                self._held.pop(number, None)
                self.stats.failed += 1
                if number in self._lost:
                    self._lost.discard(number)
                    continue
                delay = backoff_delay(self.backoff, self.max_backoff, item.deliveries)
                reason = f"{type(err).__name__}: {err}"
                logger.warning(
                    "%s of %s failed (delivery %d), retry in %.1fs: %s",
                    item.id(),
                    queue.name.prefix,
                    item.deliveries,
                    delay,
                    reason,
                )
                await queue.release(self.db, item, delay=delay, reason=reason)
                continue
            self._held.pop(number, None)
            lost = number in self._lost
            self._lost.discard(number)
            if await queue.complete(self.db, item) and not lost:
                self.stats.completed += 1
            else:
                self.stats.lost += 1
                logger.warning("%s of %s was completed elsewhere", item.id(), queue.name.prefix)

    async def _renew_loop(self) -> None:
        while True:
            await asyncio.sleep(self.lease_secs / 3)
            for number, (queue, item) in list(self._held.items()):
                try:
                    if not await queue.renew(self.db, item, self.lease_secs):
                        logger.warning("lost the lease on %s of %s", item.id(), queue.name.prefix)
                        self._lost.add(number)
                        self._held.pop(number, None)
                except RedisError as err:
                    logger.warning("could not renew %s: %s", item.id(), err)

    async def _release_all(self, reason: str) -> None:
        held, self._held = list(self._held.values()), {}
        for queue, item in held:
            try:
                await queue.release(self.db, item, reason=reason)
            except RedisError as err:
                logger.warning("could not release %s: %s", item.id(), err)
