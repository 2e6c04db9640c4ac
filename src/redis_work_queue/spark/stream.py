"""Streaming read: a Spark query as a fleet of workers of one queue, at least once end to end.

Design
======

**Offsets name leases.** Each micro-batch is one lease of up to ``maxItemsPerBatch`` items,
taken for ``leaseSeconds``. Its offset names the queue, the batch (a fresh UUIDv7 hex) and its
item count (see below); the initial offset names no batch. Offsets stay small: the ids, lease values
(``Item.lease_token``) and delivery counts of a batch are kept beside the queue, in the string
``<queue>:spark:batch:<batch>`` (JSON, kept for a week), and in the memory of the driver.

**Leasing happens on the driver,** in ``latestOffset``: Spark writes the offset it returns to the
checkpoint's offset log before it plans the batch. A lease is then only ever taken for a batch
that Spark knows of, or for none at all when the driver dies in between (those leases expire).
A batch is at most ``maxItemsPerBatch`` items (``getDefaultReadLimit``: Spark's admission
control, which may ask for fewer), and leasing stops once it holds ``maxBytesPerBatch`` of data.
``partitions(start, end)`` splits the batch's ids over ``numPartitions`` tasks. The driver has
the items' data from the lease: a batch of up to 64 MB of data travels with its partitions, column
by column (with the items' failure reasons, read by the driver in at most two round trips, when
the read asks for them); a bigger one is read by the tasks in pages (one read-only script call
per page, ``lua/snapshot.lua``). Every task emits Arrow record batches. A batch that Spark
replays after a restart from its checkpoint is read from its record in Redis: it yields the same
items (less any completed since).

**Offsets say something:** ``{"queue", "batch", "items", "leased"}``, the last the items the
query has leased so far. ``reportLatestOffset`` gives Spark's progress the queue's backlog:
queued, leased, delayed and dead items, the items the query holds, and the age of the oldest
queued item when its id is one this library made.

**Completing is commit, and commit is checked.** A batch's items are completed only after Spark
has recorded the batch in the checkpoint's commit log, that is after the sink has written it:
Spark asks for the next offset (``latestOffset(start)``, where ``start`` is the end of the batch
just written) and commits the previous batch (``commit(end)``) only then, so both complete the
batch named by the offset they are given. The completion (``lua/complete_held.lua``) removes an
item only while its lease is still the one the batch took: completing twice, or late, never
removes an item that another worker leased since, nor one added again under the same id. A
batch this driver leased is completed by a background thread, beside the next batch's lease and
Spark's work on it; one batch at a time is completed so, and the first call from Spark after a
failed completion raises its error, so the query fails. The offset of the batch leased beside
the completion names the batch being completed (``completing``), so a restart from either offset
completes that batch from its record, if the completion did not end.

**Leases are renewed** by a thread of the driver's reader every ``renewSeconds`` (a third of the
lease), from the moment they are taken until their batch is completed, so a slow batch keeps its
items, however long it runs, for as long as the driver lives.

**Failures lose nothing.** A query that dies mid-batch stops renewing; its leases expire after
at most ``leaseSeconds``. When Spark stops the source, the reader gives the items of every batch
not yet committed back at once, to the leasing end of the queue and without counting the
delivery (``WorkQueue.give_back``), and marks the batches' records as given back. Spark calls
``stop()`` when the query ends or fails in the source; on ``query.stop()`` it ends the source's
process (the driver-side Python process that runs ``latestOffset`` and the rest) with SIGTERM
instead, without calling ``stop()``, so that process's SIGTERM handler does the same before it
exits (within :data:`GIVE_BACK_SECS`). Restarted from its checkpoint, Spark replays the
uncommitted batch: the reader renews the leases it still holds and leases given-back items again
(they are first in line), so the same items are emitted, and completed once the sink has written
them. A batch the sink had written before the stop, which Spark had not yet committed to the
source (it does so at the next trigger), is taken back the same way and completed at restart.
Not restarted, a light clean (run by every streaming read every ``cleanSeconds``, or by ``rwq
light-clean``) requeues expired leases for any other worker. An item is therefore written to the
sink at least once; it is written twice when a batch is interrupted between the sink's write and
Spark's commit log entry, when the lease expired before the commit (a driver that was down
longer than ``leaseSeconds``), or when another worker took a given-back item before the replay.

Spark 4.0 and 4.1 call ``latestOffset()`` without a start: the reader then uses the offset it
returned last (after a restart, the first call returns an empty batch so that Spark commits the
last batch of the checkpoint). With ``Trigger.AvailableNow`` (Spark 4.2 and later) the query
leases at most as many items as were queued when it started, and completes its last batch before
it ends. ``Trigger.Once`` never commits its batch, so the query fails at its first batch, saying
to use ``availableNow``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from ..errors import InvalidArgumentError
from ..item import Item, new_id
from ..ops.spark import complete_held, snapshot_page
from ..senders import raw_command
from ..transport import run
from .calls import connect
from .options import KEEP_SECS, Configured, StreamOptions, batch_key
from .reader import Rows

try:  # Spark 4.2 and later
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - older Spark has no read limits for Python sources
    SupportsTriggerAvailableNow = object  # type: ignore[assignment,misc]
    ReadAllAvailable = ReadMaxRows = None  # type: ignore[assignment,misc]

logger = logging.getLogger(__name__)

#: Leases renewed or given back per round trip.
RENEW_CHUNK = 1000
#: Completed batches remembered, so that a second commit of one is skipped.
DONE_MEMORY = 1024
#: A batch whose data comes to at most this many bytes travels with its tasks' partitions (the
#: driver has it from the lease); a bigger one, or a replayed one, is read again by the tasks.
INLINE_BYTES = 64 << 20
#: Rows per Arrow record batch of a batch whose data travels with its partitions.
ARROW_ROWS = 10_000
#: Items leased per round trip while a batch is filled (fewer once ``maxBytesPerBatch`` nears).
LEASE_STEP = 5000

#: The module Spark runs a Python streaming source's driver side in (``python -m ...``).
SOURCE_PROCESS = "pyspark.sql.streaming.python_streaming_source_runner"
#: Seconds the source's process may spend giving its items back once Spark has ended it.
GIVE_BACK_SECS = 10

#: One leased item of a batch: id, lease value, delivery count.
Held = tuple[str, str, int]


class LeasedPartition(InputPartition):
    """Items of one micro-batch for one task, column by column.

    Args:
        batch: The batch.
        ids: The items' ids.
        deliveries: Their delivery counts, in the same order.
        data: Their data, when it travels with the partition.
        reasons: Their last failure reasons, when they travel with it (a read that asks for the
            ``reason`` column).
    """

    def __init__(
        self,
        batch: str,
        ids: list[str],
        deliveries: list[int],
        data: list[bytes] | None = None,
        reasons: list[str | None] | None = None,
    ) -> None:
        super().__init__(batch)
        self.batch = batch
        self.ids = ids
        self.deliveries = deliveries
        self.data = data
        self.reasons = reasons


def uuid7_age(item_id: str, now: float) -> float | None:
    """Seconds since the UUIDv7 ``item_id`` (a fresh id of this library) was made, else None."""
    if len(item_id) != 32 or item_id[12] != "7":
        return None
    try:
        made = int(item_id[:12], 16) / 1000
    except ValueError:
        return None
    return max(0.0, round(now - made, 3))


class Lessee:
    """The driver's side of a streaming read: leases, records, renews and completes batches.

    Args:
        options: The stream options.
        with_reasons: Whether the read asks for the ``reason`` column.
    """

    def __init__(self, options: StreamOptions, with_reasons: bool = True) -> None:
        self.options = options
        #: Whether the read asks for the ``reason`` column (it travels with the data).
        self.with_reasons = with_reasons
        self.queue = options.where.work_queue()
        self.db = connect(options.where)
        self.lock = threading.Lock()
        #: The items of each batch not yet completed.
        self.batches: dict[str, list[Held]] = {}
        #: The leases still held, per batch: id -> lease value. Renewed until completed.
        self.held: dict[str, dict[str, str]] = {}
        #: The data of the batches leased by this driver and not planned yet.
        self.data: dict[str, list[bytes]] = {}
        #: Batches completed, or being completed.
        self.done: OrderedDict[str, None] = OrderedDict()
        #: The thread completing a batch, and what it raised (see :meth:`finish`).
        self.completing: threading.Thread | None = None
        self.completion_failed: BaseException | None = None
        #: The offset returned last (for Spark versions that call latestOffset without start).
        self.last: dict[str, Any] | None = None
        #: With Trigger.AvailableNow: how many items may still be leased.
        self.remaining: int | None = None
        self.next_clean = 0.0
        self.stopping = threading.Event()
        #: Set when Spark ends the source's process (SIGTERM): give back, then exit.
        self.terminated = threading.Event()
        #: Set by the first SIGTERM's handler, before it takes any lock.
        self.terminating = False
        self.closing = threading.Lock()
        self.closed = False
        self.renewer = threading.Thread(
            target=self._renew_loop, name=f"renew leases of {options.where.queue}", daemon=True
        )
        self.renewer.start()
        if in_source_process():
            signal.signal(signal.SIGTERM, self._on_terminate)

    # Offsets ----------------------------------------------------------------------------------

    def initial(self) -> dict[str, Any]:
        """The offset before the first batch: no batch, nothing leased yet."""
        return {"queue": self.options.where.queue, "batch": "", "items": 0, "leased": 0}

    def latest(self, start: dict[str, Any] | None, limit: object) -> dict[str, Any]:
        """Complete the batch that ends at ``start``, then lease the next one.

        Args:
            start: The end of the last batch Spark has written (None: Spark did not say).
            limit: Spark's read limit: at most ``max_rows`` items (``maxItemsPerBatch`` by
                default); everything queued with ``Trigger.AvailableNow``.

        Returns:
            The new batch's offset (the queue, the batch, its item count and the items leased
            by the query so far), or ``start`` when there is nothing to lease.

        Raises:
            InvalidArgumentError: The query runs with ``Trigger.Once``, whose last batch is
                never committed.
        """
        if self.completing is not None and not self.completing.is_alive():
            self.settle()  # raises what the completion of the last batch raised
        if start is None:
            start = self.last
        behind = self.finish(start) if start is not None else None
        self._clean()
        items = self._lease(self._allowance(limit))
        so_far = int((start or {}).get("leased", 0))
        if items:
            offset = self._record(items)
            offset["leased"] = so_far + len(items)
            if behind:
                # Should that completion fail, the query fails at Spark's next call, and a
                # restart from this offset completes that batch from its record.
                offset["completing"] = behind
            self.last = offset
            return offset
        # Nothing to lease, nothing to overlap: wait for the completion, so that a failure
        # fails the query now (with availableNow, this is its last call).
        self.settle()
        offset = {**self.initial(), "batch": new_id()} if start is None else start
        self.last = offset
        return offset

    def _allowance(self, limit: object) -> int:
        if ReadAllAvailable is not None and isinstance(limit, ReadAllAvailable):
            if self.remaining is None:
                raise InvalidArgumentError(
                    "a streaming read of a queue cannot run with trigger(once=True): Spark "
                    "never commits its batch, so its items would be delivered again; use "
                    "trigger(availableNow=True), which drains what is queued and then ends"
                )
            return self.remaining
        count = self.options.max_items
        max_rows = getattr(limit, "max_rows", None)
        if isinstance(max_rows, int) and max_rows > 0:
            count = max_rows
        if self.remaining is not None:
            count = min(count, self.remaining)
        return count

    def _lease(self, count: int) -> list[Item]:
        """Lease up to ``count`` items, and up to about ``maxBytesPerBatch`` of data.

        Leases in steps that double from one item up to :data:`LEASE_STEP`, each also cut to
        what the mean size of the items leased so far leaves room for: a batch of items of
        like sizes overshoots the byte limit by about one item, one whose items grow much
        larger part-way by up to one step.
        """
        items: list[Item] = []
        size = 0
        max_bytes = self.options.max_bytes
        while len(items) < count and size < max_bytes:
            step = min(count - len(items), LEASE_STEP, max(1, len(items)))
            if items:
                mean = max(1, size // len(items))
                step = max(1, min(step, (max_bytes - size) // mean))
            got = self.queue.lease_many(self.db, self.options.lease_secs, step, block=False)
            if not got:
                break
            items += got
            size += sum(len(item.data()) for item in got)
        if self.remaining is not None:
            self.remaining -= len(items)
        return items

    def _record(self, items: list[Item]) -> dict[str, Any]:
        batch = new_id()
        held: list[Held] = [(i.id(), i.lease_token or "", i.deliveries) for i in items]
        with self.lock:
            self.batches[batch] = held
            self.held[batch] = {item_id: token for item_id, token, _ in held}
            data = [i.data() for i in items]
            if sum(map(len, data)) <= INLINE_BYTES:
                self.data[batch] = data
        self._save(batch, held)
        logger.debug("leased %d items of %s for batch %s", len(held), self.queue.name.prefix, batch)
        return {"queue": self.options.where.queue, "batch": batch, "items": len(held)}

    def _save(self, batch: str, held: list[Held], given_back: bool = False) -> None:
        # A list of [id, lease value, deliveries]; an object when a stop gave the items back.
        kept: Any = {"held": held, "given_back": True} if given_back else held
        record = json.dumps(kept, separators=(",", ":"))
        raw_command(
            self.db, "SET", batch_key(self.options.where.queue, batch), record, "EX", KEEP_SECS
        )

    def _load(self, batch: str) -> tuple[list[Held], bool] | None:
        """The batch's record: its items, and whether a stop gave them back; None if gone."""
        raw = raw_command(self.db, "GET", batch_key(self.options.where.queue, batch))
        if raw is None:
            return None
        record = json.loads(raw)
        given_back = isinstance(record, dict)
        items = record["held"] if given_back else record
        return [(str(i), str(t), int(n)) for i, t, n in items], given_back

    def _clean(self) -> None:
        if self.options.clean_secs <= 0 or time.monotonic() < self.next_clean:
            return
        self.next_clean = time.monotonic() + self.options.clean_secs
        self.queue.light_clean(self.db)

    def backlog(self) -> dict[str, Any]:
        """The queue's backlog, for Spark's progress reports (``latestOffset`` of the source).

        ``queued`` (less a wake-up entry), ``leased`` (the processing list: leases held, and
        expired ones awaiting a light clean), ``delayed`` and ``dead`` items; ``in_batches``,
        the items this query holds; and, when the oldest queued item has an id this library
        made (a UUIDv7), ``oldest_queued_secs``, its age.
        """
        keys = self.queue.keys
        pipe = self.db.pipeline(transaction=False)
        pipe.llen(keys.queue)
        pipe.llen(keys.processing)
        pipe.zcard(keys.delayed)
        pipe.zcard(keys.dead)
        pipe.lindex(keys.queue, -1)
        pipe.lindex(keys.queue, -2)
        pipe.exists(keys.item(""))
        queued, leased, delayed, dead, oldest, second, empty_item = pipe.execute()
        if oldest == b"" and not empty_item:  # a wake-up entry, no item: passed over
            queued, oldest = int(queued) - 1, second
        with self.lock:
            in_batches = sum(len(held) for held in self.held.values())
        report: dict[str, Any] = {
            "queue": self.options.where.queue,
            "queued": int(queued),
            "leased": int(leased),
            "delayed": int(delayed),
            "dead": int(dead),
            "in_batches": in_batches,
        }
        if oldest is not None:
            age = uuid7_age(bytes(oldest).decode("utf-8", "replace"), time.time())
            if age is not None:
                report["oldest_queued_secs"] = age
        return report

    # Planning ---------------------------------------------------------------------------------

    def plan(self, start: dict[str, Any], end: dict[str, Any]) -> list[LeasedPartition]:
        """The tasks of the batch that ends at ``end`` (it may be a replay after a restart).

        The batch that ends at ``start`` has been written by then, and is completed first.
        """
        self.finish(start)
        batch = str(end.get("batch") or "")
        if not batch or not end.get("items"):
            return []
        self.last = end
        with self.lock:
            held = self.batches.get(batch)
            data = self.data.pop(batch, None)
        if held is None:
            record = self._load(batch)
            if record is None:
                logger.warning(
                    "the record of batch %s of %s is gone: the batch is empty (its items, if "
                    "any are left, are delivered again when their leases expire)",
                    batch,
                    self.queue.name.prefix,
                )
                return []
            held = record[0]
            logger.info(
                "replaying batch %s of %s (%d items)", batch, self.queue.name.prefix, len(held)
            )
            held = self._take_back(batch, held)
            with self.lock:
                self.batches[batch] = held
                self.held[batch] = {item_id: token for item_id, token, _ in held}
        if not held:
            return []
        ids = [item_id for item_id, _, _ in held]
        counts = [n for _, _, n in held]
        reasons = self._reasons(ids) if data is not None and self.with_reasons else None
        tasks = max(1, min(self.options.partitions, len(held)))
        size = -(-len(held) // tasks)
        return [
            LeasedPartition(
                batch,
                ids[i : i + size],
                counts[i : i + size],
                None if data is None else data[i : i + size],
                None if reasons is None else reasons[i : i + size],
            )
            for i in range(0, len(held), size)
        ]

    def _reasons(self, ids: list[str]) -> list[str | None]:
        """The last failure reason of each of ``ids`` (None where there is none)."""
        key = self.queue.keys.reasons
        if not raw_command(self.db, "HLEN", key):
            return [None] * len(ids)  # no item of the queue has failed
        pipe = self.db.pipeline(transaction=False)
        for i in range(0, len(ids), RENEW_CHUNK):
            pipe.hmget(key, ids[i : i + RENEW_CHUNK])
        found = [reason for page in pipe.execute() for reason in page]
        return [
            None if r is None else r if isinstance(r, str) else bytes(r).decode("utf-8", "replace")
            for r in found
        ]

    def _take_back(self, batch: str, held: list[Held]) -> list[Held]:
        """Hold the leases of a replayed batch again: renew those still held, lease the others.

        A clean stop gave the batch's items back to the leasing end of the queue, so leasing
        as many items as were lost takes those very items back in the common case. Items
        leased that are not the batch's are given back at once; items of the batch that
        another worker took meanwhile (or that are gone) are left out of the replay.
        """
        lease = self.options.lease_secs
        flags = self.queue.renew_many(
            self.db, [Item.handed_out(i, b"", n, t) for i, t, n in held], lease
        )
        lost = {item_id for (item_id, _, _), ok in zip(held, flags, strict=True) if not ok}
        if not lost:
            return held
        got = self.queue.lease_many(self.db, lease, len(lost), block=False)
        ours = {item.id(): item for item in got if item.id() in lost}
        others = [item for item in got if item.id() not in lost]
        if others:
            self.queue.give_back(self.db, others)
        kept: list[Held] = []
        for item_id, token, n in held:
            if item_id not in lost:
                kept.append((item_id, token, n))
            elif item_id in ours:
                again = ours[item_id]
                kept.append((item_id, again.lease_token or "", again.deliveries))
        if len(kept) < len(held):
            logger.warning(
                "batch %s of %s: %d of its %d items are no longer the query's (another worker "
                "has them, or they are gone); the replay leaves them out",
                batch,
                self.queue.name.prefix,
                len(held) - len(kept),
                len(held),
            )
        self._save(batch, kept)
        return kept

    # Completing -------------------------------------------------------------------------------

    def finish(self, offset: dict[str, Any]) -> str | None:
        """Complete the items of the batch named by ``offset`` that it still holds.

        A batch this driver leased is completed by a background thread, so that its round trips
        overlap the next batch's lease and Spark's work on it; :meth:`settle` waits for it and
        raises what it raised (the next completion settles first, and :meth:`latest` settles a
        finished one). The offset of the batch leased meanwhile names the batch being completed
        (``completing``): a restart from that offset completes that batch too, from its record,
        when the completion did not end. A batch known only from its record (a restart) is
        completed before this returns: it may have to take given-back items back first, ahead
        of the next lease.

        Returns:
            The batch being completed in the background, if any.
        """
        behind = str(offset.get("completing") or "")
        if behind and behind not in self.done:
            self._remember(behind)  # a restart: its completion may not have ended
            self._complete(behind, None, True)
        batch = str(offset.get("batch") or "")
        if not batch or batch in self.done:
            return None
        self.settle()
        with self.closing:
            if self.closed:
                # Stopping: the items were given back, and the record marked so; a restart
                # takes them back and completes them.
                return None
            with self.lock:
                held = self.batches.pop(batch, None)
                self.held.pop(batch, None)
                self.data.pop(batch, None)
            self._remember(batch)
            if held is None:
                self._complete(batch, None, bool(offset.get("items")))
                return None
            self.completing = threading.Thread(
                target=self._complete_in_background,
                args=(batch, held),
                name=f"complete a batch of {self.options.where.queue}",
                daemon=True,
            )
            self.completing.start()
        return batch

    def settle(self) -> None:
        """Wait for the batch being completed in the background; raise what that raised."""
        completing, self.completing = self.completing, None
        if completing is not None:
            completing.join()
        failed, self.completion_failed = self.completion_failed, None
        if failed is not None:
            raise failed

    def _remember(self, batch: str) -> None:
        self.done[batch] = None
        while len(self.done) > DONE_MEMORY:
            self.done.popitem(last=False)

    def _complete_in_background(self, batch: str, held: list[Held]) -> None:
        # SIGTERM goes to the main thread, whose blocking read it interrupts (see _on_terminate).
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            self._complete(batch, held, True)
        except BaseException as err:  # raised by the next call that settles
            self.completion_failed = err

    def _complete(self, batch: str, held: list[Held] | None, recorded: bool) -> None:
        """Complete ``held`` (None: the items the batch's record names), then drop the record."""
        given_back = False
        if held is None and recorded:
            record = self._load(batch)
            if record is not None:
                held, given_back = record
        if held:
            if given_back:
                # A stop gave back a batch that Spark had written but not yet committed to the
                # source: take its items back (they are first in line) before completing them.
                held = self._take_back(batch, held)
            pairs = [(item_id, token) for item_id, token, _ in held]
            completed = run(self.db, complete_held(self.queue.ops, pairs))
            if completed < len(pairs):
                logger.warning(
                    "batch %s of %s: %d of its %d items were no longer held when it was "
                    "committed (their leases expired, or a stop gave them back); they are "
                    "delivered again",
                    batch,
                    self.queue.name.prefix,
                    len(pairs) - completed,
                    len(pairs),
                )
            else:
                logger.debug(
                    "batch %s of %s: completed %d items", batch, self.queue.name.prefix, completed
                )
        raw_command(self.db, "DEL", batch_key(self.options.where.queue, batch))

    # Renewing ---------------------------------------------------------------------------------

    def _held_items(self) -> list[tuple[str, Item]]:
        with self.lock:
            return [
                (batch, Item.handed_out(item_id, b"", 0, token))
                for batch, held in self.held.items()
                for item_id, token in held.items()
            ]

    def renew(self) -> None:
        """Extend every lease still held to ``leaseSeconds`` from now; forget those lost."""
        pairs = self._held_items()
        flags = self.queue.renew_many(self.db, [item for _, item in pairs], self.options.lease_secs)
        lost = 0
        with self.lock:
            for (batch, item), ok in zip(pairs, flags, strict=True):
                if not ok and batch in self.held:
                    lost += 1
                    self.held[batch].pop(item.id(), None)
        if lost:
            logger.warning(
                "%d leases on %s ran out before their batch was committed; those items are "
                "delivered again",
                lost,
                self.queue.name.prefix,
            )

    def _renew_loop(self) -> None:
        # SIGTERM goes to the main thread, whose blocking read it interrupts (see _on_terminate).
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        while not self.stopping.wait(self.options.renew_secs):
            try:
                self.renew()
            except Exception:
                logger.warning(
                    "renewing leases on %s failed", self.queue.name.prefix, exc_info=True
                )
        if self.terminated.is_set():
            self.close()
            os._exit(128 + signal.SIGTERM)

    def _on_terminate(self, signum: int, frame: object) -> None:
        """SIGTERM from Spark (``query.stop()``): give the uncommitted items back, then exit.

        Spark ends the source's process on ``query.stop()`` without calling ``stop()``. The
        handler only wakes the renewing thread, which gives the items back (as :meth:`close`)
        and ends the process; it runs in the main thread, which may hold :attr:`lock`. An alarm
        ends the process after :data:`GIVE_BACK_SECS` if Redis does not answer.

        Spark sends SIGTERM twice in a row. Only the first is acted on: a second handler run,
        nested in the first while it holds an event's lock to set it, would wait for that lock
        for ever, and the renewing thread, never woken, would give nothing back.
        """
        if self.terminating:
            return
        self.terminating = True
        signal.alarm(GIVE_BACK_SECS)
        self.terminated.set()
        self.stopping.set()

    def close(self) -> None:
        """Stop renewing, and give back the items of every batch Spark has not committed.

        They go back to the leasing end of the queue, their delivery not counted, so another
        worker (or this query, restarted) takes them at once rather than after their lease.
        The batches' records stay: a restart from the checkpoint replays those batches, and
        takes their items back first (see :meth:`_take_back`).
        """
        with self.closing:
            if self.closed:
                return
            self.closed = True
            try:
                self.settle()  # what is being completed is not given back
            except Exception:
                logger.warning(
                    "completing a batch of %s failed; a restart from the checkpoint completes "
                    "it, else its items are delivered again when their leases expire",
                    self.queue.name.prefix,
                    exc_info=True,
                )
            self._give_back_all()
        # Outside the lock: the renewing thread, woken by a SIGTERM, may be waiting for it.
        if threading.current_thread() is not self.renewer:
            self.renewer.join(timeout=GIVE_BACK_SECS)
        self.db.close()

    def _give_back_all(self) -> None:
        self.stopping.set()
        try:
            pairs = self._held_items()
            if pairs:
                flags = self.queue.give_back(self.db, [item for _, item in pairs])
                back = sum(flags)
                # Mark the records: a restart that finds the batch written takes its items back.
                returned = {item.id() for (_, item), ok in zip(pairs, flags, strict=True) if ok}
                with self.lock:
                    batches = {b: list(held) for b, held in self.batches.items()}
                for batch, held in batches.items():
                    mine = [entry for entry in held if entry[0] in returned]
                    if mine:
                        self._save(batch, mine, given_back=True)
                logger.info(
                    "stopped: gave %d uncommitted items of %s back to the queue",
                    back,
                    self.queue.name.prefix,
                )
        except Exception:
            logger.warning(
                "could not give the uncommitted items of %s back; they are delivered again "
                "when their leases expire",
                self.queue.name.prefix,
                exc_info=True,
            )
        finally:
            with self.lock:
                self.held = {}


def in_source_process() -> bool:
    """Whether this is the main thread of the process Spark runs the source's driver side in."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return (
        getattr(spec, "name", None) == SOURCE_PROCESS
        and threading.current_thread() is threading.main_thread()
    )


class QueueStreamReader(
    Configured[StreamOptions], DataSourceStreamReader, SupportsTriggerAvailableNow
):
    """The streaming reader (``spark.readStream.format(NAME)``); see the module's design notes.

    Args:
        options: The stream options.
        schema: The schema of the read.
    """

    def __init__(self, options: StreamOptions, schema: StructType) -> None:
        super().__init__(options, schema)
        self._lessee: Lessee | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the options only: the driver's state never travels to the tasks."""
        return {"options": self.options, "schema": self.schema, "_lessee": None}

    def lessee(self) -> Lessee:
        """The driver's state, made on first use (the reader is created in several places)."""
        if self._lessee is None:
            with_reasons = any(field.name.lower() == "reason" for field in self.schema.fields)
            self._lessee = Lessee(self.options, with_reasons)
        return self._lessee

    def initialOffset(self) -> dict[str, Any]:
        """The offset before the first batch: no batch."""
        return self.lessee().initial()

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        """Complete the batch that ends at ``start`` and lease the next one."""
        return self.lessee().latest(start, limit)

    def getDefaultReadLimit(self) -> Any:
        """At most ``maxItemsPerBatch`` items a batch (Spark's admission control)."""
        if ReadMaxRows is None:  # pragma: no cover - Spark 4.0 and 4.1
            return None
        return ReadMaxRows(self.options.max_items)

    def reportLatestOffset(self) -> dict[str, Any]:
        """The queue's backlog, shown as the source's ``latestOffset`` in the query progress."""
        return self.lessee().backlog()

    def prepareForTriggerAvailableNow(self) -> None:
        """Lease no more items than are queued now, so that the query ends."""
        lessee = self.lessee()
        lessee.remaining = lessee.queue.queue_len(lessee.db)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """Split the batch that ends at ``end`` over tasks."""
        return self.lessee().plan(start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Emit one task's items, one record batch a page (runs in a task).

        The data comes with the partition, or is fetched in pages of ``chunkSize`` items.
        """
        if not isinstance(partition, LeasedPartition) or not partition.ids:
            return
        rows = Rows(self.schema)
        if partition.data is not None:
            for start in range(0, len(partition.ids), ARROW_ROWS):
                stop = start + ARROW_ROWS
                yield rows.leased(
                    partition.ids[start:stop],
                    partition.data[start:stop],
                    partition.deliveries[start:stop],
                    self.options.lease_secs,  # renewed until the batch is committed
                    None if partition.reasons is None else partition.reasons[start:stop],
                )
            return
        ops = self.options.where.work_queue().ops
        deliveries = dict(zip(partition.ids, partition.deliveries, strict=True))
        ids = partition.ids
        db = connect(self.options.where)
        try:
            position = 0
            while position < len(ids):
                wanted = ids[position : position + self.options.chunk_size]
                examined, entries = run(
                    db, snapshot_page(ops, "ids", self.options.chunk_bytes, *wanted)
                )
                page = [
                    (
                        replace(entry, deliveries=deliveries.get(entry.id, entry.deliveries)),
                        entry.state("processing"),
                    )
                    for entry in entries
                ]
                if page:
                    yield rows.batch(page)
                position += max(examined, 1)
        finally:
            db.close()

    def commit(self, end: dict[str, Any]) -> None:
        """Complete the batch that ends at ``end`` (Spark has written it)."""
        self.lessee().finish(end)

    def stop(self) -> None:
        """Stop renewing and give back what Spark has not committed (the query has ended)."""
        if self._lessee is not None:
            self._lessee.close()
            self._lessee = None
