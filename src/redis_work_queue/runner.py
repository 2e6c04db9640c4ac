"""The worker runtime's core, shared by the thread, process and asyncio runners.

Everything a worker decides lives here, written once: option checks, the job loop (lease, call
the handler, complete or release), reconnecting with capped exponential backoff, the lease
renewer and job timeouts (the watchdog), heartbeats, the fleet's light clean and the health
file (housekeeping), counts, failure records and retry delays.

The loops are generators of :class:`Action` objects, in the manner of :mod:`.calls`: a
driver (:func:`drive` for threads, :func:`adrive` for asyncio) performs each action and sends
its result back, or throws its exception in. The runners in :mod:`.worker` and
:mod:`.aioworker` only start drivers and own threads, processes or tasks.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import os
import random
import socket
import threading
import time
import traceback
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, NamedTuple

from redis.exceptions import (
    AskError,
    AuthenticationError,
    AuthorizationError,
    ClusterDownError,
    ClusterError,
    NoPermissionError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from . import health, transport
from .calls import Steps
from .durations import DurationRecorder
from .errors import (
    CrossSlotError,
    InvalidArgumentError,
    ReplicationError,
    ScriptError,
    WrongKeyTypeError,
)
from .item import Item
from .ops import health as health_ops
from .results import Released
from .validation import MAX_SECS

logger = logging.getLogger("redis_work_queue.worker")

#: The first and the longest wait between two tries while Redis is unavailable.
RECONNECT_FIRST_SECS = 0.1
RECONNECT_MAX_SECS = 10.0
#: The most bytes of a failure reason kept with an item and its dead letter.
REASON_MAX_BYTES = 4096
#: The most bytes of the exception's message in a failure reason.
MESSAGE_MAX_BYTES = 1024
#: A registration lapses after this many missed heartbeats.
LAPSE_BEATS = 3
#: The longest pause between two looks of the watchdog (timeouts, renewals).
WATCH_TICK_SECS = 0.2
#: How long the runner waits for its watchdog and housekeeping to end after the job loops.
JOIN_SECS = 10.0


def socket_timeout_for(poll_secs: float) -> float:
    """The socket timeout of the runners' own clients: a hung server is noticed in it."""
    return max(5.0, 2 * poll_secs + 2)


CleanSecs = float | None | Literal["auto"]


@dataclass
class WorkerStats:
    """What a worker did.

    Attributes:
        completed: Items whose handler returned and that this worker completed (including a
            completion retried after its reply was lost, that found the item already done).
        failed: Items whose handler raised or ran past its timeout (released for a retry, or
            buried in the dead letters).
        lost: Items whose handler returned but that someone else had completed, or whose lease
            could not be renewed.
        timed_out: Of the failed items, those whose handler ran past its timeout.
    """

    completed: int = 0
    failed: int = 0
    lost: int = 0
    timed_out: int = 0

    def add(self, other: WorkerStats) -> None:
        """Add another worker's counts to these."""
        self.completed += other.completed
        self.failed += other.failed
        self.lost += other.lost
        self.timed_out += other.timed_out


def backoff_delay(backoff: float, max_backoff: float, deliveries: int) -> float:
    """Exponential backoff: ``backoff`` doubled per delivery after the first, capped, +0-10%."""
    delay = min(backoff * 2 ** min(max(deliveries - 1, 0), 64), max_backoff)
    return delay * (1 + random.random() / 10) if delay else 0.0


def reconnect_delay(attempt: int) -> float:
    """The wait before try ``attempt + 1`` while Redis is unavailable: capped, with jitter."""
    delay = min(RECONNECT_FIRST_SECS * 2.0 ** min(attempt, 32), RECONNECT_MAX_SECS)
    return float(delay * random.uniform(0.5, 1.0))


# Errors ---------------------------------------------------------------------------------------

#: Errors that no reconnect cures: bad credentials or rights, bad state, bad arguments.
_FATAL: tuple[type[BaseException], ...] = (
    AuthenticationError,
    AuthorizationError,
    NoPermissionError,
    WrongKeyTypeError,
    InvalidArgumentError,
    CrossSlotError,
)
#: Errors of an unavailable or changing server: wait and try again.
_TRANSIENT: tuple[type[BaseException], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    ReadOnlyError,
    TryAgainError,
    ClusterDownError,
    ClusterError,
    SlotNotCoveredError,
    AskError,
    OutOfMemoryError,
    ReplicationError,
)
#: Server replies of the same kind, as found in the message of a script's error.
_TRANSIENT_REPLIES = (
    "LOADING",
    "READONLY",
    "OOM command not allowed",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "MASTERDOWN",
    "BUSY ",
    "NOREPLICAS",
    "MOVED ",
    "ASK ",
)


def transient(err: BaseException) -> bool:
    """Whether ``err`` is cured by waiting and reconnecting (else the worker stops).

    Connection loss, timeouts, a server loading its data, a read-only replica after a failover,
    Redis Cluster redirections and outages, out of memory, and writes that too few replicas
    acknowledged are transient. Authentication and permission failures, keys of the wrong
    type, other script errors and bad arguments are not.
    """
    seen: set[int] = set()
    cause: BaseException | None = err
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, _FATAL):
            return False
        if isinstance(cause, _TRANSIENT):
            return True
        if isinstance(cause, ResponseError | ScriptError):
            message = str(cause)
            if any(reply in message for reply in _TRANSIENT_REPLIES):
                return True
        cause = cause.__cause__
    return False


def _clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes (from the end)."""
    raw = text.encode("utf-8", "surrogateescape")
    if len(raw) <= limit:
        return text
    return raw[: max(limit - 3, 0)].decode("utf-8", "ignore") + "..."


def failure_reason(err: BaseException, limit: int = REASON_MAX_BYTES) -> str:
    """The failure reason kept with an item: type, message, then a bounded traceback.

    The first line is ``Type: message`` (the message cut to ``MESSAGE_MAX_BYTES``); the
    traceback of the handler's frames follows, ending with the exception line. When the whole
    does not fit in ``limit`` bytes, the outermost frames are cut (replaced by a line ``  ...``)
    so that the innermost frames, where the error was raised, are kept.
    """
    head = _clip(f"{type(err).__name__}: {err}", MESSAGE_MAX_BYTES)
    tb = err.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next  # the runner's own frames say nothing about the failure
    if tb is None:
        return head
    found = traceback.TracebackException(type(err), err, tb)
    last = _clip("".join(found.format_exception_only()).rstrip("\n"), MESSAGE_MAX_BYTES)
    first = "Traceback (most recent call last):\n"
    frames = list(found.stack.format())
    whole = head + "\n" + first + "".join(frames) + last
    if len(whole.encode("utf-8", "surrogateescape")) <= limit:
        return whole
    marker = "  ...\n"
    fixed = head + "\n" + first + marker + last
    budget = limit - len(fixed.encode("utf-8", "surrogateescape"))
    kept: list[str] = []
    for frame in reversed(frames):
        size = len(frame.encode("utf-8", "surrogateescape"))
        if size > budget:
            break
        kept.append(frame)
        budget -= size
    kept.reverse()
    return head + "\n" + first + marker + "".join(kept) + last


# Options ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    """A worker's checked options (see :class:`redis_work_queue.worker.Worker`)."""

    lease_secs: float
    concurrency: int
    backoff: float
    max_backoff: float
    poll_secs: float
    timeout: float | None = None
    clean_secs: float | None = None
    heartbeat_secs: float | None = None
    health_file: str | None = None


def _seconds(name: str, value: object, example: str, *, zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgumentError(
            f"{name} must be a number of seconds, not {type(value).__name__}: pass e.g. "
            f"{name}={example}"
        )
    low_ok = value >= 0 if zero else value > 0
    if not math.isfinite(value) or not low_ok or value > MAX_SECS:
        kind = "zero or more" if zero else "more than zero"
        raise InvalidArgumentError(
            f"{name} must be a finite number of seconds, {kind} and at most {MAX_SECS}, got "
            f"{value!r}: pass e.g. {name}={example}"
        )
    return float(value)


def check_options(
    queues: Sequence[object],
    kind: type,
    handler: object,
    concurrency: int,
    lease_secs: float,
    poll_secs: float,
    backoff: float,
    max_backoff: float,
    timeout: float | None = None,
    clean_secs: CleanSecs = None,
    heartbeat_secs: float | None = None,
    health_file: str | os.PathLike[str] | None = None,
) -> Options:
    """Validate the options every worker runner takes, before anything starts.

    ``clean_secs="auto"`` stands for the lease time (at least one second).

    Returns:
        The options, as floats.

    Raises:
        InvalidArgumentError: One is out of range; the message names it and the fix.
    """
    if not queues or not all(isinstance(q, kind) for q in queues):
        raise InvalidArgumentError(f"a worker needs one or more {kind.__name__}")
    if not callable(handler):
        raise InvalidArgumentError("the handler must be callable")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise InvalidArgumentError(
            f"concurrency must be a positive int, got {concurrency!r}: pass e.g. concurrency=4"
        )
    if concurrency > 10_000:
        raise InvalidArgumentError(
            f"concurrency must be at most 10000, got {concurrency}: run more workers instead"
        )
    lease = _seconds("lease_secs", lease_secs, "30")
    if lease < 0.01:
        raise InvalidArgumentError(
            f"lease_secs must be at least 0.01, got {lease_secs!r}: pass e.g. lease_secs=30"
        )
    poll = _seconds("poll_secs", poll_secs, "1")
    if poll > 3600:
        raise InvalidArgumentError(
            f"poll_secs must be at most 3600, got {poll_secs!r}: pass e.g. poll_secs=1"
        )
    first = _seconds("backoff", backoff, "1", zero=True)
    longest = _seconds("max_backoff", max_backoff, "300", zero=True)
    if longest < first:
        raise InvalidArgumentError(
            f"max_backoff ({max_backoff!r}) must be at least backoff ({backoff!r}): raise "
            "max_backoff or lower backoff"
        )
    limit = None if timeout is None else _seconds("timeout", timeout, "600")
    if clean_secs == "auto":
        clean: float | None = max(lease, 1.0)
    elif clean_secs is None:
        clean = None
    else:
        clean = _seconds("clean_secs", clean_secs, "30")
        if clean < 0.01:
            raise InvalidArgumentError(
                f"clean_secs must be at least 0.01, got {clean_secs!r}: pass e.g. clean_secs=30"
            )
    beat = None if heartbeat_secs is None else _seconds("heartbeat_secs", heartbeat_secs, "5")
    if beat is not None and beat < 0.01:
        raise InvalidArgumentError(
            f"heartbeat_secs must be at least 0.01, got {heartbeat_secs!r}: pass e.g. "
            "heartbeat_secs=5"
        )
    path: str | None = None
    if health_file is not None:
        if not isinstance(health_file, str | os.PathLike):
            raise InvalidArgumentError(
                f"health_file must be a path, not {type(health_file).__name__}"
            )
        path = os.fspath(health_file)
        if beat is None:
            raise InvalidArgumentError(
                "health_file needs heartbeats: pass heartbeat_secs (e.g. 5) with it"
            )
        if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise InvalidArgumentError(
                f"health_file {path!r} is in a directory that does not exist: create it first"
            )
    return Options(lease, concurrency, first, longest, poll, limit, clean, beat, path)


def check_pool(db: object, concurrency: int) -> None:
    """Check that a client given to a worker has connections enough for its concurrency.

    Every slot may hold a connection at once (a blocking lease), besides the watchdog and
    housekeeping.

    Raises:
        InvalidArgumentError: The client's pool is smaller than ``concurrency + 4``.
    """
    pool = getattr(db, "connection_pool", None)
    size = getattr(pool, "max_connections", None)
    needed = concurrency + 4
    if isinstance(size, int) and size < needed:
        raise InvalidArgumentError(
            f"the client's connection pool holds at most {size} connections; a worker with "
            f"concurrency={concurrency} needs {needed}: make the client with "
            f"max_connections={needed} (or pass a URL)"
        )


# Outages ----------------------------------------------------------------------------------------


class Outage:
    """Whether Redis is unavailable to this worker; logs once when it starts and once when it ends.

    Shared by every loop of a worker, so an outage is one WARNING and one INFO, however many
    threads or tasks retry through it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.since: float | None = None
        self.errors = 0

    @property
    def active(self) -> bool:
        """True from the first failed call until a call succeeds."""
        return self.since is not None

    def failed(self, err: BaseException) -> None:
        """Note a failed call (logs a WARNING if this starts an outage)."""
        with self._lock:
            starting = self.since is None
            if starting:
                self.since = time.monotonic()
                self.errors = 0
            self.errors += 1
        if starting:
            logger.warning(
                "Redis is unavailable (%s: %s): retrying with backoff up to %.0f s",
                type(err).__name__,
                err,
                RECONNECT_MAX_SECS,
            )

    def recovered(self, begun: float) -> None:
        """Note a successful call sent at ``begun`` (logs an INFO if this ends an outage).

        A call sent before the outage began (its reply came just before the connection went)
        says nothing about its end, and leaves it on.
        """
        if self.since is None:
            return
        with self._lock:
            if self.since is None or begun < self.since:
                return
            since, errors, self.since = self.since, self.errors, None
        if since is not None:
            logger.info(
                "Redis is back after %.1f s (%d failed calls): working again",
                time.monotonic() - since,
                errors,
            )


# Held items -------------------------------------------------------------------------------------

RUNNING, DONE, LOST, TIMED_OUT = "running", "done", "lost", "timed out"


@dataclass(eq=False)
class Job:
    """An item a worker slot holds: leased, its handler running or its outcome being written."""

    slot: int
    queue: Any
    item: Item
    started: float
    deadline: float | None
    renewed: float
    state: str = RUNNING


class Held:
    """The jobs a worker holds, by slot; what the watchdog renews and times out."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.jobs: dict[int, Job] = {}
        #: Timed-out jobs whose handler is still running (a thread cannot be killed).
        self.abandoned: set[Job] = set()

    def hold(self, job: Job) -> None:
        """Hold ``job`` in its slot: renewed, and timed out past its deadline."""
        with self._lock:
            self.jobs[job.slot] = job

    def finish(self, job: Job) -> str:
        """The handler returned: no more timeout. Returns the job's state before."""
        with self._lock:
            state = job.state
            if state == RUNNING:
                job.state = DONE
            self.abandoned.discard(job)
            return state

    def drop(self, job: Job) -> None:
        """The outcome is written (or left to the lease): stop renewing."""
        with self._lock:
            if self.jobs.get(job.slot) is job:
                del self.jobs[job.slot]

    def current(self, slot: int) -> Job | None:
        """The job held in ``slot``, if any."""
        with self._lock:
            return self.jobs.get(slot)

    def settled(self, job: Job) -> None:
        """A timed-out job's handler is gone (its task cancelled or its process killed)."""
        with self._lock:
            self.abandoned.discard(job)

    def lose(self, job: Job) -> None:
        """The lease was lost: stop renewing, and do not count a completion."""
        with self._lock:
            if job.state in (RUNNING, DONE):
                job.state = LOST
            self.drop_locked(job)

    def drop_locked(self, job: Job) -> None:
        """As :meth:`drop`, with the lock held."""
        if self.jobs.get(job.slot) is job:
            del self.jobs[job.slot]

    def due(self, now: float, every: float) -> list[Job]:
        """Jobs whose lease was last renewed ``every`` seconds ago or more."""
        with self._lock:
            return [j for j in self.jobs.values() if now - j.renewed >= every]

    def time_out(self, now: float) -> list[Job]:
        """Jobs whose handler ran past its deadline: marked, no longer renewed."""
        with self._lock:
            late = [
                j
                for j in self.jobs.values()
                if j.state == RUNNING and j.deadline is not None and now >= j.deadline
            ]
            for job in late:
                job.state = TIMED_OUT
                self.drop_locked(job)
                self.abandoned.add(job)
            return late

    def stuck(self, now: float) -> int:
        """Handlers running past their timeout: abandoned ones, and ones not yet timed out."""
        with self._lock:
            late = sum(
                1
                for j in self.jobs.values()
                if j.state == RUNNING and j.deadline is not None and now >= j.deadline
            )
            return late + len(self.abandoned)

    def take_all(self) -> list[Job]:
        """Stop holding every job and return them (to release them)."""
        with self._lock:
            jobs = list(self.jobs.values())
            self.jobs.clear()
            return jobs


# Actions ----------------------------------------------------------------------------------------


class Op(NamedTuple):
    """Call ``fn(db, *args, **kwargs)`` (a queue facade's method); awaited if it is async.

    A named tuple: one is made for every call a job makes, and a tuple is the cheapest to make.
    """

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class Run:
    """Drive one operation of :mod:`.ops` (sync or asyncio alike)."""

    steps: Steps[Any]


@dataclass(frozen=True)
class Pause:
    """Wait, ending early when told to stop (``wake``), or else when the job loops ended."""

    seconds: float
    wake: bool = True


@dataclass(frozen=True)
class Handle:
    """Call the handler with the item; its exception is thrown back in."""

    item: Item


@dataclass(frozen=True)
class Replace:
    """A slot's handler timed out: end it if the runner can, and start a new one in its slot."""

    job: Job


@dataclass(frozen=True, slots=True)
class Looked:
    """What a completion leased with it: (queue, item), or None when the queues were empty."""

    found: tuple[Any, Item] | None


Action = Op | Run | Pause | Handle | Replace
Loop = Generator[Action, Any, Any]
Listener = Callable[[str, Job], None]


def new_worker_id() -> str:
    """A worker id: ``host:pid:random``."""
    return f"{socket.gethostname()}:{os.getpid()}:{random.getrandbits(32):08x}"


class Core:
    """One worker's shared state and its loops (see the module docstring).

    Args:
        options: The checked options.
        queues: The queues, highest priority first (``WorkQueue`` or ``AsyncWorkQueue``).
        lease_from: ``workqueue.lease_from`` or ``aio.lease_from``, to match the queues.
        complete_and_lease: ``workqueue.complete_and_lease_from`` or its asyncio twin: a job
            that succeeds is completed and the slot's next item leased in one call. None
            completes in a call of its own.
        renews: Renew held leases (a process runner's parent leaves that to its children).
        describe: How the runner ends a timed-out handler, for the log.
    """

    def __init__(
        self,
        options: Options,
        queues: Sequence[Any],
        lease_from: Callable[..., Any],
        *,
        complete_and_lease: Callable[..., Any] | None = None,
        renews: bool = True,
        describe: str = "",
    ) -> None:
        self.options = options
        self.queues = list(queues)
        self.lease_from = lease_from
        self.complete_and_lease = complete_and_lease
        self.renews = renews
        self.describe = describe
        self.stats = WorkerStats()
        #: Handler durations not yet flushed to Redis (with the next heartbeat).
        self.durations = DurationRecorder()
        self.extra_stats: Callable[[], WorkerStats] | None = None
        self.listener: Listener | None = None
        self.held = Held()
        self.outage = Outage()
        self.stop_flag = threading.Event()
        self.abort_flag = threading.Event()
        #: Set once every job loop has ended: the watchdog and housekeeping then end too.
        self.finished = threading.Event()
        self.fatal: BaseException | None = None
        self.worker_id = new_worker_id()
        self.started = time.time()
        self._lock = threading.Lock()

    # Counts and state ---------------------------------------------------------------------------

    def count(self, completed: int = 0, failed: int = 0, lost: int = 0, timed_out: int = 0) -> None:
        """Add to this worker's counts."""
        with self._lock:
            self.stats.completed += completed
            self.stats.failed += failed
            self.stats.lost += lost
            self.stats.timed_out += timed_out

    def totals(self) -> WorkerStats:
        """This worker's counts, with those its child processes reported."""
        with self._lock:
            total = WorkerStats(**vars(self.stats))
        if self.extra_stats is not None:
            total.add(self.extra_stats())
        return total

    def fail(self, err: BaseException) -> None:
        """Stop the worker on an error that reconnecting cannot cure."""
        with self._lock:
            first = self.fatal is None
            if first:
                self.fatal = err
        if first:
            # run() raises it: logged at INFO only, so that it is reported once.
            logger.info("worker stopping on a fatal error: %s: %s", type(err).__name__, err)
        self.stop_flag.set()
        self.abort_flag.set()

    def stuck(self) -> bool:
        """As many handlers are stuck past their timeout as the worker has slots."""
        if self.options.timeout is None:
            return False
        return self.held.stuck(time.monotonic()) >= self.options.concurrency

    def retry_delay(self, deliveries: int) -> float:
        """The delay before retrying an item that failed on its ``deliveries``-th delivery."""
        return backoff_delay(self.options.backoff, self.options.max_backoff, deliveries)

    def _tell(self, event: str, job: Job) -> None:
        if self.listener is not None:
            self.listener(event, job)

    def _trouble(self, err: BaseException, attempt: int) -> Loop:
        """Back off after a failed call; re-raise an error that waiting cannot cure."""
        if not transient(err):
            raise err
        self.outage.failed(err)
        yield Pause(reconnect_delay(attempt))

    @staticmethod
    def _name(job: Job) -> str:
        return f"{job.item.id()} of {job.queue.name.prefix}"

    # The job loop -------------------------------------------------------------------------------

    def job_loop(self, slot: int) -> Loop:
        """Lease, handle, complete or release, until stopped; one per slot (thread or task)."""
        attempt = 0
        # While items keep coming, the next look does not block (a blocking lease costs more
        # to make); once a look finds nothing, the next one blocks for up to poll_secs.
        wait = Op(
            self.lease_from,
            (self.queues, self.options.lease_secs),
            {"timeout": self.options.poll_secs},
        )
        look = Op(self.lease_from, (self.queues, self.options.lease_secs), {"block": False})
        busy = False
        # What the last job's completion leased with it (it then stands for the next look, and
        # is given back below if the worker is stopping).
        ahead: Looked | None = None
        while True:
            if ahead is not None:
                leased, ahead = ahead.found, None
            elif self.stop_flag.is_set():
                return
            else:
                failure: BaseException | None = None
                begun = time.monotonic()
                try:
                    leased = yield look if busy else wait
                except Exception as err:
                    failure = err
                if failure is not None:
                    yield from self._trouble(failure, attempt)
                    attempt += 1
                    continue
                attempt = 0
                self.outage.recovered(begun)
            busy = leased is not None
            if leased is None:
                continue
            queue, item = leased
            if self.stop_flag.is_set():
                yield from self._give_back(queue, item)
                return
            now = time.monotonic()
            limit = self.options.timeout
            job = Job(slot, queue, item, now, None if limit is None else now + limit, now)
            went_on = yield from self._work(job)
            if went_on is False:
                return
            if isinstance(went_on, Looked):
                ahead = went_on

    def _give_back(self, queue: Any, item: Item) -> Loop:
        """Leased as the stop came: give it back uncounted, at the front of the line."""
        try:
            yield Op(
                queue.release_outcome,
                (item,),
                {"reason": "worker stopping", "undo": True},
            )
        except Exception as err:
            if not transient(err):
                raise
            logger.warning(
                "could not give back %s of %s on stopping (%s): left to its lease",
                item.id(),
                queue.name.prefix,
                err,
            )

    def _work(self, job: Job) -> Generator[Action, Any, bool | Looked]:
        """Run the handler on a held job and write its outcome.

        Returns:
            False to end the slot's loop; what the completion leased with it, if it did; else
            True.
        """
        self.held.hold(job)
        self._tell("start", job)
        error: Exception | None = None
        begun = time.monotonic()
        try:
            yield Handle(job.item)
        except Exception as err:
            error = err
        took = time.monotonic() - begun
        state = self.held.finish(job)
        if state != TIMED_OUT:
            outcome = "completed" if error is None else "failed"
            self.durations.observe(job.queue.name.prefix, took, outcome)
        if state == TIMED_OUT:
            logger.warning(
                "%s returned after its timeout: its result is discarded", self._name(job)
            )
            return False
        went_on: bool | Looked = True
        try:
            if self.abort_flag.is_set():
                return False
            if error is not None:
                self.count(failed=1)
                if state == LOST:
                    logger.warning(
                        "%s failed after losing its lease (not released): %s: %s",
                        self._name(job),
                        type(error).__name__,
                        error,
                    )
                else:
                    yield from self.settle_failure(job, failure_reason(error), error)
            else:
                went_on = yield from self._settle_success(job, lost=state == LOST)
        finally:
            self.held.drop(job)
            self._tell("end", job)
        return went_on

    def _settle_success(self, job: Job, lost: bool) -> Generator[Action, Any, bool | Looked]:
        """Complete the item; a lost reply is retried after reconnecting.

        Unless the worker is stopping, the slot's next item is leased in the same call (see
        ``complete_and_lease_from``); the lease of a call whose reply was lost is left to run out.

        Returns:
            What was leased with the completion, or True when nothing was looked at.
        """
        retried = False
        attempt = 0
        went_on: bool | Looked = True
        while True:
            failure: BaseException | None = None
            begun = time.monotonic()
            try:
                if self.complete_and_lease is None or self.stop_flag.is_set():
                    done = yield Op(job.queue.complete, (job.item,))
                else:
                    args = (job.queue, job.item, self.queues, self.options.lease_secs)
                    done, found = yield Op(self.complete_and_lease, args)
                    went_on = Looked(found)
            except Exception as err:
                failure = err
            if failure is None:
                break
            if transient(failure) and self.abort_flag.is_set():
                logger.warning(
                    "could not complete %s (%s): aborted, left to its lease",
                    self._name(job),
                    failure,
                )
                self.count(lost=1)
                return True
            retried = True
            yield from self._trouble(failure, attempt)
            attempt += 1
        self.outage.recovered(begun)
        if done and not lost:
            self.count(completed=1)
            if retried:
                logger.info("completed %s after reconnecting", self._name(job))
            elif logger.isEnabledFor(logging.DEBUG):
                logger.debug("completed %s", self._name(job))
        elif retried and not done and not lost:
            # The first try ran before its reply was lost: the item is done.
            self.count(completed=1)
            logger.info(
                "completed %s: the retried completion found it done (the first try's reply "
                "was lost)",
                self._name(job),
            )
        else:
            self.count(lost=1)
            logger.warning("%s was completed elsewhere", self._name(job))
        return went_on

    def settle_failure(self, job: Job, reason: str, error: BaseException | None) -> Loop:
        """Release a failed item with its reason; log where it went (retry or dead letters).

        A release whose reply was lost is retried while the lease lasts; after that the lease
        hands the item out again (or a clean buries it).
        """
        item = job.item
        delay = self.retry_delay(item.deliveries)
        retried = False
        attempt = 0
        while True:
            failure: BaseException | None = None
            begun = time.monotonic()
            try:
                outcome = yield Op(
                    job.queue.release_outcome, (item,), {"delay": delay, "reason": reason}
                )
            except Exception as err:
                failure = err
            if failure is None:
                break
            left = job.renewed + self.options.lease_secs - time.monotonic()
            if transient(failure) and (self.abort_flag.is_set() or left <= 0):
                logger.warning(
                    "could not release %s (%s): left to its lease, which hands it out again",
                    self._name(job),
                    failure,
                )
                return
            retried = True
            yield from self._trouble(failure, attempt)
            attempt += 1
        self.outage.recovered(begun)
        summary = reason.partition("\n")[0]
        exc_info = (type(error), error, error.__traceback__) if error is not None else None
        if outcome == Released.BURIED:
            logger.warning(
                "%s failed on its last allowed delivery (%d): moved to the dead letters: %s",
                self._name(job),
                item.deliveries,
                summary,
                exc_info=exc_info,
            )
        elif outcome == Released.REQUEUED:
            logger.warning(
                "%s failed (delivery %d), retry in %.1fs: %s",
                self._name(job),
                item.deliveries,
                delay,
                summary,
                exc_info=exc_info,
            )
        elif retried:
            logger.info(
                "%s failed and was released (the retried release found the first try had run): %s",
                self._name(job),
                summary,
            )
        else:
            logger.warning(
                "%s failed but its lease was lost, so it was not released: %s",
                self._name(job),
                summary,
            )

    def release_all(self, reason: str) -> Loop:
        """Give back every held item (an abort), one try each."""
        for job in self.held.take_all():
            try:
                yield Op(job.queue.release, (job.item,), {"reason": reason})
                logger.info("released %s", self._name(job))
            except Exception as err:
                logger.warning("could not release %s (left to its lease): %s", self._name(job), err)

    # The watchdog -------------------------------------------------------------------------------

    def watchdog(self) -> Loop:
        """Renew held leases every third of the lease time; time out handlers past ``timeout``."""
        every = self.options.lease_secs / 3
        tick = min(every, WATCH_TICK_SECS)
        while not self.finished.is_set():
            yield Pause(tick, wake=False)
            if self.abort_flag.is_set():  # held items are being released
                continue
            if self.options.timeout is not None:
                for job in self.held.time_out(time.monotonic()):
                    yield from self._time_out(job)
            if not self.renews:
                continue
            for job in self.held.due(time.monotonic(), every):
                yield from self._renew(job)

    def _renew(self, job: Job) -> Loop:
        asked = time.monotonic()
        begun = time.monotonic()
        try:
            held = yield Op(job.queue.renew, (job.item, self.options.lease_secs))
        except Exception as err:
            if not transient(err):
                raise
            self.outage.failed(err)
            return
        self.outage.recovered(begun)
        if held:
            job.renewed = asked
        else:
            logger.warning("lost the lease on %s", self._name(job))
            self.held.lose(job)

    def _time_out(self, job: Job) -> Loop:
        assert self.options.timeout is not None
        logger.warning(
            "%s ran past its timeout of %g s: released as a failure%s",
            self._name(job),
            self.options.timeout,
            self.describe,
        )
        yield Replace(job)
        self.count(failed=1, timed_out=1)
        self.durations.observe(job.queue.name.prefix, time.monotonic() - job.started, "failed")
        reason = f"timeout: the handler ran longer than {self.options.timeout:g} s"
        yield from self.settle_failure(job, reason, None)

    # Housekeeping -------------------------------------------------------------------------------

    def housekeeping(self) -> Loop:
        """Heartbeats, the fleet's light clean and the health file, until the worker ends."""
        beat = self.options.heartbeat_secs
        clean = self.options.clean_secs
        ticks = [t for t in (beat, None if clean is None else clean / 2) if t is not None]
        if not ticks:
            return
        tick = min(ticks)
        ttl_ms = 0 if beat is None else max(round(beat * LAPSE_BEATS * 1000), 1)
        while not self.finished.is_set():
            healthy = True
            if beat is not None:
                healthy = yield from self._beat(ttl_ms)
            if clean is not None and not self.stop_flag.is_set():
                healthy = (yield from self._clean(round(clean * 1000))) and healthy
            if self.options.health_file and healthy and not self.outage.active and not self.stuck():
                try:
                    health.touch(self.options.health_file)
                except OSError as err:
                    logger.warning("cannot touch the health file: %s", err)
            yield Pause(tick, wake=False)
        if beat is not None:
            for queue in self.queues:
                prefix = queue.name.prefix
                deltas = self.durations.take(prefix)
                try:
                    yield Run(health_ops.heartbeat_steps(queue.keys, self.worker_id, 0, {}, deltas))
                except Exception as err:
                    logger.info(
                        "could not remove the registration (it lapses), nor flush the job "
                        "durations of %s (lost): %s",
                        prefix,
                        err,
                    )

    def _fields(self) -> dict[str, str | int | float]:
        stats = self.totals()
        return {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "queues": "\n".join(q.name.prefix for q in self.queues),
            "started": round(self.started, 3),
            "completed": stats.completed,
            "failed": stats.failed,
            "lost": stats.lost,
        }

    def _beat(self, ttl_ms: int) -> Generator[Action, Any, bool]:
        fields = self._fields()
        for queue in self.queues:
            prefix = queue.name.prefix
            deltas = self.durations.take(prefix)
            try:
                yield Run(
                    health_ops.heartbeat_steps(queue.keys, self.worker_id, ttl_ms, fields, deltas)
                )
            except Exception as err:
                self.durations.add(prefix, deltas)  # flushed with a later beat
                if not transient(err):
                    raise
                self.outage.failed(err)
                return False
        return True

    def _clean(self, interval_ms: int) -> Generator[Action, Any, bool]:
        for queue in self.queues:
            try:
                mine = yield Run(
                    health_ops.clean_gate_steps(queue.keys, self.worker_id, interval_ms)
                )
                if mine:
                    yield Op(queue.light_clean)  # which logs what it did
            except Exception as err:
                if not transient(err):
                    raise
                self.outage.failed(err)
                return False
        return True


# Drivers ----------------------------------------------------------------------------------------


def drive(
    core: Core,
    loop: Loop,
    db: Any,
    handler: Callable[[Item], Any],
    replace: Callable[[Job], None],
) -> None:
    """Run one of ``core``'s loops in this thread on a synchronous client.

    An exception that escapes the loop stops the worker (:meth:`Core.fail`).
    """
    try:
        action = next(loop)
        while True:
            try:
                if isinstance(action, Op):
                    reply = action.fn(db, *action.args, **action.kwargs)
                elif isinstance(action, Run):
                    reply = transport.run(db, action.steps)
                elif isinstance(action, Pause):
                    (core.stop_flag if action.wake else core.finished).wait(action.seconds)
                    reply = None
                elif isinstance(action, Handle):
                    reply = handler(action.item)
                else:
                    replace(action.job)
                    reply = None
            except Exception as err:
                action = loop.throw(err)
                continue
            action = loop.send(reply)
    except StopIteration:
        return
    except Exception as err:
        core.fail(err)
    finally:
        loop.close()


async def adrive(
    core: Core,
    loop: Loop,
    db: Any,
    handler: Callable[[Item], Any],
    replace: Callable[[Job], None],
) -> None:
    """Run one of ``core``'s loops as an asyncio task on a ``redis.asyncio`` client."""
    try:
        action = next(loop)
        while True:
            try:
                if isinstance(action, Op):
                    reply = action.fn(db, *action.args, **action.kwargs)
                    if inspect.isawaitable(reply):
                        reply = await reply
                elif isinstance(action, Run):
                    reply = await transport.arun(db, action.steps)
                elif isinstance(action, Pause):
                    end = time.monotonic() + action.seconds
                    while (left := end - time.monotonic()) > 0:
                        if (core.stop_flag if action.wake else core.finished).is_set():
                            break
                        await asyncio.sleep(min(left, 0.05))
                    reply = None
                elif isinstance(action, Handle):
                    reply = await handler(action.item)
                else:
                    replace(action.job)
                    reply = None
            except Exception as err:
                action = loop.throw(err)
                continue
            action = loop.send(reply)
    except StopIteration:
        return
    except Exception as err:
        core.fail(err)
    finally:
        loop.close()
