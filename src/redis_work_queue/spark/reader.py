"""Batch read: a snapshot of one queue as a DataFrame, for audits and analytics.

A queue has four parts: the main queue (``queued`` items), the processing list (``leased`` items,
and ``expired`` ones whose lease ran out and that await a light clean), the delayed set
(``delayed``) and the dead-letter store (``dead``). The driver reads the length of each part and
cuts it into Spark partitions of ``partitionSize`` entries; each task reads its range in pages of
``chunkSize`` entries (and at most ``chunkBytes`` of data), one read-only script call per page
(``lua/snapshot.lua``), so Redis is never held for long, and emits each page as one Arrow record
batch.

Filters on ``state`` and ``id`` (``=`` and ``IN``) are pushed down: a ``state`` filter keeps the
read to the parts of the queue that hold those states, and the tasks drop the rows of other ids
and states before they reach Spark (the plan lists them under ``PushedFilters``).

Column names are case-insensitive. A read whose schema gives ``data`` a type other than binary
gets it decoded: ``string`` as UTF-8, any other type (a struct, an array, a number...) as JSON
into that type; data that does not decode is null.

The snapshot is not one atomic picture of a busy queue: each page is read at its own moment, and
a lease or a clean that moves entries between pages can make a row appear twice or not at all.
Of a queue at rest it is exact. Lists are paged from their oldest end (the end that leases and
cleans take from), so items added meanwhile do not shift the pages.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import DataSourceReader, EqualTo, Filter, In, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BinaryType, StringType, StructType

from ..errors import InvalidArgumentError
from ..ops.spark import PARTS, Entry, snapshot_page
from ..senders import raw_command
from ..transport import run
from .calls import connect
from .options import COLUMNS, Configured, ReadOptions

#: The states of the items each part of a queue holds.
STATES_OF = {
    "queue": ("queued",),
    "processing": ("leased", "expired"),
    "delayed": ("delayed",),
    "dead": ("dead",),
}
#: Every state a row can have.
STATES = frozenset(state for states in STATES_OF.values() for state in states)


class PartRange(InputPartition):
    """Positions ``start`` (inclusive) to ``stop`` (exclusive) of one part of the queue.

    Args:
        part: ``queue``, ``processing``, ``delayed`` or ``dead``.
        start: The first position (0 is the oldest entry).
        stop: One past the last position.
    """

    def __init__(self, part: str, start: int, stop: int) -> None:
        super().__init__((part, start, stop))
        self.part = part
        self.start = start
        self.stop = stop


class Rows:
    """Turns entries into Arrow record batches of a read's schema.

    Args:
        schema: The schema of the read: its names (any case) are columns of :data:`COLUMNS`.
    """

    def __init__(self, schema: StructType) -> None:
        self.columns = [field.name.lower() for field in schema.fields]
        self.schema = to_arrow_schema(schema)
        data_type = next((f.dataType for f in schema.fields if f.name.lower() == "data"), None)
        self.data_as = (
            "bytes"
            if data_type is None or isinstance(data_type, BinaryType)
            else "text"
            if isinstance(data_type, StringType)
            else "json"
        )

    def _data(self, raw: bytes) -> Any:
        if self.data_as == "bytes":
            return raw
        try:
            text = raw.decode()
            return text if self.data_as == "text" else json.loads(text)
        except ValueError:
            return None

    def batch(self, entries: Sequence[tuple[Entry, str]]) -> pa.RecordBatch:
        """The record batch of ``entries``, each with its state."""
        arrays = []
        for name, field in zip(self.columns, self.schema, strict=True):
            if name == "id":
                values: list[Any] = [entry.id for entry, _ in entries]
            elif name == "data":
                values = [self._data(entry.data) for entry, _ in entries]
            elif name == "state":
                values = [state for _, state in entries]
            elif name == "deliveries":
                values = [entry.deliveries for entry, _ in entries]
            elif name == "lease_left":
                values = [entry.lease_left for entry, _ in entries]
            else:
                values = [entry.reason for entry, _ in entries]
            if self.data_as == "json" and name == "data":
                values = [_fits(value, field.type) for value in values]
            arrays.append(pa.array(values, type=field.type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def leased(
        self,
        ids: list[str],
        data: list[bytes],
        deliveries: list[int],
        lease_left: float,
        reasons: list[str | None] | None,
    ) -> pa.RecordBatch:
        """The record batch of leased items given column by column (a streaming read's batch).

        Args:
            ids: The items' ids.
            data: Their data.
            deliveries: Their delivery counts.
            lease_left: Seconds left on each lease.
            reasons: Their last failure reasons (None: not read, the column is null).
        """
        arrays = []
        for name, field in zip(self.columns, self.schema, strict=True):
            values: list[Any]
            if name == "id":
                values = ids
            elif name == "data":
                values = data if self.data_as == "bytes" else [self._data(raw) for raw in data]
                if self.data_as == "json":
                    values = [_fits(value, field.type) for value in values]
            elif name == "state":
                values = ["leased"] * len(ids)
            elif name == "deliveries":
                values = deliveries
            elif name == "lease_left":
                values = [lease_left] * len(ids)
            else:
                values = reasons if reasons is not None else [None] * len(ids)
            arrays.append(pa.array(values, type=field.type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def _fits(value: Any, kind: pa.DataType) -> Any:
    """``value`` when Arrow can store it as ``kind``, else None (data that does not decode)."""
    try:
        pa.array([value], type=kind)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return None
    return value


class SnapshotReader(Configured[ReadOptions], DataSourceReader):
    """Reads every item of a queue with its state.

    Args:
        options: The read options.
        schema: The schema of the read.
    """

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        super().__init__(options, schema)
        #: The states a pushed-down filter keeps (None: every state).
        self.states: frozenset[str] | None = None
        #: The ids a pushed-down filter keeps (None: every id).
        self.ids: frozenset[str] | None = None

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Take the ``=`` and ``IN`` filters on ``state`` and ``id``; leave the rest to Spark."""
        for pushed in filters:
            if isinstance(pushed, EqualTo | In) and len(pushed.attribute) == 1:
                column = pushed.attribute[0].lower()
                values = [pushed.value] if isinstance(pushed, EqualTo) else list(pushed.value)
                if column in ("state", "id") and all(isinstance(v, str) for v in values):
                    kept = frozenset(values)
                    if column == "state":
                        self.states = kept if self.states is None else self.states & kept
                    else:
                        self.ids = kept if self.ids is None else self.ids & kept
                    continue
            yield pushed

    def _parts(self) -> list[str]:
        if self.states is None:
            return list(PARTS)
        return [part for part in PARTS if self.states.intersection(STATES_OF[part])]

    def partitions(self) -> Sequence[InputPartition]:
        """Cut each part of the queue that a filter leaves into ranges (runs on the driver)."""
        keys = self.options.where.work_queue().keys
        lengths = {
            "queue": ("LLEN", keys.queue),
            "processing": ("LLEN", keys.processing),
            "delayed": ("ZCARD", keys.delayed),
            "dead": ("ZCARD", keys.dead),
        }
        parts = self._parts()
        db = connect(self.options.where)
        try:
            sizes = {part: int(raw_command(db, *lengths[part])) for part in parts}
        finally:
            db.close()
        step = self.options.partition_size
        return [
            PartRange(part, start, min(start + step, sizes[part]))
            for part in parts
            for start in range(0, sizes[part], step)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one range, page by page, one record batch a page (runs in a task)."""
        if not isinstance(partition, PartRange):
            return  # an empty queue: Spark still runs one task, with no range
        rows = Rows(self.schema)
        ops = self.options.where.work_queue().ops
        db = connect(self.options.where)
        try:
            position = partition.start
            while position < partition.stop:
                last = min(position + self.options.chunk_size, partition.stop) - 1
                examined, entries = run(
                    db,
                    snapshot_page(ops, partition.part, self.options.chunk_bytes, position, last),
                )
                page = []
                for entry in entries:
                    state = entry.state(partition.part)
                    if (self.ids is None or entry.id in self.ids) and (
                        self.states is None or state in self.states
                    ):
                        page.append((entry, state))
                if page:
                    yield rows.batch(page)
                if examined == 0:
                    break  # the part has shrunk below this range
                position += examined
        finally:
            db.close()


def read_schema(schema: StructType) -> StructType:
    """``schema`` checked: each column one the reader produces (names in any case).

    Raises:
        InvalidArgumentError: A column is not one the reader produces, or is given twice.
    """
    names = [name.lower() for name in schema.fieldNames()]
    unknown = [name for name in schema.fieldNames() if name.lower() not in COLUMNS]
    if unknown:
        raise InvalidArgumentError(
            f"this data source reads the columns {list(COLUMNS)}, not {unknown}"
        )
    if len(set(names)) < len(names):
        raise InvalidArgumentError(f"a column is given twice: {schema.fieldNames()}")
    return schema
