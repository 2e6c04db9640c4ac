"""The worker runtime's core, shared by the thread, process and asyncio runners.

A worker runs three kinds of loop, each a generator of steps (see :mod:`.actions`) that a driver
(:mod:`.drivers`) runs in a thread or an asyncio task:

- :meth:`Core.job_loop`, one per slot: lease, call the handler, complete (leasing the next item
  in the same call) or release with a backoff, until stopped;
- :meth:`Core.watchdog`: renew the leases of running handlers, time out those past ``timeout``,
  and fail the jobs of worker processes that died;
- :meth:`Core.housekeeping`: heartbeats, the fleet's light clean and the health file.

Every call to Redis goes through :func:`.retry.retrying`. The loops call the queues' operations
(``queue.ops``, :mod:`redis_work_queue.ops.lease`), never a client: the same loops run on a
synchronous client and on an asyncio one.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import random
import socket
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from .. import health
from ..calls import Steps
from ..durations import DurationRecorder
from ..item import Item
from ..ops import health as health_ops
from ..ops import lease as lease_ops
from ..ops import schedules as schedule_ops
from ..queue_base import QueueBase
from ..results import Released, Renewed
from ..validation import check_result
from .actions import Flag, Handle, Loop, Pause, Replace, Returned
from .batching import FAST_SECS, Batch
from .options import Options
from .retry import Done, GaveUp, Outage, backoff_delay, once, retrying

logger = logging.getLogger("redis_work_queue.worker")
T = TypeVar("T")

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
        cancelled: Items cancelled (``WorkQueue.cancel``) while their handler ran: the handler
            was stopped as for a timeout, and nothing was written.
    """

    completed: int = 0
    failed: int = 0
    lost: int = 0
    timed_out: int = 0
    cancelled: int = 0

    def add(self, other: WorkerStats) -> None:
        """Add another worker's counts to these."""
        self.completed += other.completed
        self.failed += other.failed
        self.lost += other.lost
        self.timed_out += other.timed_out
        self.cancelled += other.cancelled


# Failure records --------------------------------------------------------------------------------

#: The runner's own files: their frames say nothing about a handler's failure.
_RUNNER_DIR = os.path.dirname(os.path.abspath(__file__))


def _printable(text: str) -> str:
    """``text`` with what UTF-8 cannot encode (lone surrogates) written as escapes."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes (from the end)."""
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return text
    return raw[: max(limit - 3, 0)].decode("utf-8", "ignore") + "..."


def _message(err: BaseException) -> str | None:
    """The exception's text; its ``repr`` when its ``__str__`` fails; None when both do."""
    for show in (str, repr):
        try:
            return _printable(show(err))
        except Exception:  # a broken __str__ or __repr__ of the handler's exception
            continue
    return None


def failure_reason(err: BaseException, limit: int = REASON_MAX_BYTES) -> str:
    """The failure reason kept with an item: type, message, then a bounded traceback.

    The first line is ``Type: message`` (the message cut to ``MESSAGE_MAX_BYTES``; ``Type``
    alone when there is none): the exception's text, else its ``repr`` when its ``__str__``
    raises, else its type alone. The traceback of the handler's frames follows, ending with the
    exception line. When the whole does not fit in ``limit`` bytes, the outermost frames are cut
    (replaced by a line ``  ...``) so that the innermost frames, where the error was raised, are
    kept. Text UTF-8 cannot encode (a lone surrogate) is written as a backslash escape: any
    exception makes a reason that can be stored.
    """
    name = type(err).__name__
    message = _message(err)
    head = _clip(f"{name}: {message}" if message else name, MESSAGE_MAX_BYTES)
    try:
        return _with_traceback(head, err, limit)
    except Exception:  # a traceback that cannot be formatted: the first line stands alone
        return head


def _with_traceback(head: str, err: BaseException, limit: int) -> str:
    tb = err.__traceback__
    while tb is not None and os.path.dirname(tb.tb_frame.f_code.co_filename) == _RUNNER_DIR:
        tb = tb.tb_next
    if tb is None:
        return head
    found = traceback.TracebackException(type(err), err, tb)
    last = _clip(_printable("".join(found.format_exception_only()).rstrip("\n")), MESSAGE_MAX_BYTES)
    first = "Traceback (most recent call last):\n"
    frames = [_printable(frame) for frame in found.stack.format()]
    whole = head + "\n" + first + "".join(frames) + last
    if len(whole.encode("utf-8")) <= limit:
        return whole
    marker = "  ...\n"
    fixed = head + "\n" + first + marker + last
    budget = limit - len(fixed.encode("utf-8"))
    kept: list[str] = []
    for frame in reversed(frames):
        size = len(frame.encode("utf-8"))
        if size > budget:
            break
        kept.append(frame)
        budget -= size
    kept.reverse()
    return head + "\n" + first + marker + "".join(kept) + last


# Held jobs --------------------------------------------------------------------------------------

RUNNING, DONE, LOST, TIMED_OUT, ENDED = "running", "done", "lost", "timed out", "ended"
CANCELLED = "cancelled"


@dataclass(eq=False)
class Job:
    """An item a worker slot holds: leased, its handler running or its outcome being written."""

    slot: int
    queue: QueueBase
    item: Item
    started: float
    deadline: float | None
    renewed: float
    state: str = RUNNING

    @classmethod
    def begin(cls, slot: int, queue: QueueBase, item: Item, timeout: float | None) -> Job:
        """A job starting now, timed out ``timeout`` seconds from now (None: never)."""
        now = time.monotonic()
        return cls(slot, queue, item, now, None if timeout is None else now + timeout, now)


class Held:
    """The jobs a worker holds, by slot; what the watchdog renews, times out and fails."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.jobs: dict[int, Job] = {}
        #: Timed-out jobs whose handler is still running (a thread cannot be killed).
        self.abandoned: set[Job] = set()
        #: Jobs whose handler is gone without an outcome, to be failed (see :meth:`end`).
        self.ended: list[tuple[Job, str]] = []
        #: Cancelled jobs whose handler the watchdog is to stop (see :meth:`cancel_later`).
        self.to_stop: list[Job] = []

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
            self._drop(job)

    def _drop(self, job: Job) -> None:
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

    def lose(self, job: Job) -> bool:
        """A renewal found the lease gone: stop renewing it.

        Returns:
            True when the handler was still running (the lease is lost: its completion will not
            be counted); False when it had returned (its outcome is being written, or is: the
            renewal came late, and nothing is lost).
        """
        with self._lock:
            self._drop(job)
            if job.state != RUNNING:
                return False
            job.state = LOST
            return True

    def end(self, job: Job, reason: str) -> None:
        """The job's handler is gone without an outcome (its process died): fail it."""
        with self._lock:
            if job.state != RUNNING:
                return
            job.state = ENDED
            self._drop(job)
            self.ended.append((job, reason))

    def take_ended(self) -> list[tuple[Job, str]]:
        """The jobs ended without an outcome since the last call, with their reasons."""
        with self._lock:
            ended, self.ended = self.ended, []
            return ended

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
                self._drop(job)
                self.abandoned.add(job)
            return late

    def cancel(self, job: Job) -> bool:
        """The job's item was cancelled: stop renewing it; whether its handler still runs.

        A running handler's job is marked, and abandoned until its handler is stopped.
        """
        with self._lock:
            self._drop(job)
            if job.state != RUNNING:
                return False
            job.state = CANCELLED
            self.abandoned.add(job)
            return True

    def cancel_later(self, job: Job) -> bool:
        """As :meth:`cancel`; the watchdog stops the handler (see :meth:`take_to_stop`)."""
        if not self.cancel(job):
            return False
        with self._lock:
            self.to_stop.append(job)
        return True

    def take_to_stop(self) -> list[Job]:
        """The cancelled jobs whose handler is to be stopped, since the last call."""
        with self._lock:
            jobs, self.to_stop = self.to_stop, []
            return jobs

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
            jobs = [*self.jobs.values(), *(job for job, _ in self.ended)]
            self.jobs.clear()
            self.ended.clear()
            return jobs


# The core ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Looked:
    """What a completion leased with it: (queue, item), or None when the queues were empty."""

    found: tuple[QueueBase, Item] | None


class Listener(Protocol):
    """Told of each job a worker starts and ends (a worker process tells its parent)."""

    def started(self, core: Core, job: Job) -> None:
        """The handler is about to be called."""

    def ended(self, core: Core, job: Job) -> None:
        """The job's outcome is written, or left to its lease."""


def new_worker_id() -> str:
    """A worker id: ``host:pid:random``."""
    return f"{socket.gethostname()}:{os.getpid()}:{random.getrandbits(32):08x}"


class Core:
    """One worker's shared state and its loops (see the module docstring).

    Args:
        options: The checked options.
        queues: The queues, highest priority first (``WorkQueue`` or ``AsyncWorkQueue``).
        renews: Renew held leases (a process runner's parent leaves that to its children).
        describe: How the runner ends a timed-out handler, for the log.
    """

    def __init__(
        self,
        options: Options,
        queues: Sequence[QueueBase],
        *,
        renews: bool = True,
        describe: str = "",
    ) -> None:
        self.options = options
        self.queues = list(queues)
        #: The queues' operations, in the same order (what the lease engine takes).
        self.ops = [queue.ops for queue in self.queues]
        self.renews = renews
        self.describe = describe
        self.stats = WorkerStats()
        #: Handler durations not yet flushed to Redis (with the next heartbeat).
        self.durations = DurationRecorder()
        self.extra_stats: Callable[[], WorkerStats] | None = None
        self.listener: Listener | None = None
        self.held = Held()
        self.outage = Outage()
        self.stop_flag = Flag()
        self.abort_flag = Flag()
        #: Set once every job loop has ended: the watchdog and housekeeping then end too.
        self.finished = Flag()
        self.fatal: BaseException | None = None
        self.worker_id = new_worker_id()
        self.started = time.time()
        self._lock = threading.Lock()
        #: The slots' shared lease and completion (see :mod:`.batching`), unless batching is off.
        self.batch: Batch | None = Batch(self) if options.batch else None

    # Counts and state ---------------------------------------------------------------------------

    def count(
        self,
        completed: int = 0,
        failed: int = 0,
        lost: int = 0,
        timed_out: int = 0,
        cancelled: int = 0,
    ) -> None:
        """Add to this worker's counts."""
        with self._lock:
            self.stats.completed += completed
            self.stats.failed += failed
            self.stats.lost += lost
            self.stats.timed_out += timed_out
            self.stats.cancelled += cancelled

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

    @staticmethod
    def _name(job: Job) -> str:
        return f"{job.item.id()} of {job.queue.name.prefix}"

    # The job loop -------------------------------------------------------------------------------

    def job_loop(self, slot: int) -> Loop[None]:
        """Lease, handle, complete or release, until stopped; one per slot (thread or task).

        While items keep coming, the next look does not block (a blocking lease costs more to
        make); once a look finds nothing, the next one blocks for up to ``poll_secs``. A job
        that succeeds is completed with the slot's next lease in the same call, and what that
        lease found stands for the next look.
        """
        if self.batch is not None:
            return (yield from self._batched_loop(slot, self.batch))
        busy = False
        ahead: Looked | None = None
        while True:
            if ahead is not None:
                found, ahead = ahead.found, None
            elif self.stop_flag.is_set():
                return
            else:
                look = functools.partial(self._lease, block=not busy)
                tried = yield from retrying(
                    look, self.outage, self.stop_flag, self.stop_flag.is_set
                )
                if isinstance(tried, GaveUp):
                    return
                found = tried.value
            busy = found is not None
            if found is None:
                continue
            queue, item = found
            if self.stop_flag.is_set():
                yield from self._give_back(queue, item)
                return
            went_on = yield from self._work(Job.begin(slot, queue, item, self.options.timeout))
            if went_on is False:
                return
            if isinstance(went_on, Looked):
                ahead = went_on

    def _batched_loop(self, slot: int, batch: Batch) -> Loop[None]:
        """:meth:`job_loop` with the slot set's shared lease and completion (:mod:`.batching`).

        A completion that leased the next item with it (one slot, handlers not fast) stands for
        the next look, as in :meth:`job_loop`.
        """
        busy = False
        ahead: Looked | None = None
        timeout = self.options.timeout
        try:
            while True:
                if ahead is not None:
                    found: tuple[QueueBase, Item] | bool | None = ahead.found
                    ahead = None
                else:
                    found = batch.take_ready()
                    if found is None:
                        found = yield from batch.next(busy)
                if found is False:
                    return
                busy = found is not None
                if found is None or found is True:
                    continue
                queue, item = found
                if self.stop_flag.is_set():
                    yield from self._give_back(queue, item)
                    return
                went_on = yield from self._work(Job.begin(slot, queue, item, timeout))
                if went_on is False:
                    return
                if went_on is not True:
                    ahead = went_on
        finally:
            if self.stop_flag.is_set():
                batch.wake()
                yield from batch.give_back_ready()
                yield from batch.flush()

    def retrying_lease(self, look: Callable[[], Steps[T]]) -> Loop[Done[T] | GaveUp]:
        """Run a lease until it succeeds, waiting out outages; give up once stopping."""
        return (yield from retrying(look, self.outage, self.stop_flag, self.stop_flag.is_set))

    def retrying_completion(self, complete: Callable[[], Steps[T]]) -> Loop[Done[T] | GaveUp]:
        """Run a completion until it succeeds, waiting out outages; give up on abort only."""
        return (yield from retrying(complete, self.outage, self.abort_flag, self.abort_flag.is_set))

    def lease_one(self, block: bool) -> Steps[tuple[QueueBase, Item] | None]:
        """One look at the queues for one item (see :meth:`_lease`)."""
        return (yield from self._lease(block))

    def give_back(
        self, queue: QueueBase, item: Item, reason: str = "worker stopping"
    ) -> Loop[None]:
        """Give back an item leased and not started (see :meth:`_give_back`)."""
        yield from self._give_back(queue, item, reason)

    def _lease(self, block: bool) -> Steps[tuple[QueueBase, Item] | None]:
        """One look at the queues (blocking for up to ``poll_secs``, or not)."""
        options = self.options
        timeout = options.poll_secs if block else 0
        found = yield from lease_ops.lease_from(self.ops, options.lease_secs, block, timeout, False)
        return None if found is None else (self.queues[found[0]], found[1])

    def _give_back(
        self, queue: QueueBase, item: Item, reason: str = "worker stopping"
    ) -> Loop[None]:
        """Leased as the stop came: give it back uncounted, at the front of the line."""
        back = functools.partial(queue.ops.release_outcome, item, 0, reason, True)
        tried = yield from retrying(back, self.outage, self.abort_flag, once)
        if isinstance(tried, GaveUp):
            logger.warning(
                "could not give back %s of %s (%s; %s): left to its lease",
                item.id(),
                queue.name.prefix,
                reason,
                tried.error,
            )

    def _work(self, job: Job) -> Loop[bool | Looked]:
        """Run the handler on a held job and write its outcome.

        Returns:
            False to end the slot's loop; what the completion leased with it, if it did; else
            True.
        """
        self.held.hold(job)
        if self.listener is not None:
            self.listener.started(self, job)
        reply: BaseException | Returned | None = yield Handle(job.item, job.queue)
        now = time.monotonic()
        took = now - job.started
        batch = self.batch
        if batch is not None:
            batch.fast = took <= FAST_SECS
        raised, kept = self._outcome(job, reply)
        state = self.held.finish(job)
        if state == TIMED_OUT:
            logger.warning(
                "%s returned after its timeout: its result is discarded", self._name(job)
            )
            return False
        if state == CANCELLED:
            logger.info(
                "%s returned after it was cancelled: its result is discarded", self._name(job)
            )
            return False
        self.durations.observe(
            job.queue.name.prefix, took, "completed" if raised is None else "failed"
        )
        try:
            if self.abort_flag.is_set():
                return False
            if raised is None and kept is None and batch is not None and batch.takes():
                # Completed together with the slots' others; a result to keep goes alone.
                handed = batch.hand_over(job, state == LOST, now)
                return True if handed else (yield from batch.write_handed())
            if raised is None:
                return (yield from self._settle_success(job, state == LOST, kept))
            self.count(failed=1)
            reason = failure_reason(raised)
            if state == LOST:
                logger.warning(
                    "%s failed after losing its lease (not released): %s",
                    self._name(job),
                    reason.partition("\n")[0],
                )
            else:
                yield from self.settle_failure(job, reason, raised)
            return True
        finally:
            self.held.drop(job)
            if self.listener is not None:
                self.listener.ended(self, job)

    @staticmethod
    def _outcome(
        job: Job, reply: BaseException | Returned | None
    ) -> tuple[BaseException | None, bytes | None]:
        """What a handler raised, else the result to keep (None: the queue keeps none).

        A return value is kept as bytes: bytes as they are, str as UTF-8, None as empty, any
        other value as JSON. One that cannot be kept (not JSON-able, too long) is the item's
        failure.
        """
        if isinstance(reply, BaseException):
            return reply, None
        keep = job.queue.ops.keep_results_ms
        if not keep:
            return None, None
        value = reply.value if isinstance(reply, Returned) else None
        try:
            if isinstance(value, bytearray | memoryview):
                value = bytes(value)
            elif value is not None and not isinstance(value, bytes | str):
                value = json.dumps(value, allow_nan=False)
            return None, check_result(value, keep)
        except (TypeError, ValueError) as err:
            return TypeError(f"the handler's return value cannot be kept as a result: {err}"), None

    def _complete(self, job: Job, kept: bytes | None) -> Steps[tuple[bool, Looked | None]]:
        """Complete the job's item; unless the worker is stopping, lease the next in the call.

        With a result to keep, the completion keeps it (and leases nothing).
        """
        if kept is not None:
            done = yield from job.queue.ops.complete_one(job.item, None, kept)
            return done, None
        if self.stop_flag.is_set():
            done = yield from job.queue.ops.complete_one(job.item)
            return done, None
        done, found = yield from lease_ops.complete_and_lease_from(
            job.queue.ops, job.item, self.ops, self.options.lease_secs
        )
        return done, Looked(None if found is None else (self.queues[found[0]], found[1]))

    def _settle_success(self, job: Job, lost: bool, kept: bytes | None) -> Loop[bool | Looked]:
        """Complete the item; a lost reply is retried after reconnecting.

        The lease of a call whose reply was lost is left to run out.

        Returns:
            What was leased with the completion, or True when nothing was looked at.
        """
        complete = functools.partial(self._complete, job, kept)
        tried = yield from retrying(complete, self.outage, self.abort_flag, self.abort_flag.is_set)
        if isinstance(tried, GaveUp):
            logger.warning(
                "could not complete %s (%s): aborted, left to its lease",
                self._name(job),
                tried.error,
            )
            self.count(lost=1)
            return True
        done, looked = tried.value
        self.counted(job, done, lost, tried.retried)
        return True if looked is None else looked

    def counted(self, job: Job, done: bool, lost: bool, retried: bool) -> None:
        """Count a completion's outcome and log it.

        ``done``: the call completed the item; ``lost``: the job had lost its lease before;
        ``retried``: the call was sent again after a lost reply.
        """
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
        elif done:
            self.count(lost=1)
            logger.warning(
                "completed %s after losing its lease (another worker may have run it too)",
                self._name(job),
            )
        else:
            self.count(lost=1)
            logger.warning("%s was completed elsewhere", self._name(job))

    def settle_failure(self, job: Job, reason: str, error: BaseException | None) -> Loop[None]:
        """Release a failed item with its reason; log where it went (retry or dead letters).

        A release whose reply was lost is retried while the lease lasts; after that the lease
        hands the item out again (or a clean buries it).
        """
        item = job.item
        delay = self.retry_delay(item.deliveries)

        def lease_over() -> bool:
            left = job.renewed + self.options.lease_secs - time.monotonic()
            return self.abort_flag.is_set() or left <= 0

        release = functools.partial(job.queue.ops.release_outcome, item, delay, reason)
        tried = yield from retrying(release, self.outage, self.abort_flag, lease_over)
        if isinstance(tried, GaveUp):
            logger.warning(
                "could not release %s (%s): left to its lease, which hands it out again",
                self._name(job),
                tried.error,
            )
            return
        outcome = tried.value
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
        elif tried.retried:
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

    def release_all(self, reason: str) -> Loop[None]:
        """Give back every held item (an abort), one try each."""
        for job in self.held.take_all():
            try:
                yield from job.queue.ops.release(job.item, 0, reason)
                logger.info("released %s", self._name(job))
            except Exception as err:
                logger.warning("could not release %s (left to its lease): %s", self._name(job), err)

    # The watchdog -------------------------------------------------------------------------------

    def watchdog(self) -> Loop[None]:
        """Renew held leases every third of the lease time; time out handlers past ``timeout``.

        It also fails the jobs whose handler is gone without an outcome (their process died).
        """
        every = self.options.lease_secs / 3
        tick = min(every, WATCH_TICK_SECS)
        while not self.finished.is_set():
            yield Pause(tick, self.finished)
            if self.abort_flag.is_set():  # held items are being released
                continue
            for job, reason in self.held.take_ended():
                yield from self._fail_held(job, reason)
            if self.options.timeout is not None:
                for job in self.held.time_out(time.monotonic()):
                    yield from self._time_out(job)
            for job in self.held.take_to_stop():  # cancelled jobs of child processes
                yield Replace(job)
            if self.batch is not None:  # items or completions left behind a slow handler
                yield from self.batch.tidy(time.monotonic())
            if not self.renews:
                continue
            for job in self.held.due(time.monotonic(), every):
                yield from self._renew(job)
        if not self.abort_flag.is_set():  # a process that died as the worker ended
            for job, reason in self.held.take_ended():
                yield from self._fail_held(job, reason)

    def _renew(self, job: Job) -> Loop[None]:
        asked = time.monotonic()
        renew = functools.partial(job.queue.ops.renew, job.item, self.options.lease_secs)
        tried = yield from retrying(renew, self.outage, self.finished, once)
        if isinstance(tried, GaveUp):
            return  # the next tick tries again
        if tried.value == Renewed.CANCELLED:
            yield from self._cancelled(job)
        elif tried.value:
            job.renewed = asked
        elif self.held.lose(job):
            logger.warning("lost the lease on %s", self._name(job))
        else:  # it reached Redis after the completion or release (a slow or paused server)
            logger.debug("the renewal of %s came after its handler returned", self._name(job))

    def _cancelled(self, job: Job) -> Loop[None]:
        """The renewal found the item cancelled: stop its handler as for a timeout.

        A worker process tells its parent, which kills it (and starts another) as it kills one
        whose handler ran past its timeout.
        """
        tell = getattr(self.listener, "cancelled", None)
        if not self.held.cancel(job):
            return  # the handler had returned: its outcome found the item gone
        logger.info("%s was cancelled: its handler is stopped%s", self._name(job), self.describe)
        if tell is not None:
            tell(self, job)  # the parent counts it
        else:
            self.count(cancelled=1)
            yield Replace(job)

    def _time_out(self, job: Job) -> Loop[None]:
        assert self.options.timeout is not None
        logger.warning(
            "%s ran past its timeout of %g s: released as a failure%s",
            self._name(job),
            self.options.timeout,
            self.describe,
        )
        yield Replace(job)
        self.count(timed_out=1)
        reason = f"timeout: the handler ran longer than {self.options.timeout:g} s"
        yield from self._fail_held(job, reason)

    def _fail_held(self, job: Job, reason: str) -> Loop[None]:
        """A held job whose handler is gone (timed out, or its process died): a failure."""
        self.count(failed=1)
        self.durations.observe(job.queue.name.prefix, time.monotonic() - job.started, "failed")
        yield from self.settle_failure(job, reason, None)

    # Housekeeping -------------------------------------------------------------------------------

    def housekeeping(self) -> Loop[None]:
        """Heartbeats, the fleet's light clean and the health file, until the worker ends.

        The fleet's turn to run the schedules comes on its own interval.
        """
        beat = self.options.heartbeat_secs
        clean = self.options.clean_secs
        turn = self.options.schedule_secs
        ticks = [t for t in (beat, None if clean is None else clean / 2) if t is not None]
        if not ticks and turn is None:
            return
        tick = min(ticks) if ticks else None
        step = min(t for t in (tick, turn) if t is not None)
        ttl_ms = 0 if beat is None else max(round(beat * LAPSE_BEATS * 1000), 1)
        due = 0.0  # when the next beat and clean are due (monotonic seconds)
        while not self.finished.is_set():
            if tick is not None and time.monotonic() >= due:
                due = time.monotonic() + tick - step / 2
                healthy = True
                if beat is not None:
                    healthy = yield from self._beat(ttl_ms)
                if clean is not None and not self.stop_flag.is_set():
                    healthy = (yield from self._clean(round(clean * 1000))) and healthy
                if (
                    self.options.health_file
                    and healthy
                    and not self.outage.active
                    and not self.stuck()
                ):
                    try:
                        health.touch(self.options.health_file)
                    except OSError as err:
                        logger.warning("cannot touch the health file: %s", err)
            if turn is not None and not self.stop_flag.is_set():
                yield from self._schedules(round(turn * 1000))
            yield Pause(step, self.finished)
        if beat is not None:
            yield from self._unregister()

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

    def _beat(self, ttl_ms: int) -> Loop[bool]:
        fields = self._fields()
        for queue in self.queues:
            prefix = queue.name.prefix
            deltas = self.durations.take(prefix)
            beat = functools.partial(
                health_ops.heartbeat_steps, queue.keys, self.worker_id, ttl_ms, fields, deltas
            )
            tried = yield from retrying(beat, self.outage, self.finished, once)
            if isinstance(tried, GaveUp):
                self.durations.add(prefix, deltas)  # flushed with a later beat
                return False
        return True

    def _clean(self, interval_ms: int) -> Loop[bool]:
        for queue in self.queues:
            clean = functools.partial(self._clean_turn, queue, interval_ms)
            tried = yield from retrying(clean, self.outage, self.finished, once)
            if isinstance(tried, GaveUp):
                return False
        return True

    def _clean_turn(self, queue: QueueBase, interval_ms: int) -> Steps[None]:
        """Light-clean ``queue`` if this worker's turn comes (at most one per interval)."""
        if (yield from health_ops.clean_gate_steps(queue.keys, self.worker_id, interval_ms)):
            yield from queue.ops.light_clean()  # which logs what it did

    def _schedules(self, turn_ms: int) -> Loop[bool]:
        """Add the due occurrences of each queue's schedules when this worker takes the turn.

        At most one worker of the fleet takes it per ``turn_ms``, and only on a queue with
        schedules.
        """
        for queue in self.queues:
            run = functools.partial(
                schedule_ops.turn_steps, queue.keys, owner=self.worker_id, turn_ms=turn_ms
            )
            tried = yield from retrying(run, self.outage, self.finished, once)
            if isinstance(tried, GaveUp):
                return False
        return True

    def _unregister(self) -> Loop[None]:
        """Remove the registration and flush the last durations, one try per queue."""
        for queue in self.queues:
            prefix = queue.name.prefix
            deltas = self.durations.take(prefix)
            try:
                yield from health_ops.heartbeat_steps(queue.keys, self.worker_id, 0, {}, deltas)
            except Exception as err:
                logger.info(
                    "could not remove the registration (it lapses), nor flush the job "
                    "durations of %s (lost): %s",
                    prefix,
                    err,
                )
