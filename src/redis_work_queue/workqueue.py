"""WorkQueue: the synchronous API over the queue operations of :mod:`.ops`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime

from . import results, transport
from .clients import SyncClient, SyncPipeline
from .flow import RateLimit
from .item import Item
from .ops import PIPELINE_CHUNK, jobs, listing
from .ops import events as events_ops
from .ops import flow as flow_ops
from .ops import lease as lease_ops
from .ops import schedules as schedule_ops
from .ops import sharded as sharded_ops
from .ops.events import Event
from .ops.jobs import Cancelled, ItemState, Renewed
from .ops.lease import FALLBACK_SLICE
from .ops.listing import DelayedItem
from .ops.queue import Adding
from .ops.sharded import ShardStats
from .queue_base import QueueBase, ops_of, ops_of_one
from .transport import run

#: The facade and its ``lease_from``; the shared layer's names stay importable from here.
__all__ = [
    "FALLBACK_SLICE",
    "PIPELINE_CHUNK",
    "QueueBase",
    "WorkQueue",
    "complete_and_lease_from",
    "lease_from",
]

logger = logging.getLogger(__name__)


class WorkQueue(QueueBase):
    """A reliable work queue on one Redis database, identified by its key prefix.

    Every operation is a single Lua script call, so a queue is never left half-changed by a
    crashed client. The key layout (``<prefix>:queue``, ``<prefix>:processing``,
    ``<prefix>:item:<id>``, ``<prefix>:lease:<id>``) is shared with other clients of the design.

    The constructor's arguments are those of :class:`QueueBase`.
    """

    # Adding -----------------------------------------------------------------------------------

    def add_item(
        self,
        db: SyncClient,
        item: Item,
        delay: float | datetime | None = None,
        ttl: float | None = None,
        replicas: int | None = None,
        group: str | None = None,
    ) -> bool:
        """Add an item unless an item with the same id already exists.

        Args:
            db: The Redis client.
            item: The item to add.
            delay: Hold the item back: seconds from now, or an aware ``datetime`` when it falls
                due. It is never handed out before then, and a worker blocked on the queue gets
                it within a few milliseconds after.
            ttl: Seconds the item lives: if it is not completed by then, it disappears and is
                never handed out again.
            replicas: Replicas that must acknowledge the add (WAIT); None uses the queue's.
            group: The item's group (a name of 1 to 256 bytes of UTF-8, such as a tenant's
                id): leases take from the groups with ready items in turn, whatever their
                backlogs, and ``group_concurrency`` caps the items of one group in flight (see
                Flow control in the docs). None (the default): the main queue, as before.

        Returns:
            True when the item was added; False when an item with this id exists already
            (queued, leased or delayed), in which case nothing changed.

        Raises:
            InvalidArgumentError: ``item`` is not an Item, ``delay``/``ttl`` is out of range,
                or ``group`` is empty, too long or not a str, or given on a sharded queue.
            WrongKeyTypeError: A key of the queue holds the wrong Redis type.
            ReplicationError: Too few replicas acknowledged the add in time.
        """
        return run(db, self.ops.add_one(item, False, Adding(delay, ttl, replicas, group)))

    def add_unique_item(
        self,
        db: SyncClient,
        item: Item,
        delay: float | datetime | None = None,
        ttl: float | None = None,
        replicas: int | None = None,
    ) -> None:
        """Add an item whose id is known to be new (such as a fresh UUID), skipping the check.

        Adding an id that does exist overwrites its data and queues it a second time; the
        second copy is dropped when it is met, so this costs accuracy of ``queue_len`` only.
        ``delay``, ``ttl`` and ``replicas`` are as for :meth:`add_item`.

        Raises:
            InvalidArgumentError: ``item`` is not an Item, or ``delay``/``ttl`` is out of range.
            WrongKeyTypeError: A key of the queue holds the wrong Redis type.
        """
        run(db, self.ops.add_one(item, True, Adding(delay, ttl, replicas)))

    def add_items(
        self,
        db: SyncClient,
        items: Iterable[Item],
        unique: bool = False,
        delay: float | datetime | None = None,
        ttl: float | None = None,
        replicas: int | None = None,
        group: str | Sequence[str | None] | None = None,
    ) -> list[bool]:
        """Add many items: one script call per chunk of up to 500 items (or 4 MB of data).

        Each chunk is atomic; a large batch is several chunks. Every item is checked before
        anything is sent.

        Args:
            db: The Redis client.
            items: The items.
            unique: Skip the existence check (as :meth:`add_unique_item`).
            delay: As for :meth:`add_item`, for every item.
            ttl: As for :meth:`add_item`, for every item.
            replicas: As for :meth:`add_item`, for every chunk.
            group: As for :meth:`add_item`: one group (a str) for every item, or a sequence
                holding one group (or None, for an item without one) per item, in order.

        Returns:
            One flag per item, in order: True when it was added, False when its id existed.

        Raises:
            InvalidArgumentError: As for :meth:`add_item`; or ``group``, a sequence, does not
                hold one entry per item.
        """
        return run(db, self.ops.add(items, unique, Adding(delay, ttl, replicas, group)))

    def add_unique_item_to_pipeline(self, pipeline: SyncPipeline, item: Item) -> None:
        """Queue an ``add_unique_item`` on a pipeline; it runs when the pipeline executes.

        The add leaves two entries in ``pipeline.execute()``'s results, as the reference
        client's SET and LPUSH do: 1 (the item was stored; it equals True) and the length of
        the main queue after the push.

        Raises:
            InvalidArgumentError: ``item`` is not an Item.
            CrossSlotError: On a Redis Cluster pipeline, the queue's keys are not in one slot
                (nothing has been queued).
        """
        transport.queue_on(pipeline, *self.ops.pipeline_add(item))

    def add_item_to_pipeline(self, pipeline: SyncPipeline, item: Item) -> None:
        """Queue an add on a pipeline: the unchecked add of :meth:`add_unique_item_to_pipeline`.

        The item is checked (an :class:`Item` with a str id and bytes data) before anything is
        queued, but not whether its id exists: the add's replies keep the shape of the reference
        client's SET and LPUSH (1, then the queue's length), which leaves no place to report an
        existing id. An id that exists is overwritten and queued a second time, as by
        :meth:`add_unique_item`. For a checked add of many items in one round trip, use
        :meth:`add_items`.

        Raises:
            InvalidArgumentError: ``item`` is not an Item.
            CrossSlotError: On a Redis Cluster pipeline, the queue's keys are not in one slot
                (nothing has been queued).
        """
        self.add_unique_item_to_pipeline(pipeline, item)

    # Leasing ----------------------------------------------------------------------------------

    def lease(
        self,
        db: SyncClient,
        lease_secs: float,
        block: bool = True,
        timeout: float = 0,
        at_most_once: bool = False,
    ) -> Item | None:
        """Lease the oldest queued item for ``lease_secs`` seconds.

        Each lease writes a fresh random token into the lease key; the item carries it
        (``item.lease_token``) along with its delivery count (``item.deliveries``, this delivery
        included).

        When the queue has items this is one script call. When it is empty and ``block`` is
        true, the worker waits on a blocking BRPOPLPUSH (scripts cannot block), which moves an
        id onto the processing list, and then a claim script takes the lease. A worker that dies
        between the two leaves the id on the processing list without a lease, where the next
        light clean finds it and requeues it: nothing is lost. The claim only succeeds while the
        id is still on the processing list, so a cleaner that requeued it first wins cleanly.

        A blocking wait is sent as a series of waits that each fit in the client's
        ``socket_timeout``, so any timeout (including 0, for ever) works with any client.

        Args:
            db: The Redis client.
            lease_secs: How long the lease lasts, in seconds (millisecond precision).
            block: Wait for an item when the queue is empty.
            timeout: With ``block``, how long to wait in seconds; 0 waits for ever; a
                positive timeout shorter than one millisecond waits one millisecond.
            at_most_once: Remove the item from the queue as it is handed out, in the same
                script: it is never delivered again, whatever happens to this worker. The item
                then has no lease (there is nothing to complete or release).

        Returns:
            The leased item; None when nothing could be leased (``block`` false and the queue
            empty, or the timeout passed).

        Raises:
            InvalidArgumentError: ``lease_secs`` or ``timeout`` is out of range.
            WrongKeyTypeError: A queue key holds the wrong Redis type.
        """
        steps = self.ops.lease_one(lease_secs, block, timeout, at_most_once)
        return run(db, steps)

    def lease_many(
        self,
        db: SyncClient,
        lease_secs: float,
        count: int,
        block: bool = True,
        timeout: float = 0,
        at_most_once: bool = False,
    ) -> list[Item]:
        """Lease up to ``count`` items in one script call (oldest first).

        With ``block``, waits (as :meth:`lease`) until at least one item is there, then returns
        what is available, up to ``count``.

        Returns:
            The leased items; empty when nothing could be leased.
        """
        steps = self.ops.lease(lease_secs, block, timeout, at_most_once, count)
        return run(db, steps)

    def renew(self, db: SyncClient, item: Item, lease_secs: float) -> bool:
        """Extend the lease on ``item`` to ``lease_secs`` seconds from now.

        Returns:
            True when the lease was extended; False, with nothing changed, when the caller no
            longer holds it (it expired, or another worker has leased the item since).

        Raises:
            InvalidArgumentError: ``item`` was not leased by this library, or ``lease_secs`` is
                out of range.
        """
        return bool(run(db, self.ops.renew(item, lease_secs)))

    def release(
        self, db: SyncClient, item: Item, delay: float = 0, reason: str | None = None
    ) -> bool:
        """Give a leased item back before its lease ends (a retryable failure).

        The item goes back to the main queue (at once, or after ``delay`` seconds), or, when it
        has been delivered ``max_deliveries`` times, to the dead-letter store.

        Args:
            db: The Redis client.
            item: The item, as returned by ``lease``.
            delay: Seconds before the item may be leased again.
            reason: Why the try failed; kept with the item (and with its dead letter).

        Returns:
            True when the caller held the lease and the item was given back (or buried); False,
            with nothing changed, when it did not hold the lease.

        Raises:
            InvalidArgumentError: ``item`` was not leased by this library, or ``delay`` is
                negative.
        """
        return run(db, self.ops.release(item, delay, reason))

    def release_outcome(
        self,
        db: SyncClient,
        item: Item,
        delay: float = 0,
        reason: str | None = None,
        undo: bool = False,
    ) -> results.Released:
        """Give a leased item back as :meth:`release` does, and say where it went.

        Args:
            db: The Redis client.
            item: The item, as returned by ``lease``.
            delay: Seconds before the item may be leased again.
            reason: Why the try failed; kept with the item (and with its dead letter).
            undo: Do not count the delivery: the item goes back to the leasing end of the
                queue as if it had never been handed out (a worker stopping before the job).

        Returns:
            ``Released.REQUEUED`` (back in the queue or delayed for a retry),
            ``Released.BURIED`` (that was its last allowed delivery: it went to the dead
            letters), or ``Released.NOT_HELD`` (the caller no longer held the lease; nothing
            changed).

        Raises:
            InvalidArgumentError: As for :meth:`release`.
        """
        return run(db, self.ops.release_outcome(item, delay, reason, undo))

    def renew_many(self, db: SyncClient, items: Iterable[Item], lease_secs: float) -> list[bool]:
        """Extend the leases on many items, as :meth:`renew` does for one.

        Each renewal is its own script call; they are sent together, one round trip per
        :data:`PIPELINE_CHUNK` items (a pipeline, not a transaction).

        Returns:
            One flag per item, in order, as :meth:`renew` returns.

        Raises:
            InvalidArgumentError: An item was not leased by this library, or ``lease_secs`` is
                out of range (checked for every item before anything is sent).
        """
        return run(db, self.ops.renew_many(items, lease_secs))

    def give_back(
        self, db: SyncClient, items: Iterable[Item], reason: str | None = None
    ) -> list[bool]:
        """Hand leased items back as if they had never been leased (a stop before any work).

        Each item goes back to the leasing end of the main queue and its delivery is not
        counted, so it can never be buried for it. One script call per item, sent together,
        one round trip per :data:`PIPELINE_CHUNK` items.

        Returns:
            One flag per item, in order: True when the caller held the lease and the item went
            back; False, with nothing changed, when it did not.

        Raises:
            InvalidArgumentError: An item was not leased by this library (checked for every item
                before anything is sent).
        """
        return run(db, self.ops.give_back(items, reason))

    @contextmanager
    def leased(
        self,
        db: SyncClient,
        lease_secs: float,
        block: bool = True,
        timeout: float = 0,
        retry_delay: float = 0,
    ) -> Iterator[Item | None]:
        """Lease an item for the body of a ``with`` block.

        On a normal exit the item is completed; when the body raises, the item is released
        (with ``retry_delay`` and the exception as its reason) and the exception propagates.
        The block receives None when nothing was leased.

        Example:
            >>> with queue.leased(db, 30) as item:  # doctest: +SKIP
            ...     process(item)
        """
        item = self.lease(db, lease_secs, block=block, timeout=timeout)
        if item is None:
            yield None
            return
        try:
            yield item
        except BaseException as err:
            self.release(db, item, delay=retry_delay, reason=f"{type(err).__name__}: {err}")
            raise
        self.complete(db, item)

    # Completing -------------------------------------------------------------------------------

    def complete(
        self,
        db: SyncClient,
        item: Item,
        replicas: int | None = None,
        result: bytes | str | None = None,
    ) -> bool:
        """Mark an item as done and remove it, with all its bookkeeping, from the queue.

        On a queue made with ``keep_results``, its result (``result``: bytes, or str as UTF-8;
        None: empty) is kept that long in the same script call, for :meth:`state` and
        :meth:`result`.

        Returns:
            True for exactly one call per item: the call that removed it. Every later call (or
            a call racing it) returns False. Once it has returned True, no worker leases the
            item again.

        Raises:
            InvalidArgumentError: ``item`` is not an Item.
            WrongKeyTypeError: The processing key holds something other than a list.
            ReplicationError: Too few replicas acknowledged the completion in time (``replicas``,
                or the queue's, as for :meth:`add_item`).
            InvalidArgumentError: ``result`` is given to a queue that keeps no results, is not
                bytes or str, or is longer than 16 MiB.
        """
        return run(db, self.ops.complete_one(item, replicas, result))

    def complete_many(
        self, db: SyncClient, items: Iterable[Item], replicas: int | None = None
    ) -> list[Item]:
        """Complete many items, in chunks of up to 500 per script call.

        Returns:
            The items this call completed; an item missing from it had been completed before
            (by another worker, or it expired).
        """
        return run(db, self.ops.complete(items, replicas))

    # Cleaning ---------------------------------------------------------------------------------

    def light_clean(self, db: SyncClient) -> results.CleanReport:
        """Requeue items whose lease has expired, going through the processing list once.

        The list is walked from its oldest end in steps of one script call each, sized from
        the server time the previous steps took (``TIME`` inside the script) to hold Redis for
        about a millisecond. Items whose last allowed delivery expired go to the dead-letter
        store; due delayed items are promoted. A bounded share of the delivery counts and
        reasons is checked too (an HSCAN that resumes where the previous pass stopped), and
        the entries of items that no longer exist are dropped: a client of another
        implementation that completes an item leased here leaves them behind. Run it about as
        often as your shortest lease time.

        Returns:
            How many entries were examined, requeued, dropped (their item no longer exists),
            moved to the dead-letter store, and bookkeeping entries forgotten.

        Raises:
            WrongKeyTypeError: A queue key holds the wrong Redis type.
        """
        return run(db, self.ops.light_clean())

    def deep_clean(
        self, db: SyncClient, progress: results.ProgressCallback | None = None
    ) -> results.CleanReport:
        """Requeue every item that exists, is not queued and has no lease.

        That is what a light clean recovers (expired leases on the processing list, burying
        the last allowed delivery) plus items lost from both lists, which only appear when a
        client of another implementation dies half-way through a multi-command operation, or
        when a list key is lost; run it rarely (hourly or daily).

        Its cost is linear in the data keys scanned plus the lengths of both lists, whatever
        share of the items is lost, and every step is one script call sized to hold Redis for
        about a millisecond: a SCAN over ``<prefix>:item:*`` (never KEYS; the prefix is
        glob-escaped), two walks of the main queue, a pass over the processing list, and an
        HSCAN of the delivery counts and reasons. Items it suspects are lost are held (a lease
        key with the run's token) so that nothing else queues them while it checks where they
        are; nothing is ever queued twice, and a leased or delayed item is never requeued (see
        :mod:`redis_work_queue.cleaning`). Every cleaner of a queue must run a version with
        this deep clean: an older light clean would rotate a held id instead of requeueing it.

        Args:
            db: The Redis client.
            progress: Called with a :class:`CleanProgress` about twice a second, and at the
                end. Progress is also logged at INFO every few seconds.

        Returns:
            How many data keys were examined, items requeued, processing-list entries dropped,
            items moved to the dead-letter store and bookkeeping entries forgotten.

        Raises:
            WrongKeyTypeError: A queue key holds the wrong Redis type.
        """
        return run(db, self.ops.deep_clean(progress))

    # Dead letters -----------------------------------------------------------------------------

    def dead_letters(
        self,
        db: SyncClient,
        start: int = 0,
        count: int = 100,
        preview_bytes: int | None = None,
    ) -> list[results.DeadLetter]:
        """One page of the dead-letter store, oldest first.

        Args:
            db: The Redis client.
            start: Index of the first dead letter (negative counts from the newest).
            count: Most dead letters to return.
            preview_bytes: Return at most this many bytes of each dead letter's data (its
                ``size`` is still the whole length), so that a page of large dead letters costs
                little to read; None returns the whole data. Read one whole with
                :meth:`item_data` (``dead=True``).

        Raises:
            InvalidArgumentError: A page argument or ``preview_bytes`` is out of range.
        """
        return run(db, self.ops.dead_letters(start, count, preview_bytes))

    def dead_count(self, db: SyncClient) -> int:
        """How many items are in the dead-letter store."""
        return run(db, self.ops.length(self.keys.dead, "ZCARD"))

    def requeue_dead(
        self,
        db: SyncClient,
        ids: Iterable[str] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Put dead letters back on the main queue, with their delivery counts reset.

        Args:
            db: The Redis client.
            ids: The dead letters to requeue; None requeues all of them (in chunks).
            progress: Called with the number requeued so far after each chunk.

        Returns:
            How many were requeued. A dead letter whose id is used by a live item again stays
            dead.

        Raises:
            InvalidArgumentError: ``ids`` is one str (pass ``[id]``), or an id is not a str that
                can name an item (every id is checked before anything is sent).
        """
        return run(db, self.ops.requeue_dead(ids, progress))

    def purge_dead(self, db: SyncClient, ids: Iterable[str] | None = None) -> int:
        """Delete dead letters for good (all of them when ``ids`` is None); returns how many.

        Raises:
            InvalidArgumentError: As for :meth:`requeue_dead`.
        """
        return run(db, self.ops.purge_dead(ids))

    # Inspection -------------------------------------------------------------------------------

    def stats(
        self, db: SyncClient, groups: Iterable[str] | None = None, top_groups: int = 0
    ) -> results.QueueStats:
        """Queued, leased, expired-awaiting-clean, delayed and dead counts.

        The processing list is checked in chunks of 2000 entries, so the counts are not one
        atomic snapshot of a busy queue.

        Args:
            db: The Redis client.
            groups: Names of groups whose counts to read as well (at most 1000): each one's
                ready and in-flight items and whether it is paused, in ``groups`` of the
                result.
            top_groups: How many of the groups with the most items waiting to read the counts
                of as well (0 to 1000), in ``top_groups`` of the result, most first: a bounded
                read of the ranking the adds and leases keep, never a scan of the groups.

        Raises:
            InvalidArgumentError: A name of ``groups`` is not a valid group name, or there
                are more than 1000; ``top_groups`` is out of range (or not an int); or groups
                are asked for on a sharded queue.
        """
        return run(db, self.ops.stats(groups, top_groups))

    def counts(self, db: SyncClient) -> results.QueueCounts:
        """The queue's counters: items added, completed, failed, retried, dead, expired, requeued.

        The scripts keep them in Redis (``<prefix>:counts``), counting from the queue's first
        write or its last flush, so any process can read them (one HGETALL).
        """
        return run(db, self.ops.counts())

    def peek(
        self,
        db: SyncClient,
        start: int = 0,
        count: int = 10,
        preview_bytes: int | None = None,
    ) -> list[results.QueuedItem]:
        """Look at queued items without taking them.

        Args:
            db: The Redis client.
            start: Position of the first item: 0 is the next to be leased; negative positions
                count from the newest (-1 is the last one added).
            count: Most items to return.
            preview_bytes: Return at most this many bytes of each item's data (Redis reads no
                more of it: ``GETRANGE``), with the whole length in ``size``; 0 returns sizes
                only; None returns the whole data. Read one whole with :meth:`item_data`.

        Returns:
            The items in leasing order, each with its position.

        Raises:
            InvalidArgumentError: A page argument or ``preview_bytes`` is out of range.
        """
        return run(db, self.ops.peek(start, count, preview_bytes))

    def item_data(self, db: SyncClient, item_id: str, dead: bool = False) -> bytes | None:
        """The whole data of one item, waiting or leased (one read, nothing else).

        With listings that return previews (:meth:`peek`, :meth:`dead_letters` with
        ``preview_bytes``), the way to fetch one item's data when it is wanted.

        Args:
            db: The Redis client.
            item_id: The item's id.
            dead: Read the data of the dead letter ``item_id`` instead (a dead letter's id may
                be in use by a live item again).

        Returns:
            The data, or None when there is no such item (or dead letter).

        Raises:
            InvalidArgumentError: ``item_id`` is not a str.
        """
        return run(db, self.ops.item_data(item_id, dead))

    def pending(self, db: SyncClient, start: int = 0, count: int = 10) -> list[results.PendingItem]:
        """Look at the processing list: leased items, their delivery counts and leases.

        Args:
            db: The Redis client.
            start: 0 is the oldest lease; negative positions count from the newest.
            count: Most entries to return.
        """
        return run(db, self.ops.pending(start, count))

    def delayed(
        self,
        db: SyncClient,
        start: int = 0,
        count: int = 10,
        preview_bytes: int | None = None,
    ) -> list[DelayedItem]:
        """Look at the delayed items (held back until a due time), soonest due first.

        Args:
            db: The Redis client.
            start: Position of the first item: 0 is the one due soonest; negative positions
                count from the one due last (-1).
            count: Most items to return.
            preview_bytes: As for :meth:`peek`: at most this many bytes of each item's data
                (with the whole length in ``size``); None returns the whole data.

        Returns:
            The items in due order, each with its position and due time.

        Raises:
            InvalidArgumentError: A page argument or ``preview_bytes`` is out of range.
        """
        return run(db, listing.delayed(self.keys, start, count, preview_bytes))

    def flush(
        self, db: SyncClient, progress: Callable[[int], None] | None = None
    ) -> results.FlushReport:
        """Delete every key of this queue: items, leases, lists, dead letters, bookkeeping.

        Works in chunks (SCAN with the prefix glob-escaped, then UNLINK), so flushing queue
        ``a*`` never touches queue ``ab``. Workers still running may add keys back.

        Args:
            db: The Redis client.
            progress: Called with the number of keys deleted so far after each chunk.
        """
        return run(db, self.ops.flush(progress))

    # Counting ---------------------------------------------------------------------------------

    def queue_len(self, db: SyncClient) -> int:
        """The number of ids in the main queue (leased items are not counted)."""
        return run(db, self.ops.length(self.keys.queue))

    def processing(self, db: SyncClient) -> int:
        """The number of ids in the processing list.

        It counts leased items, items whose lease expired but that no clean has requeued yet,
        and entries of completed items that no light clean has dropped yet (a completion leaves
        an entry found near neither end of the list for the clean): :meth:`stats` tells them
        apart.
        """
        return run(db, self.ops.length(self.keys.processing))

    # Job control by id ------------------------------------------------------------------------

    def state(self, db: SyncClient, item_id: str) -> ItemState:
        """Where one item is: queued, delayed, leased, expired, dead, completed or gone.

        One script call, of bounded cost whatever the queue's length (the docs' page on job
        control says what each state costs).

        Args:
            db: The Redis client.
            item_id: The item's id.

        Returns:
            Its state, delivery count, lease, due time and last failure's reason.

        Raises:
            InvalidArgumentError: ``item_id`` is not a str.
        """
        return run(db, jobs.state(self.ops, item_id))

    def states(self, db: SyncClient, ids: Iterable[str]) -> list[ItemState]:
        """The state of each of ``ids``, in their order (one script call per 500 ids).

        Args:
            db: The Redis client.
            ids: The items' ids.

        Raises:
            InvalidArgumentError: ``ids`` is not a list of str (checked before any call).
        """
        return run(db, jobs.states(self.ops, ids))

    # Schedules (see docs/schedules.md) ---------------------------------------------------------

    def schedule(
        self,
        db: SyncClient,
        name: str,
        *,
        cron: str | None = None,
        every: float | None = None,
        tz: str = "UTC",
        data: bytes | str = b"",
        start: datetime | float | None = None,
        end: datetime | float | None = None,
        catch_up: schedule_ops.CatchUp = "one",
        overlap: schedule_ops.Overlap = "add",
    ) -> bool:
        """Create or replace a schedule: items added on a cron expression or at a fixed interval.

        Each occurrence is an ordinary item of the queue, added exactly once however many
        schedulers run (the workers run them; see :meth:`run_schedules`), with the id
        ``<name>@<due time in UTC>`` (``nightly@2026-11-27T01:00:00.000Z``). Declaring the same
        schedule again (as every worker may at start) changes nothing, so its due times, and
        the catch-up after downtime, are kept; a changed one replaces it atomically (a paused
        schedule stays paused).

        Args:
            db: The Redis client.
            name: The schedule's name (1 to 200 characters, without ``@``).
            cron: A cron expression of five fields (minute hour day-of-month month
                day-of-week), or six with a seconds field first, read in ``tz``.
            every: Instead of ``cron``: an interval in seconds (at least 0.1); occurrences fall
                on ``start`` plus whole intervals (the Unix epoch without ``start``).
            tz: The IANA time zone of the cron expression (``"Europe/Paris"``).
            data: The data of each occurrence.
            start: No occurrence is due before this: an aware datetime or seconds since the
                epoch.
            end: No occurrence is due after this.
            catch_up: For due times that passed while no scheduler ran: ``"none"`` skips them,
                ``"one"`` adds one occurrence (for the latest), ``"all"`` adds one each (the
                latest 100).
            overlap: ``"skip"``: add no occurrence while the last one added is still queued,
                delayed or leased; ``"add"`` (the default) adds regardless.

        Returns:
            True when the schedule was created or changed; False when it existed as given.

        Raises:
            InvalidArgumentError: An argument is invalid (a bad cron field, an unknown zone,
                both or neither of ``cron`` and ``every``, ``end`` before ``start``, a name
                holding ``@``); nothing is written.
            MissingExtraError: A cron schedule needs the ``schedules`` extra.
            WrongKeyTypeError: A key of the queue holds the wrong Redis type.
        """
        name = schedule_ops.check_name(name)  # the name is checked before the definition
        spec = schedule_ops.Spec.of(cron, every, tz, start, end, catch_up, overlap)
        return run(db, schedule_ops.schedule_steps(self.keys, name, spec, data))

    def schedules(self, db: SyncClient) -> list[schedule_ops.Schedule]:
        """The queue's schedules (paused ones first, then by next due time), read in pages."""
        return run(db, schedule_ops.list_steps(self.keys))

    def pause_schedule(self, db: SyncClient, name: str) -> bool:
        """Pause a schedule: no occurrence is added until it is resumed. True when it ran."""
        return run(db, schedule_ops.pause_steps(self.keys, name))

    def resume_schedule(self, db: SyncClient, name: str) -> bool:
        """Resume a paused schedule from its next due time after now; True when it was paused.

        The due times that passed while it was paused are skipped.
        """
        return run(db, schedule_ops.resume_steps(self.keys, name))

    def remove_schedule(self, db: SyncClient, name: str) -> bool:
        """Remove a schedule (the occurrences it added stay). True when it existed."""
        return run(db, schedule_ops.remove_steps(self.keys, name))

    def run_schedules(self, db: SyncClient, limit: int = schedule_ops.DUE_LIMIT) -> list[str]:
        """Add the occurrences of the schedules that are due, by the server's clock.

        The worker runners call it in their housekeeping (``rwq scheduler`` runs it alone); any
        number of callers may race: each occurrence is added once.

        Args:
            db: The Redis client.
            limit: The most due schedules taken in this call (the rest are taken by the next).

        Returns:
            The ids of the occurrences added, oldest first for each schedule.
        """
        return run(db, schedule_ops.run_steps(self.keys, limit))

    def cancel(self, db: SyncClient, item_id: str) -> Cancelled:
        """Cancel one item by id, in one script call.

        A queued or delayed item is removed at once, with its data and bookkeeping. A leased
        item's data goes too, and its lease is marked: its holder's next renewal reports the
        cancellation (:meth:`renew_outcome` returns ``Renewed.CANCELLED``), and the worker runner
        then stops the handler as it stops one past its timeout. Either way no client, of this
        library or of the reference design, hands the item out again. Counted as ``cancelled``
        in :meth:`counts`.

        Args:
            db: The Redis client.
            item_id: The item's id.

        Returns:
            ``Cancelled.REMOVED`` (it was waiting), ``Cancelled.SIGNALLED`` (it was leased) or
            ``Cancelled.NOT_FOUND`` (dead, done or never added: nothing changed), which is
            false.

        Raises:
            InvalidArgumentError: ``item_id`` is not a str.
        """
        return run(db, jobs.cancel(self.ops, item_id))

    def promote(self, db: SyncClient, item_id: str) -> bool:
        """Make a delayed item due now: it is the next to be leased.

        Args:
            db: The Redis client.
            item_id: The item's id.

        Returns:
            True when it was delayed; False (nothing changed) otherwise.

        Raises:
            InvalidArgumentError: ``item_id`` is not a str.
        """
        return run(db, jobs.promote(self.ops, item_id))

    def retry(self, db: SyncClient, item_id: str) -> bool:
        """Put one dead letter back on the queue, its count reset (``requeue_dead`` of one id).

        Args:
            db: The Redis client.
            item_id: The dead letter's id.

        Returns:
            True when it was a dead letter and is queued again; False when it is not a dead
            letter, or its id is in use by a live item again (it stays dead).

        Raises:
            InvalidArgumentError: ``item_id`` is not a str.
        """
        return run(db, jobs.retry(self.ops, item_id))

    def reschedule(self, db: SyncClient, item_id: str, delay: float | datetime) -> bool:
        """Give a queued or delayed item a new due time.

        Args:
            db: The Redis client.
            item_id: The item's id.
            delay: Seconds from now (>= 0), or a timezone-aware ``datetime``.

        Returns:
            True when it was queued or delayed (it is now delayed until then); False when it is
            leased, dead or gone (nothing changed).

        Raises:
            InvalidArgumentError: ``item_id`` is not a str, or ``delay`` is negative, not a
                number or a naive datetime.
        """
        return run(db, jobs.reschedule(self.ops, item_id, delay))

    def renew_outcome(self, db: SyncClient, item: Item, lease_secs: float) -> Renewed:
        """Extend a held lease (as :meth:`renew`) and say what happened.

        Args:
            db: The Redis client.
            item: The leased item.
            lease_secs: The new lease length, from now.

        Returns:
            ``Renewed.RENEWED`` (true), ``Renewed.NOT_HELD`` (the lease ran out or another
            worker holds the item) or ``Renewed.CANCELLED``: the item was cancelled while held
            (see :meth:`cancel`); stop working on it. Both are false.

        Raises:
            InvalidArgumentError: ``item`` was not leased by this library, or ``lease_secs`` is
                not positive.
        """
        return run(db, jobs.renew_outcome(self.ops, item, lease_secs))

    def result(self, db: SyncClient, item_id: str, timeout: float | None = None) -> bytes:
        """The kept result of an item, waiting for its completion if need be.

        The wait is a blocking read of the key the completing script writes (no polling): the
        caller wakes as the item is completed. It needs a queue made with ``keep_results``.

        Args:
            db: The Redis client.
            item_id: The item's id.
            timeout: The longest wait, in seconds; 0 does not wait; None (the default) waits
                for ever.

        Returns:
            The result (bytes; empty when the item was completed without one).

        Raises:
            ItemDeadError: The item is in the dead letters: no result will come.
            ResultTimeoutError: No result came in time (its ``state`` says where the item is).
            InvalidArgumentError: ``item_id`` is not a str, or ``timeout`` is negative.
        """
        return run(db, jobs.result(self.ops, item_id, timeout))

    def report_progress(self, db: SyncClient, item: Item, progress: object) -> bool:
        """Report a leased item's progress: :meth:`state` shows it while the lease lasts.

        A handler run by the worker runner reports with
        :func:`redis_work_queue.runner.report_progress` instead.

        Args:
            db: The Redis client.
            item: The leased item.
            progress: A number, or a small JSON-able value (at most 4,096 bytes as JSON).

        Returns:
            True when kept; False when the caller does not hold the lease (it ran out, another
            worker holds the item, or it was cancelled). A report renews nothing, and lapses
            with the lease.

        Raises:
            InvalidArgumentError: ``item`` was not leased by this library, or ``progress`` is
                not JSON-able or too long.
        """
        return run(db, jobs.report_progress(self.ops, item, progress))

    # Shards -----------------------------------------------------------------------------------

    def shard_stats(self, db: SyncClient) -> list[ShardStats]:
        """Each shard's counts by state and counters: the per-shard view of :meth:`stats`.

        An unsharded queue has one row, its own. For dashboards and for finding a hot or a
        stuck shard (see :doc:`sharding`).
        """
        return run(db, sharded_ops.shard_stats(self.ops))

    # Flow control -----------------------------------------------------------------------------

    def set_rate_limit(self, db: SyncClient, limit: RateLimit | None) -> None:
        """Set the queue's rate limit for every worker of the fleet, or remove it.

        The limit is kept in Redis (``<prefix>:rate``) and every lease of this library checks
        it, from its next call: at most ``limit.count`` items per ``limit.per_secs`` seconds
        (``limit.burst`` at once). A blocking lease refused by it sleeps until its turn. Other
        clients of the design do not read it.

        Args:
            db: The Redis client.
            limit: The new limit, or None for none (a queue object's declared ``rate_limit``
                is then not stored again either).

        Raises:
            InvalidArgumentError: ``limit`` is not a :class:`RateLimit` or None.
            WrongKeyTypeError: ``<prefix>:rate`` holds the wrong Redis type.
        """
        run(db, flow_ops.set_rate_limit(self.ops, limit))

    def set_group_concurrency(self, db: SyncClient, limit: int | None) -> None:
        """Set the cap on the items of one group in flight for every worker, or remove it.

        The cap is kept in Redis (``<prefix>:groups:state``) and every lease of this library
        checks it: a group at its cap waits off the ring of groups until one of its items is
        completed, released or requeued by a clean.

        Args:
            db: The Redis client.
            limit: The new cap (a positive int), or None for none (a queue object's declared
                ``group_concurrency`` is not sent again).

        Raises:
            InvalidArgumentError: ``limit`` is not a positive int or None, or the queue is
                sharded.
            WrongKeyTypeError: ``<prefix>:groups:state`` holds the wrong Redis type.
        """
        run(db, flow_ops.set_group_concurrency(self.ops, limit))

    def set_group_rate_limit(self, db: SyncClient, group: str, limit: RateLimit | None) -> bool:
        """Set a group's own rate limit for every worker, or remove it (None).

        The limit is kept in Redis (``<prefix>:groups:state``) and every lease of this library
        keeps to it: a group that has handed out as many items as its limit allows waits off
        the ring of groups (the others take their turns) until its pacing clock
        (``<prefix>:groups:paced``) lets it hand out the next. It overrides the limit of every
        group (``group_rate_limit``, :meth:`set_default_group_rate_limit`); removing it brings
        that one back for the group. A group waiting out its old limit comes back to the ring
        at once.

        Args:
            db: The Redis client.
            group: The group's name.
            limit: Its limit (a :class:`RateLimit`: at most ``burst + t * count / per_secs``
                items of the group in any ``t`` seconds), or None for none of its own.

        Returns:
            True unless a removal found no limit of its own.

        Raises:
            InvalidArgumentError: ``group`` is not a valid group name, ``limit`` is not a
                :class:`RateLimit` or None, or the queue is sharded.
            WrongKeyTypeError: A key of the queue's groups holds the wrong Redis type.
        """
        return run(db, flow_ops.set_group_rate_limit(self.ops, group, limit))

    def set_default_group_rate_limit(self, db: SyncClient, limit: RateLimit | None) -> None:
        """Set the rate limit of every group without one of its own, or remove it (None).

        Kept in Redis as :meth:`set_group_rate_limit`'s limits are; each group keeps to it on
        its own clock. A group waiting out the old limit comes back when that one lets it.

        Args:
            db: The Redis client.
            limit: The limit of each group, or None for none (a queue object's declared
                ``group_rate_limit`` is not sent again).

        Raises:
            InvalidArgumentError: ``limit`` is not a :class:`RateLimit` or None, or the queue
                is sharded.
            WrongKeyTypeError: ``<prefix>:groups:state`` holds the wrong Redis type.
        """
        run(db, flow_ops.set_default_group_rate_limit(self.ops, limit))

    def pause_group(self, db: SyncClient, group: str) -> bool:
        """Pause a group: no lease hands out its items until :meth:`resume_group`.

        Its items stay queued on its list and may still be added; those in flight finish as
        usual.

        Args:
            db: The Redis client.
            group: The group's name.

        Returns:
            True when the group was not paused already.

        Raises:
            InvalidArgumentError: ``group`` is not a valid group name, or the queue is sharded.
            WrongKeyTypeError: A key of the queue's groups holds the wrong Redis type.
        """
        return run(db, flow_ops.pause_group(self.ops, group))

    def resume_group(self, db: SyncClient, group: str) -> bool:
        """Resume a group paused by :meth:`pause_group`: it takes its turns again at once.

        Args:
            db: The Redis client.
            group: The group's name.

        Returns:
            True when the group was paused.

        Raises:
            InvalidArgumentError: ``group`` is not a valid group name, or the queue is sharded.
            WrongKeyTypeError: A key of the queue's groups holds the wrong Redis type.
        """
        return run(db, flow_ops.resume_group(self.ops, group))

    def events(
        self, db: SyncClient, since: str = "0", block: float | None = None
    ) -> Iterator[Event]:
        """Iterate over the queue's events (a queue made with ``events=True``), oldest first.

        Each page is one XREAD; with ``block``, a read waits for new entries (a blocking read,
        no polling), at most a few seconds per call.

        Args:
            db: The Redis client.
            since: Start after this :attr:`Event.event_id`; ``"0"`` (the default): from the
                oldest kept event; ``"$"``: only events appended from now on.
            block: When caught up, wait up to this many seconds for a new event before the
                iteration ends (the wait starts again after each event); None (the default):
                end when caught up.

        Yields:
            Each :class:`Event`, in the order the scripts appended them.

        Raises:
            InvalidArgumentError: ``since`` is not an event id, ``"0"`` or ``"$"``, or
                ``block`` is negative.
        """
        feed = events_ops.Feed(self.ops, since, block)
        while (page := feed.page()) is not None:
            yield from run(db, page)


def lease_from(
    db: SyncClient,
    queues: Sequence[WorkQueue],
    lease_secs: float,
    block: bool = True,
    timeout: float = 0,
    at_most_once: bool = False,
) -> tuple[WorkQueue, Item] | None:
    """Lease one item from the first of ``queues`` (highest priority first) that has one.

    All queues are looked at in one script call, so the priority order holds exactly. Blocking,
    the worker wakes for whichever queue gets an item first: the lease script registers the
    worker with the queues, and every push by this library onto a queue with a registered worker
    also pushes a wake-up token that the worker waits for (BLPOP). Tokens carry no items, so a
    worker killed while waiting loses nothing. A push by a client of another implementation
    does not wake the worker: it finds the item at its next look, within a second (a blocking
    wait lasts at most ``WAIT_SLICE_SECS``).

    On Redis Cluster, queues whose prefixes do not share a ``{hash tag}`` cannot be looked at in
    one call: then each is tried in turn, in priority order, and a blocked worker waits on the
    first queue for at most ``FALLBACK_SLICE`` seconds at a time before looking at the others.

    Raises:
        InvalidArgumentError: No queues, or an argument out of range.
    """
    steps = lease_ops.lease_from(
        ops_of(queues, "lease_from"), lease_secs, block, timeout, at_most_once
    )
    found = run(db, steps)
    return None if found is None else (queues[found[0]], found[1])


def complete_and_lease_from(
    db: SyncClient,
    queue: WorkQueue,
    item: Item,
    queues: Sequence[WorkQueue],
    lease_secs: float,
) -> tuple[bool, tuple[WorkQueue, Item] | None]:
    """Complete ``item`` of ``queue``, then lease the next item from ``queues``, in one call.

    What a worker does between two jobs, in one round trip and one script call: the
    completion is :meth:`WorkQueue.complete`'s, the lease is :func:`lease_from`'s with
    ``block=False`` (it never waits). The item is completed before anything is leased, and
    stays completed when the lease part fails.

    It takes one script call when ``queue`` is one of ``queues`` (the same key prefix), the
    queues can be leased from together (on Redis Cluster: they share a ``{hash tag}``) and
    ``queue`` waits for no replicas; otherwise it completes, then leases, in two calls.

    Args:
        db: The Redis client.
        queue: The queue of the item to complete.
        item: The item to complete.
        queues: The queues to lease from, highest priority first.
        lease_secs: The length of the new lease, in seconds.

    Returns:
        Whether this call completed the item (as :meth:`WorkQueue.complete` returns), and the
        (queue, item) leased, or None when the queues had nothing to lease.

    Raises:
        InvalidArgumentError: No queues, ``item`` is not an :class:`Item` or ``lease_secs``
            is out of range; nothing was changed.
    """
    what = "complete_and_lease_from"
    steps = lease_ops.complete_and_lease_from(
        ops_of_one(queue, what), item, ops_of(queues, what), lease_secs
    )
    done, found = run(db, steps)
    return done, None if found is None else (queues[found[0]], found[1])
