"""AsyncWorker: the worker runner for asyncio handlers.

It behaves as :class:`redis_work_queue.worker.Worker` (the logic is shared: see
:mod:`redis_work_queue.runner`; this module starts its tasks): lease over the queues in priority
order, call the handler, complete on return, release with exponential backoff on an exception,
renew the leases of running handlers, wait out Redis outages with capped backoff, time out
handlers (the task is cancelled), beat, self-clean, and stop cleanly on SIGTERM/SIGINT (a second
signal releases what is still held). Concurrency is a number of tasks on one event loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import redis.asyncio as aredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from . import server
from .aio import AsyncWorkQueue
from .connect import cluster_node
from .item import Item
from .runner.core import JOIN_SECS, Core, Job, WorkerStats
from .runner.drivers import arun_loop, cancel
from .runner.options import CleanSecs, check_options, check_pool, socket_timeout_for
from .runner.shell import Shell

logger = logging.getLogger(__name__)

AsyncHandler = Callable[[Item], Awaitable[Any]]


class AsyncWorker(Shell):
    """Runs the coroutine ``handler`` over items leased from ``queues``.

    Args:
        db: A ``redis.asyncio`` client, or a URL (then the worker makes its own client, with a
            pool sized to the concurrency, as :class:`~redis_work_queue.worker.Worker` does;
            ``redis+cluster://NODE:PORT`` makes a ``redis.asyncio.RedisCluster``).
        queues: The queues to work on, highest priority first.
        handler: ``async def handler(item)`` (or any callable that returns an awaitable); a
            return completes the item, an exception releases it for a retry. A call that
            returns no awaitable is a failure of its item (``TypeError``). A
            ``CancelledError`` the handler raises is its failure too; a cancellation of the
            worker's own task (a timeout, an abort) ends the handler.
        lease_secs: Lease length; renewed every third of it while the handler runs.
        concurrency: How many handlers run at once (tasks).
        backoff: Delay before the first retry of a failed item, doubled per further delivery.
        max_backoff: The longest retry delay.
        poll_secs: How often an idle task looks at the stop flag (at least 0.01 s).
        timeout: Cancel a handler that runs longer than this many seconds and release its item
            as a failure with reason ``timeout``; a new task takes its slot. None: no timeout.
        clean_secs: As for ``Worker``: the fleet's light clean, at most once per interval.
        heartbeat_secs: As for ``Worker``: the worker's registration and its heartbeat.
        health_file: As for ``Worker``: touched at each beat while the worker is healthy.
        schedule_secs: As for ``Worker``: the fleet's turn to add the schedules' occurrences.
        batch: As for ``Worker``: the tasks lease together and complete together.

    Raises:
        InvalidArgumentError: An argument is out of range (before anything starts).
    """

    _log = logger

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
        timeout: float | None = None,
        clean_secs: CleanSecs = "auto",
        heartbeat_secs: float | None = 5.0,
        health_file: str | os.PathLike[str] | None = None,
        schedule_secs: float | None = 1.0,
        batch: bool = True,
    ) -> None:
        self.options = check_options(
            queues,
            AsyncWorkQueue,
            handler,
            concurrency,
            lease_secs,
            poll_secs,
            backoff,
            max_backoff,
            timeout,
            clean_secs,
            heartbeat_secs,
            health_file,
            schedule_secs=schedule_secs,
            asynchronous=True,
            batch=batch,
        )
        node = cluster_node(db) if isinstance(db, str) else None
        if node is not None:
            made: Any = aredis.RedisCluster.from_url(
                node,
                socket_timeout=socket_timeout_for(self.options.poll_secs),
                socket_connect_timeout=5,
            )
            db = made
        elif isinstance(db, str):
            db = aredis.Redis.from_url(
                db,
                max_connections=concurrency + 4,
                socket_timeout=socket_timeout_for(self.options.poll_secs),
                socket_connect_timeout=5,
                retry=Retry(NoBackoff(), 0),
            )
        check_pool(db, concurrency)
        self._take(self.options)
        self.db = db
        self.queues = list(queues)
        self.handler = handler
        self.stats = WorkerStats()

    def _on_signal(self, signum: int) -> None:
        self._signalled(signum)

    def _mode(self) -> str:
        return "asyncio"

    def _source(self) -> Any:
        return self.db

    async def run(
        self, signals: Sequence[signal.Signals] = (signal.SIGTERM, signal.SIGINT)
    ) -> WorkerStats:
        """Work until :meth:`stop` is called or a signal arrives; return the counts.

        Redis being unavailable does not end it: the worker waits and reconnects.

        Raises:
            WorkerFailedError: An error that reconnecting cannot cure stopped the worker (held
                items were released); the original error is its ``__cause__``.
        """
        loop = asyncio.get_running_loop()
        installed = []
        for sig in signals:
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
                installed.append(sig)
            except (NotImplementedError, RuntimeError):  # not the main thread, or no support
                pass
        try:
            await server.acheck_eviction(self.db)
        except RedisError as err:  # unreachable now: the runner waits for it and says so
            logger.debug("could not read the eviction policy: %s", err)
        core = Core(
            self.options,
            self.queues,
            describe=" (its task is cancelled; a new task takes its slot)",
        )
        self._adopt(core)
        self.stats = core.stats
        tasks: dict[int, asyncio.Task[None]] = {}

        def start(slot: int) -> None:
            tasks[slot] = asyncio.create_task(
                arun_loop(core, core.job_loop(slot), self.db, self.handler, replace),
                name=f"rwq-worker-{slot}",
            )

        def replace(job: Job) -> None:
            task = tasks.get(job.slot)
            if task is not None:
                cancel(task)
            core.held.settled(job)
            if not core.stop_flag.is_set():
                start(job.slot)

        side = [
            asyncio.create_task(
                arun_loop(core, loop, self.db, self.handler, replace), name=f"rwq-{name}"
            )
            for name, loop in (("watchdog", core.watchdog()), ("housekeeping", core.housekeeping()))
        ]
        for slot in range(self.concurrency):
            start(slot)
        aborted = asyncio.create_task(core.abort_flag.wait_async(None), name="rwq-abort")
        try:
            while True:
                current = list(tasks.values())
                if all(task.done() for task in current):
                    break
                if aborted.done():
                    for task in current:
                        cancel(task)
                    await asyncio.gather(*current, return_exceptions=True)
                    await arun_loop(
                        core, core.release_all("worker aborted"), self.db, self.handler, replace
                    )
                    break
                await asyncio.wait([*current, aborted], return_when=asyncio.FIRST_COMPLETED)
        finally:
            aborted.cancel()
            core.stop_flag.set()  # run() itself may have been cancelled: lease nothing more
            core.finished.set()
            try:
                await asyncio.wait_for(
                    asyncio.gather(*side, return_exceptions=True), timeout=JOIN_SECS
                )
            except asyncio.TimeoutError:  # TimeoutError itself from Python 3.11
                for task in side:
                    task.cancel()
            for sig in installed:
                loop.remove_signal_handler(sig)
        return self._result(core)
