"""Worker: runs a handler over one or more queues, in threads or in worker processes.

For each item the worker leases it calls the handler; completes the item when the handler
returns; releases it with an exponential backoff when the handler raises (the queue's
``max_deliveries`` then decides when it goes to the dead letters instead), keeping the
exception's type, message and traceback as the failure reason. While the handler runs, the
lease is renewed, so a job longer than its lease is never handed to a second worker; with a
``timeout``, a handler running longer is given up and its item released as a failure.

The worker outlives Redis: connection loss, restarts, failovers, out-of-memory replies and
timeouts are waited out with capped exponential backoff (one WARNING when an outage starts, one
INFO when it ends); only an error that reconnecting cannot cure (a key of the wrong type, a
script error, an authentication failure) stops it, and then :meth:`Worker.run` raises
:class:`~redis_work_queue.errors.WorkerFailedError`. It registers itself with a heartbeat in each
queue (:func:`redis_work_queue.health.live_workers` lists them), runs the light clean of its
queues at most once per ``clean_secs`` across the whole fleet, and can touch a health file for a
liveness probe. SIGTERM or SIGINT stops leasing; what is running finishes; a second signal
releases what is still held and exits at once.

The logic is shared with :class:`~redis_work_queue.aioworker.AsyncWorker`: see
:mod:`redis_work_queue.runner`; this module starts its threads, or its worker processes
(:mod:`redis_work_queue.runner.processes`).
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any, cast

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from . import server
from .connect import cluster_node
from .errors import InvalidArgumentError
from .item import Item
from .runner.core import JOIN_SECS, Core, Job, Listener, WorkerStats
from .runner.drivers import run_loop
from .runner.options import CleanSecs, Options, check_options, check_pool, socket_timeout_for
from .runner.processes import CHILD_ABORT, ChildConfig, Pool
from .runner.retry import backoff_delay
from .runner.shell import Shell
from .workqueue import WorkQueue

__all__ = [
    "CHILD_ABORT",
    "JOIN_SECS",
    "Handler",
    "Worker",
    "WorkerStats",
    "backoff_delay",
    "check_options",
    "load_handler",
    "socket_timeout_for",
]

logger = logging.getLogger(__name__)

Handler = Callable[[Item], Any]


def load_handler(spec: str) -> Handler:
    """Import a handler named ``"package.module:function"``.

    Raises:
        InvalidArgumentError: The spec is malformed, its module fails to import, or it does not
            name a callable.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise InvalidArgumentError(f"a handler is named module:function, got {spec!r}")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as err:
        raise InvalidArgumentError(f"cannot load handler {spec!r}: {err}") from err
    except Exception as err:  # the module itself failed while it was imported
        raise InvalidArgumentError(
            f"cannot load handler {spec!r}: importing {module_name!r} raised "
            f"{type(err).__name__}: {err}"
        ) from err
    if not callable(target):
        raise InvalidArgumentError(f"handler {spec!r} is not callable")
    handler: Handler = target
    return handler


def _warn_if_evicting(db: Any) -> None:
    """Log once when the server may evict queue keys (see :func:`server.check_eviction`)."""
    try:
        server.check_eviction(db)
    except redis.RedisError as err:  # unreachable now: the runner waits for it and says so
        logger.debug("could not read the eviction policy: %s", err)


class Worker(Shell):
    """Runs ``handler`` over items leased from ``queues`` (highest priority first).

    While Redis is unavailable the worker waits and reconnects (capped exponential backoff,
    one WARNING per outage). A complete or release whose reply was lost is retried once Redis
    answers again: a retried complete that returns False means the first try had run, so the
    item counts as completed, not lost; a release that cannot be written while the lease lasts
    is left to the lease (logged).

    Args:
        redis_url: Where the queues live; a URL, or (threads only) a ``Redis`` client. From a
            URL the worker makes its own client: a pool sized to the concurrency, a socket
            timeout of ``max(5, 2 * poll_secs + 2)`` s (a hung server is noticed within it) and
            no retries of its own (the worker retries). ``redis+cluster://NODE:PORT``
            (``rediss+cluster://`` for TLS) is a Redis Cluster reached through one of its
            nodes: each worker process, and the parent, makes its own ``RedisCluster``.
        queues: The queues to work on, highest priority first.
        handler: Called with each leased item; a return completes it, an exception (any
            ``BaseException``: ``SystemExit`` and ``KeyboardInterrupt`` too) releases it for a
            retry, and the worker goes on. In process mode it must be importable (a
            module-level function); a worker process that dies fails its item the same way. An
            ``async def`` handler is refused (it would never run): use ``AsyncWorker``.
        lease_secs: Lease length; renewed every third of it while the handler runs.
        concurrency: How many handlers run at once.
        processes: Run the handlers in worker processes instead of threads.
        backoff: Delay before the first retry of a failed item, doubled for each further
            delivery (with up to 10% random jitter).
        max_backoff: The longest retry delay.
        poll_secs: How often an idle worker looks at the stop flag (at least 0.01 s).
        timeout: Give up a handler that runs longer than this many seconds: its lease is no
            longer renewed and its item is released as a failure with reason ``timeout``
            (counted in ``failed`` and ``timed_out``; ``max_deliveries`` applies as to any
            failure). A thread cannot be killed: the timed-out thread is abandoned (its result,
            if it ever returns, is discarded) and a new thread takes its slot. In process mode
            the worker process is killed and replaced. None (the default): no timeout.
        clean_secs: Run the light clean of the queues (recovering items whose lease expired)
            at most once per this many seconds across every worker of the queues, gated in
            Redis (``<P>:cleaned``). ``"auto"`` (the default) is the lease time, at least 1 s;
            None disables it (then run ``rwq light-clean`` from cron).
        heartbeat_secs: Register the worker in each queue (``<P>:workers``,
            ``<P>:worker:<id>``) and beat this often; the registration lapses after three
            missed beats. None disables it.
        health_file: Touch this file at each heartbeat while the worker is healthy: not during
            an outage, nor when every handler is stuck past its timeout. A liveness probe
            checks its age.
        schedule_secs: Add the due occurrences of the queues' schedules (see
            :meth:`WorkQueue.schedule`) at most once per this many seconds across every worker
            of the queues, gated in Redis (``<P>:schedules:turn``, set only on a queue that has
            schedules). None leaves it to others (``rwq scheduler``).
        batch: With several threads, lease for the slots waiting for an item in one call and
            complete the handlers that returned together; with fast handlers, the thread that
            leased runs the items itself, with one thread too (see
            :mod:`redis_work_queue.runner.batching`); False: each slot leases and completes
            its own items. Worker processes each run one slot, which does not batch.

    Raises:
        InvalidArgumentError: An argument is out of range, or the handler is asynchronous
            (before anything starts).
    """

    _log = logger

    def __init__(
        self,
        redis_url: str | redis.Redis,
        queues: Sequence[WorkQueue],
        handler: Handler,
        *,
        lease_secs: float = 30.0,
        concurrency: int = 1,
        processes: bool = False,
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
        self.options: Options = check_options(
            queues,
            WorkQueue,
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
            batch=batch,
        )
        if processes and not isinstance(redis_url, str):
            raise InvalidArgumentError("worker processes connect by URL: pass redis_url as a str")
        if not isinstance(redis_url, str | redis.Redis) and not hasattr(redis_url, "evalsha"):
            raise InvalidArgumentError("redis_url must be a URL or a Redis client")
        if not isinstance(redis_url, str):
            check_pool(redis_url, concurrency)
        self._take(self.options)
        self.redis_url = redis_url
        self.queues = list(queues)
        self.handler = handler
        self.processes = processes
        self._listener: Listener | None = None

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signalled(signum)

    def _mode(self) -> str:
        return "processes" if self.processes else "threads"

    def _source(self) -> Any:
        return self.redis_url

    def run(
        self, signals: Sequence[signal.Signals] = (signal.SIGTERM, signal.SIGINT)
    ) -> WorkerStats:
        """Work until :meth:`stop` is called or a signal arrives; return the counts.

        Redis being unavailable does not end it: the worker waits and reconnects.

        Args:
            signals: The signals that stop the worker (handled only when called from the main
                thread); pass ``()`` to leave signal handling alone.

        Raises:
            WorkerFailedError: An error that reconnecting cannot cure stopped the worker (held
                items were released); the original error is its ``__cause__``.
        """
        previous: dict[signal.Signals, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in signals:
                previous[sig] = signal.signal(sig, self._on_signal)
        try:
            core = self._run_processes() if self.processes else self._run_threads()
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)
        return self._result(core)

    def _new_core(self, renews: bool, describe: str) -> Core:
        core = Core(self.options, self.queues, renews=renews, describe=describe)
        core.listener = self._listener
        return self._adopt(core)

    def _connect(self) -> redis.Redis:
        if isinstance(self.redis_url, str):
            node = cluster_node(self.redis_url)
            if node is not None:
                # A cluster client keeps its own retries: they follow a failover's new primary.
                made: Any = RedisCluster.from_url(
                    node,
                    socket_timeout=socket_timeout_for(self.poll_secs),
                    socket_connect_timeout=5,
                )
                return cast(redis.Redis, made)
            return redis.Redis.from_url(
                self.redis_url,
                max_connections=self.concurrency + 4,
                socket_timeout=socket_timeout_for(self.poll_secs),
                socket_connect_timeout=5,
                retry=Retry(NoBackoff(), 0),
            )
        return self.redis_url

    def _side_threads(
        self, core: Core, db: redis.Redis, replace: Callable[[Job], None]
    ) -> list[threading.Thread]:
        """Start the watchdog and housekeeping threads."""
        side = [
            threading.Thread(
                target=run_loop,
                args=(core, loop, db, self.handler, replace),
                name=f"rwq-{name}",
                daemon=True,
            )
            for name, loop in (("watchdog", core.watchdog()), ("housekeeping", core.housekeeping()))
        ]
        for thread in side:
            thread.start()
        return side

    @staticmethod
    def _end(core: Core, side: list[threading.Thread]) -> None:
        core.finished.set()
        deadline = time.monotonic() + JOIN_SECS
        for thread in side:
            thread.join(timeout=max(deadline - time.monotonic(), 0.01))

    # Threads ----------------------------------------------------------------------------------

    def _run_threads(self) -> Core:
        db = self._connect()
        _warn_if_evicting(db)
        core = self._new_core(True, " (its thread is abandoned; a new thread takes its slot)")
        slots: dict[int, threading.Thread] = {}
        lock = threading.Lock()

        def start(slot: int) -> None:
            thread = threading.Thread(
                target=run_loop,
                args=(core, core.job_loop(slot), db, self.handler, replace),
                name=f"rwq-worker-{slot}",
                daemon=True,
            )
            # Started under the lock: the loop below never sees a slot's thread not yet started
            # (it would take the worker for ended).
            with lock:
                slots[slot] = thread
                thread.start()

        def replace(job: Job) -> None:
            if not core.stop_flag.is_set():
                start(job.slot)

        for slot in range(self.concurrency):
            start(slot)
        side = self._side_threads(core, db, replace)
        try:
            while True:
                with lock:
                    current = list(slots.values())
                if not any(t.is_alive() for t in current):
                    break
                if core.abort_flag.wait(0.05):
                    run_loop(core, core.release_all("worker aborted"), db, self.handler, replace)
                    break
        finally:
            self._end(core, side)
        return core

    # Processes --------------------------------------------------------------------------------

    def _run_processes(self) -> Core:
        db = self._connect()
        _warn_if_evicting(db)
        core = self._new_core(False, " (its process is killed and replaced)")
        pool = Pool(core, self._child_config(), self.concurrency)
        pool.start()
        side = self._side_threads(core, db, pool.replace)
        try:
            pool.watch()
        finally:
            self._end(core, [*side, pool.reader])
        return core

    def _child_config(self) -> ChildConfig:
        assert isinstance(self.redis_url, str)  # checked in __init__
        return ChildConfig(
            redis_url=self.redis_url,
            queues=tuple(
                (
                    q.name.prefix,
                    q.max_deliveries,
                    q.keep_results,
                    q.shards,
                    q.shards_before,
                    q.group_concurrency,
                    q.events_maxlen,
                    q.group_rate_limit,
                )
                for q in self.queues
            ),
            handler=self.handler,
            lease_secs=self.lease_secs,
            backoff=self.backoff,
            max_backoff=self.max_backoff,
            poll_secs=self.poll_secs,
            log_level=logging.getLogger().getEffectiveLevel(),
        )
