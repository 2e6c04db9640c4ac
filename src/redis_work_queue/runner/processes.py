"""The process pool: each slot a worker process, watched by its parent.

Each child runs the thread runner with one slot (no heartbeats, no cleans: those are its
parent's) and tells its parent, by typed messages on a pipe of its own, each job it starts and
ends (:class:`JobStarted`, :class:`JobEnded`), its last counts (:class:`Counts`) or the fatal
error it stopped on (:class:`Fatal`). The parent holds the children's jobs as its own: it times
them out (killing and replacing the child), flushes their durations with its heartbeats and adds
up their counts. SIGTERM stops a child; :data:`CHILD_ABORT` aborts it; SIGINT is ignored (a
Ctrl-C reaches the whole process group, and the parent forwards it).
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import WorkerFailedError
from ..flow import RateLimit
from ..item import Item
from ..keyprefix import KeyPrefix
from ..ops.events import EVENTS_MAXLEN
from ..queue_base import QueueBase
from .core import Core, Job, WorkerStats

logger = logging.getLogger("redis_work_queue.worker")

#: What a worker process's parent sends it for a second stop signal (the first is SIGTERM).
CHILD_ABORT = signal.SIGUSR1
#: How long the parent waits for a child's last messages once it has ended.
LAST_WORDS_SECS = 2.0


# Messages from a child to its parent ------------------------------------------------------------


@dataclass(frozen=True)
class JobStarted:
    """A child's handler starts on an item (the parent holds the job, to time it out)."""

    slot: int
    pid: int
    queue: int
    item_id: str
    lease_token: str | None
    deliveries: int


@dataclass(frozen=True)
class JobEnded:
    """A child wrote a job's outcome: its durations since the last message, its counts so far."""

    slot: int
    pid: int
    durations: dict[str, dict[str, int]]
    counts: WorkerStats


@dataclass(frozen=True)
class JobCancelled:
    """A child's renewal found its job's item cancelled: the parent stops it (kills the child)."""

    slot: int
    pid: int


@dataclass(frozen=True)
class Counts:
    """A child's last counts, as it stops."""

    slot: int
    pid: int
    counts: WorkerStats


@dataclass(frozen=True)
class Fatal:
    """A child stopped on an error that reconnecting cannot cure: the whole worker stops."""

    slot: int
    pid: int
    message: str
    counts: WorkerStats


Message = JobStarted | JobEnded | JobCancelled | Counts | Fatal


#: What a child needs to rebuild one queue (see :attr:`ChildConfig.queues`).
QueueConfig = tuple[
    str, int | None, float | None, int, tuple[int, ...], int | None, int | None, RateLimit | None
]


@dataclass(frozen=True)
class ChildConfig:
    """What a child needs to run its worker (sent to it pickled: the handler by name)."""

    redis_url: str
    #: Each queue's name, max deliveries, keep_results, shard count, earlier shard counts,
    #: group concurrency and the cap of its event stream (None: events off).
    queues: tuple[QueueConfig, ...]
    handler: Callable[[Item], Any]
    lease_secs: float
    backoff: float
    max_backoff: float
    poll_secs: float
    log_level: int


# The parent -------------------------------------------------------------------------------------


@dataclass(eq=False)
class _Child:
    slot: int
    process: Any  # multiprocessing.Process (spawn context)
    events: Any  # the read end of its pipe (multiprocessing.connection.Connection)
    drained: threading.Event = field(default_factory=threading.Event)


class Pool:
    """The parent's side: start the children, read their messages, replace those that end.

    Args:
        core: The parent's core (it renews nothing: each child renews its own leases).
        config: The children's configuration.
        concurrency: How many children run at once.
    """

    def __init__(self, core: Core, config: ChildConfig, concurrency: int) -> None:
        self.core = core
        self.config = config
        self.concurrency = concurrency
        self.context = multiprocessing.get_context("spawn")
        self._lock = threading.Lock()
        self._children: dict[int, _Child] = {}  # by slot: the current child
        self._reading: dict[Any, _Child] = {}  # by pipe: children whose pipe is open
        self._counts: dict[int, WorkerStats] = {}  # by pid
        self._handled: set[int] = set()  # pids whose end is handled (killed or replaced)
        self.reader = threading.Thread(target=self._read, name="rwq-events", daemon=True)
        core.extra_stats = self.counts

    def start(self) -> None:
        """Start a child per slot, and the thread that reads their messages."""
        for slot in range(self.concurrency):
            self._start(slot)
        self.reader.start()

    def _start(self, slot: int) -> None:
        # One pipe per child, no shared queue: a child killed mid-message spoils only its own.
        reader, writer = self.context.Pipe(duplex=False)
        process = self.context.Process(
            target=child_main, args=(self.config, slot, writer), name=f"rwq-{slot}"
        )
        process.start()
        writer.close()
        child = _Child(slot, process, reader)
        with self._lock:
            self._children[slot] = child
            self._reading[reader] = child

    def replace(self, job: Job) -> None:
        """The watchdog's :class:`~.actions.Replace`: kill the child of a timed-out job, restart."""
        with self._lock:
            child = self._children.get(job.slot)
        if child is not None and child.process.pid is not None:
            self._handled.add(child.process.pid)
            child.process.kill()
            child.process.join(timeout=5)
        self.core.held.settled(job)
        if not self.core.stop_flag.is_set():
            self._start(job.slot)

    def counts(self) -> WorkerStats:
        """What every child has reported, added up."""
        total = WorkerStats()
        with self._lock:
            for stats in self._counts.values():
                total.add(stats)
        return total

    # Messages -----------------------------------------------------------------------------------

    def _read(self) -> None:
        while not self.core.finished.is_set() or self._reading:
            with self._lock:
                pipes = list(self._reading)
            if not pipes:
                time.sleep(0.05)
                continue
            for ready in multiprocessing.connection.wait(pipes, timeout=0.1):
                with self._lock:
                    child = self._reading[ready]
                try:
                    self._on_message(child, child.events.recv())
                except (EOFError, OSError) as err:  # the child ended (or was killed)
                    if not isinstance(err, EOFError):
                        logger.warning("lost a message from a worker process: %s", err)
                    with self._lock:
                        self._reading.pop(ready, None)
                    child.events.close()
                    child.drained.set()

    def _on_message(self, child: _Child, message: Message) -> None:
        core = self.core
        if isinstance(message, JobEnded | Counts | Fatal):
            with self._lock:
                self._counts[message.pid] = message.counts
        with self._lock:
            current = self._children.get(child.slot) is child
        if isinstance(message, JobStarted) and current:
            item = Item.handed_out(message.item_id, b"", message.deliveries, message.lease_token)
            queue = core.queues[message.queue]
            core.held.hold(Job.begin(child.slot, queue, item, core.options.timeout))
        elif isinstance(message, JobEnded):
            for prefix, deltas in message.durations.items():
                core.durations.add(prefix, deltas)
            job = core.held.current(child.slot)
            if current and job is not None:
                core.held.finish(job)
                core.held.drop(job)
        elif isinstance(message, JobCancelled):
            job = core.held.current(child.slot)
            if current and job is not None and core.held.cancel_later(job):
                core.count(cancelled=1)
        elif isinstance(message, Fatal):
            core.fail(WorkerFailedError(message.message))

    # Watching -----------------------------------------------------------------------------------

    def watch(self) -> None:
        """Until every child has ended: forward stops and aborts, replace children that end."""
        core = self.core
        forwarded = 0
        while True:
            with self._lock:
                current = dict(self._children)
            if not any(c.process.is_alive() for c in current.values()):
                break
            wanted = 2 if core.abort_flag.is_set() else 1 if core.stop_flag.is_set() else 0
            while forwarded < wanted:
                forwarded += 1
                # Two different signals: two SIGTERMs sent at once may arrive as one.
                sig = signal.SIGTERM if forwarded == 1 else CHILD_ABORT
                for child in current.values():
                    if child.process.pid is not None and child.process.is_alive():
                        os.kill(child.process.pid, sig)
            for slot, child in current.items():
                child.process.join(timeout=0.05)
                process = child.process
                if process.is_alive() or process.pid in self._handled:
                    continue
                if core.stop_flag.is_set() and process.exitcode == 0:
                    continue  # stopped as told
                with self._lock:
                    still = self._children.get(slot) is child
                if still:
                    self._ended(child)
        # Let the last messages (final counts) arrive.
        deadline = time.monotonic() + LAST_WORDS_SECS
        with self._lock:
            pids = {c.process.pid for c in self._children.values()}
        while time.monotonic() < deadline and not pids <= set(self._counts):
            time.sleep(0.02)

    def _ended(self, child: _Child) -> None:
        """A child ended unbidden: its job (if any) fails, and another child takes its slot.

        A child that ends with exit code 1 holding no job stopped on a fatal error (its message
        says which) or could not start: the worker stops, rather than start it again and again.
        """
        core = self.core
        process = child.process
        child.drained.wait(LAST_WORDS_SECS)  # its last messages are read
        if core.fatal is not None:
            return  # it reported a fatal error: the worker stops
        job = core.held.current(child.slot)
        if job is None and process.exitcode == 1:
            core.fail(WorkerFailedError("a worker process failed (exit code 1)"))
            return
        self._handled.add(process.pid)
        ending = _ending(process.exitcode)
        if job is not None:  # failed by the watchdog: released with this reason
            reason = f"crash: the worker process running the handler ended unexpectedly ({ending})"
            core.held.end(job, reason)
        if core.stop_flag.is_set():
            logger.warning("worker process %s ended unexpectedly (%s)", process.pid, ending)
            return
        logger.warning(
            "worker process %s ended unexpectedly (%s): starting another", process.pid, ending
        )
        self._start(child.slot)


def _ending(exitcode: int | None) -> str:
    """How a process ended: ``exit code 7``, ``killed by SIGKILL``."""
    if exitcode is not None and exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


# The child --------------------------------------------------------------------------------------


class _Reporter:
    """A child's listener: tells the parent each job it starts and ends."""

    def __init__(self, events: Any, slot: int, queues: list[QueueBase]) -> None:
        self.events = events
        self.slot = slot
        self.pid = os.getpid()
        self.queues = queues

    def started(self, core: Core, job: Job) -> None:
        index = next(i for i, queue in enumerate(self.queues) if queue is job.queue)
        item = job.item
        self.events.send(
            JobStarted(self.slot, self.pid, index, item.id(), item.lease_token, item.deliveries)
        )

    def ended(self, core: Core, job: Job) -> None:
        self.events.send(JobEnded(self.slot, self.pid, core.durations.take_all(), core.totals()))

    def cancelled(self, core: Core, job: Job) -> None:
        self.events.send(JobCancelled(self.slot, self.pid))


def child_main(config: ChildConfig, slot: int, events: Any) -> None:
    """Entry point of a worker process: one thread of work, driven by its parent's signals.

    ``events`` is the write end of the pipe to the parent (a ``Connection``).
    """
    # The thread runner and the synchronous queue: imported here, as the package's asyncio
    # side imports this module's package and must not load them.
    from ..worker import Worker  # noqa: PLC0415
    from ..workqueue import WorkQueue  # noqa: PLC0415

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(
        level=config.log_level,
        format="%(asctime)s %(levelname)s %(processName)s %(name)s: %(message)s",
    )
    pid = os.getpid()
    queues = [
        WorkQueue(
            KeyPrefix(name),
            limit,
            keep_results=keep,
            shards=shards,
            shards_before=before,
            group_concurrency=groups_cap,
            events=cap is not None,
            events_maxlen=cap or EVENTS_MAXLEN,
            group_rate_limit=groups_rate,
        )
        for name, limit, keep, shards, before, groups_cap, cap, groups_rate in config.queues
    ]
    worker = Worker(
        config.redis_url,
        queues,
        config.handler,
        lease_secs=config.lease_secs,
        backoff=config.backoff,
        max_backoff=config.max_backoff,
        poll_secs=config.poll_secs,
        clean_secs=None,
        heartbeat_secs=None,
        schedule_secs=None,
        batch=False,  # the parent knows one job per child: no items leased ahead
    )
    worker._listener = _Reporter(events, slot, list(queues))
    signal.signal(CHILD_ABORT, lambda signum, frame: worker.abort())
    try:
        stats = worker.run(signals=(signal.SIGTERM,))
    except WorkerFailedError as err:
        counts = worker._core.totals() if worker._core is not None else WorkerStats()
        events.send(Fatal(slot, pid, str(err), counts))
        events.close()
        raise SystemExit(1) from err
    events.send(Counts(slot, pid, stats))
    events.close()
