"""Batching: the slots of one worker lease together and complete together.

With ``batch=True`` (the default) and more than one slot in one process (threads of a
``Worker``, tasks of an ``AsyncWorker``), a slot that needs an item takes one leased for the
slot set if there is one; else, when no other slot is leasing, it leases as many items as
there are slots waiting for one, itself included, and the slot writing completions (its
handler has returned), in one call (the queues' lease script with a count), keeps the first
and hands the others to the waiting slots; else it waits for the slot that is leasing. A slot
whose handler returned hands its item to the completion of the slot set and goes on at once:
the first slot with a completion to write becomes the writer, lets the other slots run first
(one switch, no timer: the slots that got items with it hand theirs over meanwhile), and
writes every completion handed over until none is left, one call per queue (``complete`` with
every id), so completions that arrive while a call is in flight go in the next one. No
completion waits for a timer: it goes out with the writer's next call, within one call's time.

The guarantees do not change. Each item is completed once by one call, and counted once (a
call retried after a lost reply counts what the first try did, as one item's completion does).
Failures, timeouts and cancellations stay per item (the handler's slot releases it, as without
batching). A worker killed while completions wait to be written completes none of them: their
leases run out and the items are delivered again (at least once), never completed twice.
Items leased for the slot set and not yet taken when the worker stops are given back at the
front of their queue.

Fast handlers run inline. While the handlers return within :data:`FAST_SECS` and the lease is
at least :data:`INLINE_MIN_LEASE_SECS`, the slot that leases takes up to
``max(concurrency, INLINE_COUNT)`` items and runs them itself, one after the other, without
waking the other slots (a thread or task switch costs more than such a handler), and their
completions go out together once it has run them all (a failure is still released at once).
A worker of one slot does the same, and otherwise completes each item with its next lease in
one call. Nothing waits unbounded behind a handler that turns slow: a slot waiting for an item
looks again within :data:`WAIT_SECS` and takes one left there, and the watchdog gives back (at
the front of their queue, the delivery undone) items not taken within :data:`STALE_SECS` and
writes completions handed over and not written within as long.

A worker process (``processes=True``) runs one slot per process: its slots do not batch.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from ..calls import Ask, Steps
from ..item import Item
from ..ops import lease as lease_ops
from ..queue_base import QueueBase
from .actions import Flag, Loop, Pause
from .retry import GaveUp

if TYPE_CHECKING:
    from ..ops.queue import QueueOps
    from .core import Core, Job

logger = logging.getLogger("redis_work_queue.worker")

#: How long a slot waits for the slot leasing for it before it looks again (it is woken as
#: soon as the lease returns; this only bounds a missed wake-up).
WAIT_SECS = 0.5
#: A handler that returned within this many seconds is fast: the next items run inline.
FAST_SECS = 0.0005
#: With fast handlers, a lease takes at least this many items (as many as the slots, if more).
INLINE_COUNT = 8
#: Items are run inline (leased ahead of the slots) only with leases at least this long.
INLINE_MIN_LEASE_SECS = 2.0
#: Leased items not taken, and completions not written, this long are the watchdog's to settle.
STALE_SECS = 0.25


class Batch:
    """The lease and completion shared by the slots of one :class:`~.core.Core`."""

    def __init__(self, core: Core) -> None:
        self.core = core
        options = core.options
        #: Several slots share the lease and completion (else one slot batches alone).
        self.shared = options.concurrency > 1
        #: Whether the last handler was fast (see :data:`FAST_SECS`).
        self.fast = False
        self._inline_ok = options.lease_secs >= INLINE_MIN_LEASE_SECS
        self._inline_count = max(options.concurrency, INLINE_COUNT)
        self._lock = threading.Lock()
        self._ready: deque[tuple[QueueBase, Item]] = deque()
        #: When the items in ``_ready`` were leased (monotonic seconds; they came in one call).
        self._ready_at = 0.0
        self._waiting = 0
        self._leasing = False
        self._arrived = Flag()
        #: Completions handed over: the job, whether it lost its lease, and the outages begun
        #: by then.
        self._pending: list[tuple[Job, bool, int]] = []
        #: When the first completion in ``_pending`` was handed over.
        self._pending_at = 0.0
        self._writing = False

    @property
    def inline(self) -> bool:
        """Whether the slot that leases runs the items itself (fast handlers, long leases)."""
        return self.fast and self._inline_ok

    def takes(self) -> bool:
        """Whether a successful job's completion goes through the slot set.

        A worker of one slot whose handlers are not fast completes each item with its next
        lease in one call instead, when nothing leased or handed over waits here.
        """
        return self.shared or self.inline or bool(self._pending or self._ready)

    # Leasing ------------------------------------------------------------------------------------

    def take_ready(self) -> tuple[QueueBase, Item] | None:
        """An item leased for the slot set and not taken, if there is one (and no stop came)."""
        if not self._ready:  # read without the lock: the lock below decides
            return None
        with self._lock:
            if self._ready and not self.core.stop_flag.is_set():
                return self._ready.popleft()
        return None

    def next(self, busy: bool) -> Loop[tuple[QueueBase, Item] | bool | None]:
        """The slot's next item; None when none came; False when the worker is stopping.

        ``busy``: the slot's last look found an item (the next lease then does not block).
        """
        core = self.core
        while True:
            flush = False
            with self._lock:
                if core.stop_flag.is_set():
                    return False
                if self._ready:
                    return self._ready.popleft()
                if self._leasing:
                    self._waiting += 1
                    arrived: Flag | None = self._arrived
                elif self._pending and not self._writing:
                    flush = True  # completions left by a failure or a slot's end: first
                    arrived = None
                else:
                    self._leasing = True
                    inline = self.inline
                    if inline:
                        count = self._inline_count
                    else:
                        # The slots waiting, this one, and the one writing completions (its
                        # handler has returned: it takes an item once its call is written).
                        count = self._waiting + 1 + (1 if self._writing else 0)
                    arrived = None
            if flush:
                yield from self.flush()
                continue
            if arrived is not None:
                try:
                    yield Pause(WAIT_SECS, arrived)
                finally:
                    with self._lock:
                        self._waiting -= 1
                continue
            got: list[tuple[QueueBase, Item]] | bool = False
            woken: Flag | None = None
            try:
                got = yield from self._lease(count, block=not busy)
            finally:
                with self._lock:
                    self._leasing = False
                    if isinstance(got, list) and len(got) > 1:
                        self._ready.extend(got[1:])
                        self._ready_at = time.monotonic()
                    # Inline, the others are not woken: the items are this slot's to run (a
                    # slot waiting takes one left here when it looks again).
                    if not (inline and got) and self._waiting:
                        woken, self._arrived = self._arrived, Flag()
                if woken is not None:
                    woken.set()
            if got is False:
                return False
            return got[0] if isinstance(got, list) and got else None

    def _lease(self, count: int, block: bool) -> Loop[list[tuple[QueueBase, Item]] | bool]:
        """Lease up to ``count`` items for the slot set; False when the worker stopped first."""
        core = self.core
        look = functools.partial(self._look, count, block)
        tried = yield from core.retrying_lease(look)
        if isinstance(tried, GaveUp):
            return False
        return tried.value

    def _look(self, count: int, block: bool) -> Steps[list[tuple[QueueBase, Item]]]:
        core = self.core
        ops = core.ops
        sharded = any(getattr(o, "shard_for", None) is not None for o in ops)
        if (
            count == 1
            or sharded  # a sharded queue leases through its own walk of the shards
            or (len(ops) > 1 and not (yield Ask("together", _slot_keys(ops))))
        ):
            found = yield from core.lease_one(block)
            return [] if found is None else [found]
        options = core.options
        timeout = options.poll_secs if block else 0
        request = yield from lease_ops.lease_request(
            options.lease_secs, block, timeout, count=count
        )
        rows = yield from lease_ops.lease_items(ops, request)
        return [(core.queues[index], item) for index, item in rows]

    def give_back_ready(self) -> Loop[None]:
        """The worker is stopping: give back the items leased for the slot set, not taken."""
        while True:
            with self._lock:
                if not self._ready:
                    return
                queue, item = self._ready.popleft()
            yield from self.core.give_back(queue, item)

    def wake(self) -> None:
        """Wake the slots waiting for an item (the worker is stopping)."""
        with self._lock:
            woken, self._arrived = self._arrived, Flag()
        woken.set()

    def tidy(self, now: float) -> Loop[None]:
        """The watchdog's turn: settle what waited :data:`STALE_SECS` or more.

        Items leased and not taken by a slot (a handler run inline turned slow) go back to the
        front of their queue, their delivery undone; completions handed over and not written
        (their writer is running a slow handler) are written.
        """
        with self._lock:
            stale = self._ready and now - self._ready_at >= STALE_SECS
            taken = list(self._ready) if stale else []
            if stale:
                self._ready.clear()
            late = (
                bool(self._pending) and not self._writing and now - self._pending_at >= STALE_SECS
            )
        for queue, item in taken:
            logger.debug("%s of %s was not taken in time: given back", item.id(), queue.name.prefix)
            yield from self.core.give_back(queue, item, "not started in time")
        if late:
            yield from self.flush()

    # Completing ---------------------------------------------------------------------------------

    def hand_over(self, job: Job, lost: bool, now: float) -> bool:
        """Hand a job whose handler returned (at ``now``) to the completion.

        Returns:
            True when it is left to a writer (a slot writing, or inline, the slot that runs the
            last of the items leased with it); False when this slot is to write now
            (:meth:`write_handed`).
        """
        with self._lock:
            if not self._pending:
                self._pending_at = now
            self._pending.append((job, lost, self.core.outage.started))
            if self._writing:
                return True
            if self._ready and self.inline and now - self._pending_at < STALE_SECS:
                return True  # written with the items still to run
            self._writing = True
            return False

    def write_handed(self) -> Loop[bool]:
        """As the writer (:meth:`hand_over` returned False): write every completion handed over.

        Returns True (the slot goes on).
        """
        try:
            if not self.inline:
                # Let the slots that got items with this one finish theirs first: they go out
                # in the same call.
                yield Pause(0, self.core.stop_flag)
            yield from self._write_pending()
        except BaseException:
            with self._lock:
                self._writing = False
            raise
        return True

    def flush(self) -> Loop[None]:
        """Write the completions handed over, unless a slot is writing them."""
        with self._lock:
            if self._writing or not self._pending:
                return
            self._writing = True
        try:
            yield from self._write_pending()
        except BaseException:
            with self._lock:
                self._writing = False
            raise

    def _write_pending(self) -> Loop[None]:
        """As the writer: write every completion handed over until none is left."""
        while True:
            with self._lock:
                jobs, self._pending = self._pending, []
                if not jobs:
                    self._writing = False
                    return
            yield from self.write(jobs)

    def write(self, jobs: Sequence[tuple[Job, bool, int]]) -> Loop[None]:
        """Complete ``jobs``: one call per queue (per chunk of ids), counted per job.

        Each call is retried after a lost reply; each job is counted by
        :meth:`.core.Core.counted`, as a slot's own completion is. A job handed over before an
        outage began and written after it counts as a completion retried across the outage
        (its slot, unbatched, would have sent it before and retried it): an item the call
        finds gone then counts as completed, as it does for one call retried.
        """
        first = jobs[0][0].queue
        if all(entry[0].queue is first for entry in jobs):
            groups: Iterable[Sequence[tuple[Job, bool, int]]] = (jobs,)
        else:
            by_queue: dict[str, list[tuple[Job, bool, int]]] = {}
            for entry in jobs:
                by_queue.setdefault(entry[0].queue.name.prefix, []).append(entry)
            groups = by_queue.values()
        core = self.core
        debug = logger.isEnabledFor(logging.DEBUG)  # each completion is logged
        for group in groups:
            queue = group[0][0].queue
            items = [job.item for job, _, _ in group]
            complete = functools.partial(queue.ops.complete, items)
            tried = yield from core.retrying_completion(complete)
            if isinstance(tried, GaveUp):
                for job, _, _ in group:
                    logger.warning(
                        "could not complete %s of %s (%s): aborted, left to its lease",
                        job.item.id(),
                        queue.name.prefix,
                        tried.error,
                    )
                    core.count(lost=1)
                continue
            done = {item.id() for item in tried.value}
            outages = core.outage.started
            plain = 0  # completed by this call's first try, as expected: counted together
            for job, lost, before in group:
                retried = tried.retried or outages != before
                if not lost and not retried and job.item.id() in done and not debug:
                    plain += 1
                else:
                    core.counted(job, job.item.id() in done, lost, retried)
            if plain:
                core.count(completed=plain)


def _slot_keys(ops: Sequence[QueueOps]) -> tuple[str, ...]:
    return lease_ops.plan_of(ops).slot_keys
