"""What the two runners share around their core: options, stop and abort, signals, the result.

:class:`~redis_work_queue.worker.Worker` (threads, processes) and
:class:`~redis_work_queue.aioworker.AsyncWorker` (asyncio tasks) add only how they start their
loops.
"""

from __future__ import annotations

import logging
import signal
from typing import Any

from ..connect import mask
from ..errors import WorkerFailedError
from .core import Core, WorkerStats
from .options import Options
from .retry import backoff_delay


class Shell:
    """A runner around a :class:`~.core.Core`: what does not depend on threads or tasks.

    A subclass calls :meth:`_take` with its checked options, :meth:`_adopt` with each run's
    core, and returns :meth:`_result` at the end of a run.
    """

    #: The runner's logger (its module's).
    _log: logging.Logger

    def _take(self, options: Options) -> None:
        """Keep the checked options, and the state of a runner that has not run yet."""
        self.options = options
        self.lease_secs = options.lease_secs
        self.concurrency = options.concurrency
        self.backoff = options.backoff
        self.max_backoff = options.max_backoff
        self.poll_secs = options.poll_secs
        self.timeout = options.timeout
        self.worker_id = ""
        self._stopping = False
        self._aborting = False
        self._signals = 0
        self._core: Core | None = None

    def stop(self) -> None:
        """Ask the worker to stop: lease nothing more, finish what is running.

        Safe to call from any thread and from a signal handler.
        """
        self._stopping = True
        if self._core is not None:
            self._core.stop_flag.set()

    def abort(self) -> None:
        """Stop at once: release what is held.

        Running handlers are ended where the runner can (an asyncio task is cancelled, a worker
        process stopped) and abandoned where it cannot (a thread).
        """
        self._stopping = self._aborting = True
        if self._core is not None:
            self._core.stop_flag.set()
            self._core.abort_flag.set()

    def retry_delay(self, deliveries: int) -> float:
        """The delay before retrying an item that failed on its ``deliveries``-th delivery."""
        return backoff_delay(self.backoff, self.max_backoff, deliveries)

    def _signalled(self, signum: int) -> None:
        """A stop signal: the first stops the worker, the next aborts it."""
        self._signals += 1
        name = signal.Signals(signum).name
        if self._signals == 1:
            self._log.info("%s: finishing running jobs, leasing no more", name)
            self.stop()
        else:
            self._log.warning("%s again: releasing held items", name)
            self.abort()

    def _adopt(self, core: Core) -> Core:
        """Make ``core`` this run's, told of a stop or abort that came before it."""
        self.worker_id = core.worker_id
        self._log.info(
            "worker %s started: queues %s, concurrency %d, %s, %s",
            core.worker_id,
            ", ".join(queue.name.prefix for queue in core.queues),
            self.concurrency,
            self._mode(),
            where_of(self._source()),
        )
        if self._stopping:
            core.stop_flag.set()
        if self._aborting:
            core.abort_flag.set()
        self._core = core
        return core

    def _result(self, core: Core) -> WorkerStats:
        """The counts of a run that ended, or the error that stopped it.

        Raises:
            WorkerFailedError: An error that reconnecting cannot cure stopped the worker.
        """
        totals = core.totals()
        if isinstance(core.fatal, WorkerFailedError):  # reported by a worker process
            raise core.fatal
        if core.fatal is not None:
            raise WorkerFailedError(
                f"the worker stopped on {type(core.fatal).__name__}: {core.fatal}"
            ) from core.fatal
        self._log.info(
            "worker %s stopped: completed %d, failed %d, lost %d, timed out %d",
            core.worker_id,
            totals.completed,
            totals.failed,
            totals.lost,
            totals.timed_out,
        )
        return totals

    def _mode(self) -> str:
        """How the handlers run (``threads``, ``processes``, ``asyncio``), for the start line."""
        return "threads"

    def _source(self) -> Any:
        """Where the queues live: a URL or a client, for the start line."""
        return None


def where_of(source: Any) -> str:
    """Where a worker connects, for a log line: a URL with its password masked.

    Args:
        source: A URL, or a redis-py client (its pool's host, port and database; never its
            password).

    Returns:
        The masked URL, ``redis://host:port/db`` or ``unix://path`` of a client, or the
        client's type name when it names no single server (a cluster client).
    """
    if isinstance(source, str):
        return mask(source)
    pool = getattr(source, "connection_pool", None)
    kwargs: dict[str, Any] = getattr(pool, "connection_kwargs", None) or {}
    if "path" in kwargs:
        return f"unix://{kwargs['path']}"
    if "host" in kwargs:
        return f"redis://{kwargs['host']}:{kwargs.get('port', 6379)}/{kwargs.get('db', 0)}"
    return type(source).__name__
