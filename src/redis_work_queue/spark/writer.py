"""Batch and streaming writes: every row becomes an item.

Each Spark task opens its own connection and adds its rows in chunks, one script call per chunk
of up to 500 items (``WorkQueue.add_items``). With an id column, the adds check each id first,
so a task that Spark retries, a micro-batch it replays or a job run a second time never queues
an item twice: ids that are there already are counted, not added. Without one, every row gets a
fresh UUIDv7 id, so a retry queues its rows again.

Each task reports how many items it added and how many were there already; the commit, on the
driver, adds them up, logs the totals and keeps them in a small hash beside the queue
(``<queue>:spark:write``, kept for a week; see :func:`last_write`).
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from datetime import time as clock_time
from decimal import Decimal
from typing import Any

from pyspark.sql import Row
from pyspark.sql.datasource import (
    DataSourceStreamWriter,
    DataSourceWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType
from redis import Redis

from ..errors import InvalidArgumentError
from ..item import Item
from ..ops import decode
from ..scripts import raw_command
from .calls import connect
from .options import KEEP_SECS, WriteOptions, report_key

logger = logging.getLogger(__name__)


@dataclass
class AddCounts(WriterCommitMessage):
    """What one task added.

    Attributes:
        added: Items it added.
        existing: Rows whose id was in the queue already (nothing changed for them).
    """

    added: int = 0
    existing: int = 0


@dataclass(frozen=True)
class WriteReport:
    """The totals of one committed write (of one micro-batch, for a streaming write).

    Attributes:
        added: Items added.
        existing: Rows whose id was there already, so nothing was added for them.
        tasks: Tasks that reported.
        batch_id: The micro-batch, for a streaming write; None for a batch write.
        committed_at: When the write was committed (seconds since the epoch).
    """

    added: int
    existing: int
    tasks: int
    batch_id: int | None
    committed_at: float

    @property
    def rows(self) -> int:
        """Rows written: added plus existing."""
        return self.added + self.existing


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | date | clock_time):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, Row):
        return value.asDict(recursive=True)
    raise TypeError(f"cannot turn a {type(value).__name__} into JSON")


def to_json(value: Any) -> str:
    """Compact JSON of a row or of one of its values.

    Dates and times become ISO 8601 text, decimals strings, binary base64, structs objects.
    """
    if isinstance(value, Row):
        value = value.asDict(recursive=True)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_json_default)


class RowsToItems:
    """Turns rows into items, as the write options say.

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

    def item(self, row: Row) -> Item:
        """The item of one row.

        Raises:
            InvalidArgumentError: The row's id or data is null.
        """
        item_id: str | None = None
        if self.id_index is not None:
            value = row[self.id_index]
            if value is None or value == "":
                raise InvalidArgumentError(f"a row has no id: {row!r}")
            item_id = value if isinstance(value, str) else str(value)
        if self.data_index is None:
            return Item(to_json(row), id=item_id)
        data = row[self.data_index]
        if data is None:
            raise InvalidArgumentError(f"a row has no data: {row!r}")
        if not isinstance(data, str | bytes | bytearray | memoryview):
            data = to_json(data)
        return Item(data, id=item_id)


def add_rows(options: WriteOptions, rows_to_items: RowsToItems, rows: Iterator[Row]) -> AddCounts:
    """Add every row to the queue, in chunks, on a connection of this task's own."""
    queue = options.where.work_queue()
    unique = rows_to_items.id_index is None
    counts = AddCounts()
    db = connect(options.where.url)
    try:

        def flush(chunk: list[Item]) -> None:
            flags = queue.add_items(db, chunk, unique=unique, delay=options.delay, ttl=options.ttl)
            added = sum(flags)
            counts.added += added
            counts.existing += len(flags) - added

        chunk: list[Item] = []
        for row in rows:
            chunk.append(rows_to_items.item(row))
            if len(chunk) >= options.chunk_size:
                flush(chunk)
                chunk = []
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
        "write to %s: added %d items, %d were there already (%d tasks)",
        where,
        total.added,
        total.existing,
        tasks,
    )
    if options.report_key is None:
        return
    fields = {
        "added": total.added,
        "existing": total.existing,
        "tasks": tasks,
        "batch_id": "" if batch_id is None else batch_id,
        "committed_at": f"{time.time():.3f}",
    }
    db = connect(options.where.url)
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

    def write(self, iterator: Iterator[Row]) -> AddCounts:
        """Add one partition's rows (runs in a task)."""
        return add_rows(self.options, self.rows_to_items, iterator)


class QueueWriter(_RowsWriter, DataSourceWriter):
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


class QueueStreamWriter(_RowsWriter, DataSourceStreamWriter):
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
