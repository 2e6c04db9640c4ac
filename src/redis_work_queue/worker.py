"""Worker: runs a handler over one or more queues, with retries, lease renewal and clean stops.

For each item the worker leases: it calls the handler; completes the item when the handler
returns; releases it with an exponential backoff when the handler raises (the queue's
``max_deliveries`` then decides when it goes to the dead-letter store instead). While the
handler runs, a background thread renews the lease, so a job longer than its lease is never
handed to a second worker. SIGTERM or SIGINT stops leasing; what is running finishes; a second
signal releases what is still held and exits at once.
"""

from __future__ import annotations

import importlib
import logging
import multiprocessing
import os
import queue as queue_module
import random
import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

import redis

from .errors import InvalidArgumentError
from .item import Item
from .keyprefix import KeyPrefix
from .protocol import run
from .workqueue import WorkQueue, lease_from

logger = logging.getLogger(__name__)

Handler = Callable[[Item], Any]

#: What a worker process's parent sends it for a second stop signal (the first is SIGTERM).
CHILD_ABORT = signal.SIGUSR1


@dataclass
class WorkerStats:
    """What a worker did.

    Attributes:
        completed: Items whose handler returned and that this worker completed.
        failed: Items whose handler raised (released for a retry, or buried).
        lost: Items whose handler returned but that someone else had completed, or whose lease
            could not be renewed.
    """

    completed: int = 0
    failed: int = 0
    lost: int = 0

    def add(self, other: WorkerStats) -> None:
        """Add another worker's counts to these."""
        self.completed += other.completed
        self.failed += other.failed
        self.lost += other.lost


def backoff_delay(backoff: float, max_backoff: float, deliveries: int) -> float:
    """Exponential backoff: ``backoff`` doubled per delivery after the first, capped, +0-10%."""
    delay = min(backoff * 2 ** max(deliveries - 1, 0), max_backoff)
    return delay * (1 + random.random() / 10) if delay else 0.0


def check_options(
    queues: Sequence[object],
    kind: type,
    handler: object,
    concurrency: int,
    lease_secs: float,
    poll_secs: float,
    backoff: float,
    max_backoff: float,
) -> None:
    """Validate the options every worker runner takes.

    Raises:
        InvalidArgumentError: One is out of range.
    """
    if not queues or not all(isinstance(q, kind) for q in queues):
        raise InvalidArgumentError(f"a worker needs one or more {kind.__name__}")
    if not callable(handler):
        raise InvalidArgumentError("the handler must be callable")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise InvalidArgumentError(f"concurrency must be a positive int, got {concurrency!r}")
    for name, value in (("lease_secs", lease_secs), ("poll_secs", poll_secs)):
        if not isinstance(value, int | float) or not value > 0:
            raise InvalidArgumentError(f"{name} must be positive, got {value!r}")
    if not isinstance(backoff, int | float) or backoff < 0 or max_backoff < backoff:
        raise InvalidArgumentError("need 0 <= backoff <= max_backoff")


def load_handler(spec: str) -> Handler:
    """Import a handler named ``"package.module:function"``.

    Raises:
        InvalidArgumentError: The spec is malformed or does not name a callable.
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
    if not callable(target):
        raise InvalidArgumentError(f"handler {spec!r} is not callable")
    handler: Handler = target
    return handler


class _Renewer(threading.Thread):
    """Renews the leases a worker holds, every third of the lease time."""

    def __init__(self, db: redis.Redis, lease_secs: float) -> None:
        super().__init__(name="rwq-renewer", daemon=True)
        self.db = db
        self.lease_secs = lease_secs
        self.held: dict[int, tuple[WorkQueue, Item]] = {}
        self.lost: set[int] = set()
        self.lock = threading.Lock()
        self.stopped = threading.Event()

    def hold(self, key: int, queue: WorkQueue, item: Item) -> None:
        with self.lock:
            self.held[key] = (queue, item)
            self.lost.discard(key)

    def drop(self, key: int) -> bool:
        """Stop renewing; True when the lease was lost while held."""
        with self.lock:
            self.held.pop(key, None)
            lost = key in self.lost
            self.lost.discard(key)
            return lost

    def run(self) -> None:
        while not self.stopped.wait(self.lease_secs / 3):
            with self.lock:
                held = list(self.held.items())
            for key, (queue, item) in held:
                try:
                    if not queue.renew(self.db, item, self.lease_secs):
                        logger.warning("lost the lease on %s of %s", item.id(), queue.name.prefix)
                        with self.lock:
                            self.lost.add(key)
                            self.held.pop(key, None)
                except redis.RedisError as err:
                    logger.warning("could not renew %s: %s", item.id(), err)

    def release_all(self, reason: str) -> None:
        with self.lock:
            held = list(self.held.values())
            self.held.clear()
        for queue, item in held:
            try:
                queue.release(self.db, item, reason=reason)
                logger.info("released %s of %s", item.id(), queue.name.prefix)
            except redis.RedisError as err:
                logger.warning("could not release %s: %s", item.id(), err)


class Worker:
    """Runs ``handler`` over items leased from ``queues`` (highest priority first).

    Args:
        redis_url: Where the queues live; a URL, or (threads only) a ``Redis`` client.
        queues: The queues to work on, highest priority first.
        handler: Called with each leased item; a return completes it, an exception releases it
            for a retry. In process mode it must be importable (a module-level function).
        lease_secs: Lease length; renewed every third of it while the handler runs.
        concurrency: How many handlers run at once.
        processes: Run the handlers in worker processes instead of threads.
        backoff: Delay before the first retry of a failed item, doubled for each further
            delivery (with up to 10% random jitter).
        max_backoff: The longest retry delay.
        poll_secs: How often an idle worker looks at the stop flag.

    Raises:
        InvalidArgumentError: An argument is out of range.
    """

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
    ) -> None:
        check_options(
            queues, WorkQueue, handler, concurrency, lease_secs, poll_secs, backoff, max_backoff
        )
        if processes and not isinstance(redis_url, str):
            raise InvalidArgumentError("worker processes connect by URL: pass redis_url as a str")
        self.redis_url = redis_url
        self.queues = list(queues)
        self.handler = handler
        self.lease_secs = float(lease_secs)
        self.concurrency = concurrency
        self.processes = processes
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.poll_secs = float(poll_secs)
        self._stop = threading.Event()
        self._abort = threading.Event()
        self._signals = 0

    # Control ----------------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the worker to stop: lease nothing more, finish what is running."""
        self._stop.set()

    def abort(self) -> None:
        """Stop at once: release what is held (the handlers still running are abandoned)."""
        self._stop.set()
        self._abort.set()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        if self._signals == 1:
            logger.info("%s: finishing running jobs, leasing no more", signal.Signals(signum).name)
            self._stop.set()
        else:
            logger.warning("%s again: releasing held items", signal.Signals(signum).name)
            self._abort.set()

    def run(
        self, signals: Sequence[signal.Signals] = (signal.SIGTERM, signal.SIGINT)
    ) -> WorkerStats:
        """Work until :meth:`stop` is called or a signal arrives; return the counts.

        Args:
            signals: The signals that stop the worker (handled only when called from the main
                thread); pass ``()`` to leave signal handling alone.
        """
        previous: dict[signal.Signals, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in signals:
                previous[sig] = signal.signal(sig, self._on_signal)
        try:
            if self.processes:
                return self._run_processes()
            return self._run_threads()
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)

    # Threads ----------------------------------------------------------------------------------

    def _connect(self) -> redis.Redis:
        if isinstance(self.redis_url, str):
            return redis.Redis.from_url(self.redis_url)
        return self.redis_url

    def _run_threads(self) -> WorkerStats:
        db = self._connect()
        renewer = _Renewer(db, self.lease_secs)
        renewer.start()
        totals = WorkerStats()
        lock = threading.Lock()

        def loop() -> None:
            stats = self._loop(db, renewer)
            with lock:
                totals.add(stats)

        threads = [
            threading.Thread(target=loop, name=f"rwq-worker-{n}", daemon=True)
            for n in range(self.concurrency)
        ]
        for thread in threads:
            thread.start()
        try:
            while any(t.is_alive() for t in threads):
                if self._abort.wait(0.05):
                    renewer.release_all("worker aborted")
                    break
        finally:
            renewer.stopped.set()
        logger.info("worker stopped: %s", totals)
        return totals

    def _next(self, db: redis.Redis) -> tuple[WorkQueue, Item] | None:
        """Lease from the highest-priority queue that has an item, waiting up to poll_secs."""
        return lease_from(db, self.queues, self.lease_secs, timeout=self.poll_secs)

    def _loop(self, db: redis.Redis, renewer: _Renewer) -> WorkerStats:
        stats = WorkerStats()
        key = threading.get_ident()
        while not self._stop.is_set():
            leased = self._next(db)
            if leased is None:
                continue
            queue, item = leased
            if self._stop.is_set():
                # Leased as the stop came: give it back uncounted, at the front of the line.
                run(db, queue.ops.release(item, 0, "worker stopping", undo=True))
                break
            renewer.hold(key, queue, item)
            try:
                self.handler(item)
            except Exception as err:
                lost = renewer.drop(key)
                stats.failed += 1
                if self._abort.is_set() or lost:
                    continue
                delay = self.retry_delay(item.deliveries)
                reason = f"{type(err).__name__}: {err}"
                logger.warning(
                    "%s of %s failed (delivery %d), retry in %.1fs: %s",
                    item.id(),
                    queue.name.prefix,
                    item.deliveries,
                    delay,
                    reason,
                )
                queue.release(db, item, delay=delay, reason=reason)
                continue
            lost = renewer.drop(key)
            if self._abort.is_set():
                break
            if queue.complete(db, item) and not lost:
                stats.completed += 1
                logger.debug("completed %s of %s", item.id(), queue.name.prefix)
            else:
                stats.lost += 1
                logger.warning("%s of %s was completed elsewhere", item.id(), queue.name.prefix)
        return stats

    def retry_delay(self, deliveries: int) -> float:
        """The delay before retrying an item that failed on its ``deliveries``-th delivery."""
        return backoff_delay(self.backoff, self.max_backoff, deliveries)

    # Processes --------------------------------------------------------------------------------

    def _run_processes(self) -> WorkerStats:
        ctx = multiprocessing.get_context("spawn")
        results = ctx.Queue()
        children = [
            ctx.Process(target=_child, args=(self._child_config(), results), name=f"rwq-{n}")
            for n in range(self.concurrency)
        ]
        for child in children:
            child.start()
        forwarded = 0
        totals = WorkerStats()
        while any(c.is_alive() for c in children):
            wanted = 2 if self._abort.is_set() else 1 if self._stop.is_set() else 0
            while forwarded < wanted:
                forwarded += 1
                # Two different signals: two SIGTERMs sent at once may arrive as one.
                sig = signal.SIGTERM if forwarded == 1 else CHILD_ABORT
                for child in children:
                    if child.pid is not None and child.is_alive():
                        os.kill(child.pid, sig)
            for child in children:
                child.join(timeout=0.05)
        for _ in children:
            try:
                totals.add(results.get(timeout=1))
            except queue_module.Empty:
                logger.warning("a worker process ended without reporting its counts")
        logger.info("worker stopped: %s", totals)
        return totals

    def _child_config(self) -> dict[str, Any]:
        return {
            "redis_url": self.redis_url,
            "queues": [(q.name.prefix, q.max_deliveries) for q in self.queues],
            "handler": self.handler,
            "lease_secs": self.lease_secs,
            "backoff": self.backoff,
            "max_backoff": self.max_backoff,
            "poll_secs": self.poll_secs,
            "log_level": logging.getLogger().getEffectiveLevel(),
        }


def _child(config: dict[str, Any], results: Any) -> None:
    """Entry point of a worker process: one thread of work, driven by its parent's signals.

    SIGTERM stops it and CHILD_ABORT aborts it. SIGINT is ignored: a Ctrl-C reaches the whole
    process group, and the parent forwards it.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(
        level=config.pop("log_level"),
        format="%(asctime)s %(levelname)s %(processName)s %(name)s: %(message)s",
    )
    queues = [WorkQueue(KeyPrefix(name), limit) for name, limit in config.pop("queues")]
    worker = Worker(queues=queues, **config)
    signal.signal(CHILD_ABORT, lambda signum, frame: worker.abort())
    results.put(worker.run(signals=(signal.SIGTERM,)))
