"""What the synchronous and asyncio queues share: a queue object and its operations.

:class:`QueueBase` is a queue's name, keys and operations (:class:`~.ops.QueueOps`), with its
options checked. Nothing here sends a call: the facades (:mod:`.workqueue`, :mod:`.aio`) drive
the operations with :func:`~.transport.run` and :func:`~.transport.arun`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from .errors import InvalidArgumentError, InvalidArgumentTypeError
from .flow import RateLimit, check_group_concurrency, check_rate_limit
from .keyprefix import KeyPrefix, QueueKeys
from .ops import QueueOps
from .ops.events import EVENTS_MAXLEN, check_events
from .ops.sharded import ShardedOps
from .validation import to_ms


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
        keep_results: Keep each completed item's result this many seconds (``complete``'s
            ``result``, or the worker runner's handler's return value), for :meth:`state` and
            ``result`` (which waits for it). None (the default): keep nothing, and write
            exactly the keys a queue without results writes.
        shards: Spread the queue over this many shards, each an ordinary queue under its own
            ``{hash tag}`` (``{name:0}``, ``{name:1}``...), so that on Redis Cluster it uses
            every primary (see :mod:`~.ops.sharded`). 1 (the default) is today's one queue,
            with exactly its keys.
        shards_before: Earlier shard counts of the queue (an int or a tuple) whose shards may
            still hold items while the count changes: they are still leased, cleaned and
            counted. Adds follow ``shards``.
        rate_limit: Lease at most so many items per window across every worker of the queue
            (:class:`RateLimit`, kept in Redis): declared before this object's first lease,
            and stored only when no limit was ever set on the queue; ``set_rate_limit``
            changes it at run time. None (the default) declares none.
        events: Append one entry per change of an item (added, leased, completed, failed,
            retried, dead, expired, requeued, cancelled, promoted) to the stream
            ``<name>:events``, in the script call that makes the change; read them with
            ``events``. False (the default): write no stream, exactly the keys a queue without
            events writes. Not with ``shards``.
        events_maxlen: With ``events``, keep about this many entries (XADD's approximate
            ``MAXLEN``: a few more may stay until Redis trims a whole node).
        group_concurrency: At most this many items of one group in flight (leased and not yet
            completed, released or requeued by a clean) across every worker of the queue (see
            ``add_item``'s ``group``). Kept in Redis as the rate limit is: declared before this
            object's first lease (give it to the workers' queues), stored only when none was
            ever set on the queue;
            ``set_group_concurrency`` changes it at run time. None (the default) declares none.
            Not with ``shards``.
        group_rate_limit: Lease at most so many items of each group per window across every
            worker (:class:`RateLimit`, one pacing clock per group, kept in Redis), for every
            group without a limit of its own (``set_group_rate_limit``). Declared as
            ``group_concurrency`` is; ``set_default_group_rate_limit`` changes it at run time.
            None (the default) declares none. Not with ``shards``.

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
        keep_results: float | None = None,
        shards: int = 1,
        shards_before: int | Sequence[int] = (),
        rate_limit: RateLimit | None = None,
        events: bool = False,
        events_maxlen: int = EVENTS_MAXLEN,
        group_concurrency: int | None = None,
        group_rate_limit: RateLimit | None = None,
    ) -> None:
        if not isinstance(name, KeyPrefix):
            raise InvalidArgumentTypeError(
                f"a queue is named by a KeyPrefix, not {type(name).__name__}"
            )
        self.name = name
        #: The queue's operations as generators of Redis calls (:class:`~.ops.QueueOps`), for
        #: code that drives them itself with :func:`~.transport.run` or :func:`~.transport.arun`
        #: (the worker runners, the Spark data source) or writes its own with the scripts'
        #: argument builders (:mod:`~.ops.registry`).
        self.ops: QueueOps
        cap = check_events(events, events_maxlen, shards != 1 or bool(shards_before))
        if shards == 1 and not shards_before:
            keep_ms = 0 if keep_results is None else to_ms(keep_results, "keep_results")
            self.keys = QueueKeys(name, cap, keep_ms)
            self.ops = QueueOps(self.keys, max_deliveries, replicas, replica_timeout, keep_results)
        else:
            self.ops = ShardedOps(
                name,
                shards,
                _counts(shards_before),
                max_deliveries,
                replicas,
                replica_timeout,
                keep_results,
            )
            #: The home shard's keys on a sharded queue (its workers' records live there).
            self.keys = self.ops.keys
        if rate_limit is not None and isinstance(self.ops, ShardedOps):
            raise InvalidArgumentError(
                "rate_limit is not available on a sharded queue (shards > 1): each shard would "
                "keep its own limit; limit the queue unsharded, or leave rate_limit=None"
            )
        self.ops.rate_limit = check_rate_limit(rate_limit)
        self.ops.group_concurrency = check_group_concurrency(group_concurrency)
        self.ops.group_rate_limit = check_rate_limit(group_rate_limit, "group_rate_limit")
        if group_concurrency is not None or group_rate_limit is not None:
            self.ops.group_keys()  # refused on a sharded queue
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
    def shards(self) -> int:
        """How many shards new items go to (1: an unsharded queue)."""
        return self.ops.shards if isinstance(self.ops, ShardedOps) else 1

    @property
    def shards_before(self) -> tuple[int, ...]:
        """The earlier shard counts whose shards are still leased and counted (see ``shards``)."""
        return self.ops.shards_before if isinstance(self.ops, ShardedOps) else ()

    @property
    def events_maxlen(self) -> int | None:
        """The cap of the queue's event stream ``<name>:events``; None: events are off."""
        return self.ops.events_maxlen

    @property
    def max_deliveries(self) -> int | None:
        """The queue's delivery limit, or None."""
        return self.ops.max_deliveries or None

    @property
    def keep_results(self) -> float | None:
        """How long a completed item's result is kept, in seconds, or None."""
        return self.ops.keep_results_ms / 1000 or None

    @property
    def group_concurrency(self) -> int | None:
        """The group concurrency this queue object declares (the one in force: ``stats()``)."""
        return self.ops.group_concurrency

    @property
    def group_rate_limit(self) -> RateLimit | None:
        """The rate limit of every group this queue object declares (in force: ``stats()``)."""
        return self.ops.group_rate_limit

    @property
    def rate_limit(self) -> RateLimit | None:
        """The rate limit this queue object declares (the one in force: ``stats()``)."""
        return self.ops.rate_limit

    def __repr__(self) -> str:
        shards = f", shards={self.shards}" if isinstance(self.ops, ShardedOps) else ""
        return f"{type(self).__name__}({self.name!r}, max_deliveries={self.max_deliveries}{shards})"


def ops_of(queues: Sequence[QueueBase], what: str) -> list[QueueOps]:
    """The operations of each of ``queues``, checked to be queues.

    Raises:
        InvalidArgumentTypeError: One of them is not a queue; ``what`` names the call.
    """
    if isinstance(queues, str | bytes) or not isinstance(queues, Sequence):
        raise InvalidArgumentTypeError(
            f"{what} takes a list of queues, not {type(queues).__name__}"
        )
    for index, queue in enumerate(queues):
        if not isinstance(queue, QueueBase):
            raise InvalidArgumentTypeError(
                f"{what} takes queues, but queues[{index}] is a {type(queue).__name__}: pass "
                "WorkQueue (or AsyncWorkQueue) objects"
            )
    return [queue.ops for queue in queues]


def ops_of_one(queue: QueueBase, what: str) -> QueueOps:
    """The operations of ``queue``, checked to be a queue.

    Raises:
        InvalidArgumentTypeError: It is not; ``what`` names the call.
    """
    if not isinstance(queue, QueueBase):
        raise InvalidArgumentTypeError(
            f"{what} completes an item of a queue, not of {type(queue).__name__}"
        )
    return queue.ops


def _counts(before: int | Sequence[int]) -> tuple[int, ...]:
    """``shards_before`` as a tuple (checked by :class:`ShardedOps`)."""
    if isinstance(before, int) or not isinstance(before, Sequence):
        return (before,)
    return tuple(before)
