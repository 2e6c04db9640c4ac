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

A worker process (``processes=True``) runs one slot per process: its slots do not batch. Nor
does a worker of one slot, which completes each item with its next lease in one call.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import deque
from collections.abc import Sequence
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


class Batch:
    """The lease and completion shared by the slots of one :class:`~.core.Core`."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self._lock = threading.Lock()
        self._ready: deque[tuple[QueueBase, Item]] = deque()
        self._waiting = 0
        self._leasing = False
        self._arrived = Flag()
        #: Completions handed over: the job, whether it lost its lease, and the outages begun
        #: by then.
        self._pending: list[tuple[Job, bool, int]] = []
        self._writing = False

    # Leasing ------------------------------------------------------------------------------------

    def next(self, busy: bool) -> Loop[tuple[QueueBase, Item] | bool | None]:
        """The slot's next item; None when none came; False when the worker is stopping.

        ``busy``: the slot's last look found an item (the next lease then does not block).
        """
        core = self.core
        while True:
            with self._lock:
                if core.stop_flag.is_set():
                    return False
                if self._ready:
                    return self._ready.popleft()
                if self._leasing:
                    self._waiting += 1
                    arrived: Flag | None = self._arrived
                else:
                    self._leasing = True
                    # The slots waiting, this one, and the one writing completions (its
                    # handler has returned: it takes an item once its call is written).
                    count = self._waiting + 1 + (1 if self._writing else 0)
                    arrived = None
            if arrived is not None:
                try:
                    yield Pause(WAIT_SECS, arrived)
                finally:
                    with self._lock:
                        self._waiting -= 1
                continue
            got: list[tuple[QueueBase, Item]] | bool = False
            try:
                got = yield from self._lease(count, block=not busy)
            finally:
                with self._lock:
                    self._leasing = False
                    if isinstance(got, list):
                        self._ready.extend(got[1:])
                    woken, self._arrived = self._arrived, Flag()
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

    # Completing ---------------------------------------------------------------------------------

    def settle(self, job: Job, lost: bool) -> Loop[bool]:
        """Hand a job whose handler returned to the completion; write them if no one is.

        Returns True (the slot goes on).
        """
        with self._lock:
            self._pending.append((job, lost, self.core.outage.started))
            if self._writing:
                return True
            self._writing = True
        try:
            # Let the slots that got items with this one finish theirs first: they go out in
            # the same call.
            yield Pause(0, self.core.stop_flag)
            while True:
                with self._lock:
                    jobs, self._pending = self._pending, []
                    if not jobs:
                        self._writing = False
                        return True
                yield from self.write(jobs)
        except BaseException:
            with self._lock:
                self._writing = False
            raise

    def write(self, jobs: Sequence[tuple[Job, bool, int]]) -> Loop[None]:
        """Complete ``jobs``: one call per queue (per chunk of ids), counted per job.

        Each call is retried after a lost reply; each job is counted by
        :meth:`.core.Core.counted`, as a slot's own completion is. A job handed over before an
        outage began and written after it counts as a completion retried across the outage
        (its slot, unbatched, would have sent it before and retried it): an item the call
        finds gone then counts as completed, as it does for one call retried.
        """
        by_queue: dict[str, list[tuple[Job, bool, int]]] = {}
        for entry in jobs:
            by_queue.setdefault(entry[0].queue.name.prefix, []).append(entry)
        core = self.core
        debug = logger.isEnabledFor(logging.DEBUG)  # each completion is logged
        for group in by_queue.values():
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
