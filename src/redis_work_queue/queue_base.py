"""The operations layer shared by the synchronous and asyncio queues.

:class:`QueueBase` holds what a queue object is (its name, keys and operations) and checks its
options; :func:`lease_from_steps` is the operation behind both ``lease_from`` functions, and
:func:`complete_and_lease_steps` the one behind both ``complete_and_lease_from``. Nothing
here sends a call: the facades (:mod:`.workqueue`, :mod:`.aio`) drive these with
:func:`~.protocol.run` and :func:`~.protocol.arun`.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Sequence
from typing import TypeVar

from . import cluster
from .errors import InvalidArgumentError, InvalidArgumentTypeError
from .item import Item
from .keyprefix import KeyPrefix, QueueKeys
from .lease import LeaseRequest, complete_and_lease, lease_items
from .ops import QueueOps
from .protocol import ScriptCall, Steps
from .validation import check_item

logger = logging.getLogger(__name__)


class QueueBase:
    """What the synchronous and asynchronous queues share: the name, the keys, the operations.

    Args:
        name: The queue's key prefix. Put a ``{hash tag}`` in it to keep the queue in one
            Redis Cluster slot.
        max_deliveries: Hand an item out at most this many times: when a try ends (by
            ``release`` or by lease expiry) on the last allowed delivery, the item goes to the
            queue's dead-letter store instead of back to the queue. None (the default) retries
            for ever. Give every client of a queue the same value.
        replicas: Wait until this many replicas have acknowledged each add and complete (WAIT),
            raising :class:`ReplicationError` when they do not within ``replica_timeout``.
            Each call can override it.
        replica_timeout: How long to wait for the replicas, in seconds.

    Raises:
        InvalidArgumentError: An argument is out of range, or the name holds a segment that
            another queue keeps per-item keys under (``x:item``, ``x:dead:y``; see
            :func:`~redis_work_queue.keyprefix.check_queue_name`).
    """

    def __init__(
        self,
        name: KeyPrefix,
        max_deliveries: int | None = None,
        replicas: int = 0,
        replica_timeout: float = 1.0,
    ) -> None:
        if not isinstance(name, KeyPrefix):
            raise InvalidArgumentTypeError(
                f"a queue is named by a KeyPrefix, not {type(name).__name__}"
            )
        self.name = name
        self.keys = QueueKeys(name)
        #: The queue's operations as generators of Redis calls (:class:`~.ops.QueueOps`), for
        #: code that drives them itself with :func:`~.protocol.run` or :func:`~.protocol.arun`
        #: (the worker runners, the Spark data source) or writes its own on the same
        #: conventions (:meth:`~.ops.QueueOps.script_call`).
        self.ops = QueueOps(self.keys, max_deliveries, replicas, replica_timeout)
        #: A random id of this queue object, as the reference client keeps one (its lease
        #: value); the library's leases carry a fresh token each instead.
        self._session = uuid.uuid4().hex

    # The reference client's attribute names, for code written against it.

    @property
    def _main_queue_key(self) -> str:
        """The main queue's key, ``<prefix>:queue``."""
        return self.keys.queue

    @property
    def _processing_key(self) -> str:
        """The processing list's key, ``<prefix>:processing``."""
        return self.keys.processing

    @property
    def _item_data_key(self) -> KeyPrefix:
        """The prefix of the data keys: ``queue._item_data_key.of(id)`` is an item's data key."""
        return KeyPrefix(self.keys.item_prefix)

    @property
    def _lease_key(self) -> KeyPrefix:
        """The prefix of the lease keys: ``queue._lease_key.of(id)`` is an item's lease key."""
        return KeyPrefix(self.keys.lease_prefix)

    @property
    def max_deliveries(self) -> int | None:
        """The queue's delivery limit, or None."""
        return self.ops.max_deliveries or None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, max_deliveries={self.max_deliveries})"


Q = TypeVar("Q", bound=QueueBase)

#: How long a worker leasing from queues in several cluster slots waits on its first queue
#: before it looks at the others again.
FALLBACK_SLICE = 0.5


def leasable_together(db: object, queues: Sequence[QueueBase]) -> bool:
    """Whether ``queues`` can be leased from in one script call on ``db``.

    Always on a single server; on Redis Cluster, when every key of every queue is in one slot
    (their names share a ``{hash tag}``).
    """
    if not cluster.is_cluster(db):
        return True
    return cluster.same_slot([key for q in queues for key in q.ops.slot_keys])


def lease_from_steps(
    queues: Sequence[Q],
    lease_secs: float,
    block: bool,
    timeout: float,
    at_most_once: bool,
    max_block: float,
    together: bool = True,
) -> Steps[tuple[Q, Item] | None]:
    """The operation behind :func:`~redis_work_queue.lease_from` and its asyncio twin.

    ``together`` false tries the queues one at a time (they live in different cluster slots).
    """
    if not queues:
        raise InvalidArgumentError("lease_from needs at least one queue")
    if together:
        ops = [q.ops for q in queues]
        request = LeaseRequest.of(
            lease_secs, block=block, timeout=timeout, at_most_once=at_most_once, max_block=max_block
        )
        leased = yield from lease_items(ops, request)
        if not leased:
            return None
        index, item = leased[0]
        return queues[index], item
    logger.debug("leasing from %d queues in turn: they are in different slots", len(queues))
    deadline = time.monotonic() + timeout if timeout else math.inf
    while True:
        for queue in queues:
            found = yield from queue.ops.lease_one(lease_secs, False, 0, at_most_once)
            if found is not None:
                return queue, found
        remaining = deadline - time.monotonic()
        if not block or remaining <= 0:
            return None
        first = queues[0]
        wait = min(remaining, FALLBACK_SLICE)
        found = yield from first.ops.lease_one(lease_secs, True, wait, at_most_once, max_block)
        if found is not None:
            return first, found


def complete_and_lease_steps(
    queue: Q, item: Item, queues: Sequence[Q], lease_secs: float, together: bool = True
) -> Steps[tuple[bool, tuple[Q, Item] | None]]:
    """The operation behind :func:`~redis_work_queue.complete_and_lease_from` and its twin.

    One script call (``lua/lease.lua`` with a completion) when ``queue`` is one of ``queues``,
    they can be leased from together and ``queue`` waits for no replicas; otherwise the
    completion, then a lease that does not block, as two calls.
    """
    if not queues:
        raise InvalidArgumentError("complete_and_lease_from needs at least one queue to lease from")
    if not isinstance(queue, QueueBase):
        raise InvalidArgumentTypeError(
            f"complete_and_lease_from completes an item of a queue, not of {type(queue).__name__}"
        )
    item = check_item(item)
    request = LeaseRequest.of(lease_secs)
    prefix = queue.ops.keys.prefix
    index = next((i for i, q in enumerate(queues) if q.ops.keys.prefix == prefix), None)
    if index is None or not together or queue.ops.replicas:
        done = yield from queue.ops.complete_one(item)
        leased = yield from lease_from_steps(
            queues,
            lease_secs,
            block=False,
            timeout=0,
            at_most_once=False,
            max_block=0,
            together=together,
        )
        return done, leased
    ops = [q.ops for q in queues]
    done, rows = yield from complete_and_lease(ops, index, item.id(), request)
    if not rows:
        return done, None
    found, got = rows[0]
    return done, (queues[found], got)


#: Script calls sent per round trip by the methods that make many independent calls.
PIPELINE_CHUNK = 1000


def first_call(steps: Steps[bool]) -> ScriptCall:
    """The one script call of a single-call operation (its checks run here)."""
    call = next(steps)
    steps.close()
    if not isinstance(call, ScriptCall):  # pragma: no cover - the operations used are one call
        raise TypeError(f"expected a script call, not {call!r}")
    return call
