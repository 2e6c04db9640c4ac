"""Batch and streaming writes: every row becomes an item.

Spark hands each task its rows as Arrow record batches. A task first reads its whole partition
and checks it: a row whose id (``idColumn``) is null or empty, or whose data (``dataColumn``) is
null, fails the task before it adds anything (``badRows=fail``, the default; the error names the
row's position and column, never its data), or is left out and counted (``badRows=skip``). Rows
of one task that share an id are counted as duplicates: the first of them, in the partition's
order, is the one added (to choose the winner among partitions too, ``repartition`` the frame by
its id column, and order it within partitions, before the write).

Then the task adds its items in chunks of at most ``chunkSize`` rows and ``chunkBytes`` bytes of
data (``WorkQueue.add_items``: one script call per 500 items at most), on a connection of its own.
With an id column, the adds check each id first, so a task that Spark retries, a micro-batch it
replays or a job run a second time never queues an item twice: ids that are there already are
counted, not added. Without one, every row gets a fresh UUIDv7 id, so a retry queues its rows
again.

Each task reports how many items it added, how many were there already, and how many rows it
skipped or found duplicated; the commit, on the driver, adds them up, logs the totals and keeps
them in a small hash beside the queue (``<queue>:spark:write``, kept for a week; see
:func:`last_write`).
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from datetime import time as clock_time
from decimal import Decimal
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType
from redis import Redis

from ..errors import InvalidArgumentError
from ..item import Item
from ..ops import decode
from ..senders import raw_command
from .calls import connect
from .options import KEEP_SECS, WriteOptions, report_key

logger = logging.getLogger(__name__)


@dataclass
class AddCounts(WriterCommitMessage):
    """What one task did.

    Attributes:
        added: Items it added.
        existing: Rows whose id was in the queue already (nothing changed for them).
        skipped: Rows left out for a null id or null data (``badRows=skip``).
        duplicates: Rows left out because an earlier row of the task had the same id.
    """

    added: int = 0
    existing: int = 0
    skipped: int = 0
    duplicates: int = 0


@dataclass(frozen=True)
class WriteReport:
    """The totals of one committed write (of one micro-batch, for a streaming write).

    Attributes:
        added: Items added.
        existing: Rows whose id was there already, so nothing was added for them.
        tasks: Tasks that reported.
        batch_id: The micro-batch, for a streaming write; None for a batch write.
        committed_at: When the write was committed (seconds since the epoch).
        skipped: Rows left out for a null id or null data (``badRows=skip``).
        duplicates: Rows left out because an earlier row of their task had the same id.
    """

    added: int
    existing: int
    tasks: int
    batch_id: int | None
    committed_at: float
    skipped: int = 0
    duplicates: int = 0

    @property
    def rows(self) -> int:
        """Rows written: added plus existing (skipped and duplicate rows not counted)."""
        return self.added + self.existing


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | date | clock_time):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    raise TypeError(f"cannot turn a {type(value).__name__} into JSON")


#: One encoder for every row (``json.dumps`` with options makes a new one a call).
_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=_json_default).encode


def to_json(value: Any) -> str:
    """Compact JSON of a row (a dict) or of one of its values.

    Dates and times become ISO 8601 text, decimals strings, binary base64, structs and maps
    objects.
    """
    return _ENCODE(value)


#: Arrow types whose values are an item's data as they are.
_RAW_TYPES = (pa.binary(), pa.large_binary(), pa.string(), pa.large_string())


class RowsToItems:
    """Turns record batches into ids and data, as the write options say.

    Args:
        options: The write options.
        schema: The schema of the rows.

    Raises:
        InvalidArgumentError: The id or data column is not in the schema.
    """

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        names = list(schema.fieldNames())
        self.id_index = self._index(names, options.id_column, "idColumn")
        self.data_index = self._index(names, options.data_column, "dataColumn")
        self.id_name = None if self.id_index is None else names[self.id_index]
        self.data_name = None if self.data_index is None else names[self.data_index]

    @staticmethod
    def _index(names: Sequence[str], column: str | None, option: str) -> int | None:
        if column is None:
            return None
        if column in names:
            return names.index(column)
        lowered = [name.lower() for name in names]
        if column.lower() in lowered:
            return lowered.index(column.lower())
        raise InvalidArgumentError(f"{option} {column!r} is not a column: {names}")

    def ids(self, batch: pa.RecordBatch) -> list[str | None] | None:
        """The ids of a batch's rows (None or empty: no id), or None without an id column."""
        if self.id_index is None:
            return None
        column = batch.column(self.id_index)
        if column.type not in (pa.string(), pa.large_string()):
            column = pc.cast(column, pa.string())
        ids: list[str | None] = column.to_pylist()
        return ids

    def data(self, batch: pa.RecordBatch) -> list[Any]:
        """The data of a batch's rows: bytes or str, or None where the data column is null."""
        if self.data_index is None:
            return [to_json(row) for row in batch.to_pylist(maps_as_pydicts="strict")]
        column = batch.column(self.data_index)
        if column.type in _RAW_TYPES:
            raw: list[Any] = column.to_pylist()
            return raw
        values = column.to_pylist(maps_as_pydicts="strict")
        return [None if value is None else to_json(value) for value in values]


def checked_rows(
    options: WriteOptions, rows_to_items: RowsToItems, batches: Iterable[pa.RecordBatch]
) -> tuple[list[Item], AddCounts]:
    """Read and check a task's whole partition; the items to add, and what was left out.

    Raises:
        InvalidArgumentError: A row has a null or empty id, or null data, and ``badRows`` is
            ``fail``. The message gives the row's position in the partition and the column,
            never the row's data.
    """
    counts = AddCounts()
    items: list[Item] = []
    seen: set[str] = set()
    position = 0
    for batch in batches:
        ids = rows_to_items.ids(batch)
        data = rows_to_items.data(batch)
        for offset, value in enumerate(data):
            item_id = None if ids is None else ids[offset]
            bad = None
            if ids is not None and not item_id:
                bad = f"a null or empty id (idColumn {rows_to_items.id_name!r})"
            elif value is None:
                bad = f"null data (dataColumn {rows_to_items.data_name!r})"
            if bad is not None:
                if not options.skip_bad_rows:
                    raise InvalidArgumentError(
                        f"row {position + offset} of this task's partition has {bad}: nothing "
                        f"of the partition was added to {options.where.queue!r}; filter such "
                        "rows out, or give the option badRows=skip to leave them out and count "
                        "them"
                    )
                counts.skipped += 1
                continue
            if item_id is not None:
                if item_id in seen:
                    counts.duplicates += 1
                    continue
                seen.add(item_id)
            items.append(Item(value, id=item_id))
        position += batch.num_rows
    return items, counts


def add_rows(
    options: WriteOptions, rows_to_items: RowsToItems, batches: Iterator[pa.RecordBatch]
) -> AddCounts:
    """Check a partition's rows, then add them in chunks, on a connection of this task's own."""
    items, counts = checked_rows(options, rows_to_items, batches)
    if not items:
        return counts
    queue = options.where.work_queue()
    unique = rows_to_items.id_index is None  # fresh ids: no existence check needed
    db = connect(options.where)
    try:

        def flush(chunk: list[Item]) -> None:
            flags = queue.add_items(db, chunk, unique=unique, delay=options.delay, ttl=options.ttl)
            added = sum(flags)
            counts.added += added
            counts.existing += len(flags) - added

        chunk: list[Item] = []
        size = 0
        for item in items:
            chunk.append(item)
            size += len(item.data())
            if len(chunk) >= options.chunk_size or size >= options.chunk_bytes:
                flush(chunk)
                chunk, size = [], 0
        if chunk:
            flush(chunk)
    finally:
        db.close()
    return counts


def _totals(messages: Sequence[WriterCommitMessage | None]) -> AddCounts:
    total = AddCounts()
    for message in messages:
        if isinstance(message, AddCounts):
            total.added += message.added
            total.existing += message.existing
            total.skipped += message.skipped
            total.duplicates += message.duplicates
    return total


def _report(
    options: WriteOptions,
    messages: Sequence[WriterCommitMessage | None],
    batch_id: int | None,
) -> None:
    total = _totals(messages)
    tasks = sum(isinstance(m, AddCounts) for m in messages)
    where = options.where.queue if batch_id is None else f"{options.where.queue}, batch {batch_id}"
    logger.info(
        "write to %s: added %d items, %d were there already, %d rows skipped, %d duplicate "
        "ids (%d tasks)",
        where,
        total.added,
        total.existing,
        total.skipped,
        total.duplicates,
        tasks,
    )
    if options.report_key is None:
        return
    fields = {
        "added": total.added,
        "existing": total.existing,
        "skipped": total.skipped,
        "duplicates": total.duplicates,
        "tasks": tasks,
        "batch_id": "" if batch_id is None else batch_id,
        "committed_at": f"{time.time():.3f}",
    }
    db = connect(options.where)
    try:
        pipe = db.pipeline(transaction=True)
        pipe.delete(options.report_key)
        raw_command(pipe, "HSET", options.report_key, *(v for kv in fields.items() for v in kv))
        pipe.expire(options.report_key, KEEP_SECS)
        pipe.execute()
    finally:
        db.close()


def last_write(db: Redis, queue: str, key: str | None = None) -> WriteReport | None:
    """The totals of the last write committed to ``queue`` by the Spark data source.

    Args:
        db: A Redis client.
        queue: The queue's key prefix.
        key: The ``reportKey`` the write was given, if it was given one.

    Returns:
        The report, or None when no write has left one (in the last week).
    """
    raw = raw_command(db, "HGETALL", key or report_key(queue))
    pairs = raw.items() if isinstance(raw, dict) else zip(raw[0::2], raw[1::2], strict=True)
    fields = {decode(k): decode(v) for k, v in pairs}
    if not fields:
        return None
    return WriteReport(
        added=int(fields["added"]),
        existing=int(fields["existing"]),
        tasks=int(fields["tasks"]),
        batch_id=int(fields["batch_id"]) if fields.get("batch_id") else None,
        committed_at=float(fields["committed_at"]),
        skipped=int(fields.get("skipped", 0)),
        duplicates=int(fields.get("duplicates", 0)),
    )


class _RowsWriter:
    """What batch and streaming writes share: a task adds its partition's rows.

    Args:
        options: The write options.
        schema: The schema of the rows.
    """

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        self.options = options
        self.rows_to_items = RowsToItems(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AddCounts:
        """Check, then add one partition's rows (runs in a task)."""
        return add_rows(self.options, self.rows_to_items, iterator)


class QueueWriter(_RowsWriter, DataSourceArrowWriter):
    """A batch write (``df.write.format(NAME)...save()``, mode append)."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Add up, log and keep the tasks' counts (runs on the driver)."""
        _report(self.options, messages, None)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Log what the tasks that finished added: their items stay in the queue."""
        total = _totals(messages)
        logger.warning(
            "write to %s failed; the items that finished tasks added stay queued (%d added, "
            "%d there already); with an idColumn, running the write again adds only the rest",
            self.options.where.queue,
            total.added,
            total.existing,
        )


class QueueStreamWriter(_RowsWriter, DataSourceStreamArrowWriter):
    """A streaming write (``df.writeStream.format(NAME)``): each micro-batch is a batch write."""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Add up, log and keep the counts of micro-batch ``batchId``."""
        _report(self.options, messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Log a failed micro-batch: Spark runs it again, and ids make that harmless."""
        total = _totals(messages)
        logger.warning(
            "micro-batch %d of the write to %s failed (%d added, %d there already)",
            batchId,
            self.options.where.queue,
            total.added,
            total.existing,
        )
