"""Streaming read: a Spark query as a fleet of workers of one queue, at least once end to end.

Design
======

**Offsets name leases.** Each micro-batch is one lease of up to ``maxItemsPerBatch`` items,
taken for ``leaseSeconds``. Its offset is ``{"batch": <fresh UUIDv7 hex>, "items": <count>}``;
the initial offset is ``{"batch": "", "items": 0}``. Offsets stay small: the ids, lease values
(``Item.lease_token``) and delivery counts of a batch are kept beside the queue, in the string
``<queue>:spark:batch:<batch>`` (JSON, kept for a week), and in the memory of the driver.

**Leasing happens on the driver,** in ``latestOffset``: Spark writes the offset it returns to the
checkpoint's offset log before it plans the batch. A lease is then only ever taken for a batch
that Spark knows of, or for none at all when the driver dies in between (those leases expire).
``partitions(start, end)`` splits the batch's ids over ``numPartitions`` tasks; each task reads
its items' data in pages (one read-only script call per page, ``lua/snapshot.lua``) and emits
rows. A batch that Spark replays after a restart from its checkpoint is read from its record in
Redis: it yields the same items (less any completed since).

**Completing is commit, and commit is checked.** A batch's items are completed only after Spark
has recorded the batch in the checkpoint's commit log, that is after the sink has written it:
Spark asks for the next offset (``latestOffset(start)``, where ``start`` is the end of the batch
just written) and commits the previous batch (``commit(end)``) only then, so both complete the
batch named by the offset they are given. The completion (``lua/complete_held.lua``) removes an
item only while its lease is still the one the batch took: completing twice, or late, never
removes an item that another worker leased since, nor one added again under the same id.

**Leases are renewed** by a thread of the driver's reader every ``renewSeconds`` (a third of the
lease), from the moment they are taken until their batch is completed, so a slow batch keeps its
items, however long it runs, for as long as the driver lives.

**Failures lose nothing.** A query that dies (or is stopped) mid-batch stops renewing; its leases
expire after at most ``leaseSeconds``. Restarted from its checkpoint, Spark replays the batch:
its items are emitted again, and completed once the sink has written them. Not restarted, a light
clean (run by every streaming read every ``cleanSeconds``, or by ``rwq light-clean``) requeues
them for any other worker. An item is therefore written to the sink at least once; it is written
twice only when a batch is interrupted between the sink's write and Spark's commit log entry, or
when the lease expired before the commit (a driver that was down longer than ``leaseSeconds``).

Spark 4.0 and 4.1 call ``latestOffset()`` without a start: the reader then uses the offset it
returned last (after a restart, the first call returns an empty batch so that Spark commits the
last batch of the checkpoint). With ``Trigger.AvailableNow`` (Spark 4.2 and later) the query
leases at most as many items as were queued when it started, and completes its last batch before
it ends. ``Trigger.Once`` ends without completing its batch: its items are delivered again after
the lease expires.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from .. import scripts
from ..item import Item, new_id
from ..protocol import run
from ..scripts import raw_command
from .calls import complete_held, connect, snapshot_page
from .options import KEEP_SECS, StreamOptions, batch_key
from .reader import Rows

try:  # Spark 4.2 and later
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - older Spark has no Trigger.AvailableNow for Python
    SupportsTriggerAvailableNow = object  # type: ignore[assignment,misc]

logger = logging.getLogger(__name__)

#: The offset before the first batch.
INITIAL: dict[str, Any] = {"batch": "", "items": 0}
#: Renewals sent per pipeline.
RENEW_CHUNK = 1000
#: Completed batches remembered, so that a second commit of one is skipped.
DONE_MEMORY = 1024

#: One leased item of a batch: id, lease value, delivery count.
Held = tuple[str, str, int]


class LeasedPartition(InputPartition):
    """Items of one micro-batch for one task.

    Args:
        batch: The batch.
        items: Pairs of an item id and its delivery count.
    """

    def __init__(self, batch: str, items: list[tuple[str, int]]) -> None:
        super().__init__(batch)
        self.batch = batch
        self.items = items


class Lessee:
    """The driver's side of a streaming read: leases, records, renews and completes batches.

    Args:
        options: The stream options.
    """

    def __init__(self, options: StreamOptions) -> None:
        self.options = options
        self.queue = options.where.work_queue()
        self.db = connect(options.where.url)
        self.lock = threading.Lock()
        #: The items of each batch not yet completed.
        self.batches: dict[str, list[Held]] = {}
        #: The leases still held, per batch: id -> lease value. Renewed until completed.
        self.held: dict[str, dict[str, str]] = {}
        self.done: OrderedDict[str, None] = OrderedDict()
        #: The offset returned last (for Spark versions that call latestOffset without start).
        self.last: dict[str, Any] | None = None
        #: With Trigger.AvailableNow: how many items may still be leased.
        self.remaining: int | None = None
        self.next_clean = 0.0
        self.stopping = threading.Event()
        self.renewer = threading.Thread(
            target=self._renew_loop, name=f"renew leases of {options.where.queue}", daemon=True
        )
        self.renewer.start()

    # Offsets ----------------------------------------------------------------------------------

    def latest(self, start: dict[str, Any] | None, limit: object) -> dict[str, Any]:
        """Complete the batch that ends at ``start``, then lease the next one.

        Args:
            start: The end of the last batch Spark has written (None: Spark did not say).
            limit: Spark's read limit; a ``max_rows`` in it lowers ``maxItemsPerBatch``.

        Returns:
            The new batch's offset, or ``start`` when there is nothing to lease.
        """
        if start is None:
            start = self.last
        if start is not None:
            self.finish(start)
        self._clean()
        items = self._lease(self._allowance(limit))
        if items:
            offset = self._record(items)
        elif start is None:
            offset = {"batch": new_id(), "items": 0}
        else:
            offset = start
        self.last = offset
        return offset

    def _allowance(self, limit: object) -> int:
        count = self.options.max_items
        max_rows = getattr(limit, "max_rows", None)
        if isinstance(max_rows, int) and max_rows > 0:
            count = min(count, max_rows)
        if self.remaining is not None:
            count = min(count, self.remaining)
        return count

    def _lease(self, count: int) -> list[Item]:
        items: list[Item] = []
        while len(items) < count:
            got = self.queue.lease_many(
                self.db, self.options.lease_secs, count - len(items), block=False
            )
            if not got:
                break
            items += got
        if self.remaining is not None:
            self.remaining -= len(items)
        return items

    def _record(self, items: list[Item]) -> dict[str, Any]:
        batch = new_id()
        held: list[Held] = [(i.id(), i.lease_token or "", i.deliveries) for i in items]
        with self.lock:
            self.batches[batch] = held
            self.held[batch] = {item_id: token for item_id, token, _ in held}
        record = json.dumps(held, separators=(",", ":"))
        raw_command(
            self.db, "SET", batch_key(self.options.where.queue, batch), record, "EX", KEEP_SECS
        )
        logger.debug("leased %d items of %s for batch %s", len(held), self.queue.name.prefix, batch)
        return {"batch": batch, "items": len(held)}

    def _load(self, batch: str) -> list[Held] | None:
        raw = raw_command(self.db, "GET", batch_key(self.options.where.queue, batch))
        if raw is None:
            return None
        return [(str(i), str(t), int(n)) for i, t, n in json.loads(raw)]

    def _clean(self) -> None:
        if self.options.clean_secs <= 0 or time.monotonic() < self.next_clean:
            return
        self.next_clean = time.monotonic() + self.options.clean_secs
        self.queue.light_clean(self.db)

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
        if held is None:
            held = self._load(batch)
            if held is None:
                logger.warning(
                    "the record of batch %s of %s is gone: the batch is empty (its items, if "
                    "any are left, are delivered again when their leases expire)",
                    batch,
                    self.queue.name.prefix,
                )
                return []
            logger.info(
                "replaying batch %s of %s (%d items)", batch, self.queue.name.prefix, len(held)
            )
            with self.lock:
                self.batches[batch] = held
                self.held[batch] = {item_id: token for item_id, token, _ in held}
            self.renew()
        tasks = max(1, min(self.options.partitions, len(held)))
        size = -(-len(held) // tasks)
        return [
            LeasedPartition(batch, [(item_id, n) for item_id, _, n in held[i : i + size]])
            for i in range(0, len(held), size)
        ]

    # Completing -------------------------------------------------------------------------------

    def finish(self, offset: dict[str, Any]) -> None:
        """Complete the items of the batch named by ``offset`` that it still holds."""
        batch = str(offset.get("batch") or "")
        if not batch or batch in self.done:
            return
        with self.lock:
            held = self.batches.pop(batch, None)
            self.held.pop(batch, None)
        if held is None and offset.get("items"):
            held = self._load(batch)
        if held:
            pairs = [(item_id, token) for item_id, token, _ in held]
            completed = run(self.db, complete_held(self.queue.ops, pairs))
            if completed < len(pairs):
                logger.warning(
                    "batch %s of %s: %d of its %d items were no longer held when it was "
                    "committed (their leases expired); they are delivered again",
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
        self.done[batch] = None
        while len(self.done) > DONE_MEMORY:
            self.done.popitem(last=False)

    # Renewing ---------------------------------------------------------------------------------

    def renew(self) -> None:
        """Extend every lease still held to ``leaseSeconds`` from now; forget those lost."""
        renew = scripts.load("renew")
        ms = round(self.options.lease_secs * 1000)
        keys = self.queue.keys
        with self.lock:
            pairs = [
                (batch, item_id, token)
                for batch, held in self.held.items()
                for item_id, token in held.items()
            ]
            lost = 0
            for start in range(0, len(pairs), RENEW_CHUNK):
                chunk = pairs[start : start + RENEW_CHUNK]
                pipe = self.db.pipeline(transaction=False)
                for _, item_id, token in chunk:
                    renew.queue_on(pipe, (keys.lease(item_id),), (token, ms))
                for (batch, item_id, _), ok in zip(chunk, pipe.execute(), strict=True):
                    if not int(ok):
                        lost += 1
                        self.held[batch].pop(item_id, None)
        if lost:
            logger.warning(
                "%d leases on %s ran out before their batch was committed; those items are "
                "delivered again",
                lost,
                self.queue.name.prefix,
            )

    def _renew_loop(self) -> None:
        while not self.stopping.wait(self.options.renew_secs):
            try:
                self.renew()
            except Exception:
                logger.warning(
                    "renewing leases on %s failed", self.queue.name.prefix, exc_info=True
                )

    def close(self) -> None:
        """Stop renewing; leases of a batch not yet committed run out on their own."""
        self.stopping.set()
        self.renewer.join(timeout=10)
        self.db.close()


class QueueStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The streaming reader (``spark.readStream.format(NAME)``); see the module's design notes.

    Args:
        options: The stream options.
        columns: The columns to produce, in order.
    """

    def __init__(self, options: StreamOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._lessee: Lessee | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the options only: the driver's state never travels to the tasks."""
        return {"options": self.options, "schema": self.schema, "_lessee": None}

    def lessee(self) -> Lessee:
        """The driver's state, made on first use (the reader is created in several places)."""
        if self._lessee is None:
            self._lessee = Lessee(self.options)
        return self._lessee

    def initialOffset(self) -> dict[str, Any]:
        """The offset before the first batch: no batch."""
        return dict(INITIAL)

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        """Complete the batch that ends at ``start`` and lease the next one."""
        return self.lessee().latest(start, limit)

    def prepareForTriggerAvailableNow(self) -> None:
        """Lease no more items than are queued now, so that the query ends."""
        lessee = self.lessee()
        lessee.remaining = lessee.queue.queue_len(lessee.db)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """Split the batch that ends at ``end`` over tasks."""
        return self.lessee().plan(start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Emit one task's items, fetched in pages, one record batch a page (runs in a task)."""
        if not isinstance(partition, LeasedPartition) or not partition.items:
            return
        rows = Rows(self.schema)
        ops = self.options.where.work_queue().ops
        deliveries = dict(partition.items)
        ids = [item_id for item_id, _ in partition.items]
        db = connect(self.options.where.url)
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
        """Stop renewing (the query has ended)."""
        if self._lessee is not None:
            self._lessee.close()
            self._lessee = None
