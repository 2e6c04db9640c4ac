"""Batch read: a snapshot of one queue as a DataFrame, for audits and analytics.

A queue has four parts: the main queue (``queued`` items), the processing list (``leased`` items,
and ``expired`` ones whose lease ran out and that await a light clean), the delayed set
(``delayed``) and the dead-letter store (``dead``). The driver reads the length of each part and
cuts it into Spark partitions of ``partitionSize`` entries; each task reads its range in pages of
``chunkSize`` entries (and at most ``chunkBytes`` of data), one read-only script call per page
(``lua/snapshot.lua``), so Redis is never held for long.

The snapshot is not one atomic picture of a busy queue: each page is read at its own moment, and
a lease or a clean that moves entries between pages can make a row appear twice or not at all.
Of a queue at rest it is exact. Lists are paged from their oldest end (the end that leases and
cleans take from), so items added meanwhile do not shift the pages.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from ..protocol import run
from ..scripts import raw_command
from .calls import PARTS, Entry, connect, snapshot_page
from .options import ReadOptions


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


def row_of(entry: Entry, state: str, columns: Sequence[str]) -> tuple[Any, ...]:
    """The row of one item, with the columns in ``columns``' order."""
    values = {
        "id": entry.id,
        "data": entry.data,
        "state": state,
        "deliveries": entry.deliveries,
        "lease_left": entry.lease_left,
        "reason": entry.reason,
    }
    return tuple(values[name] for name in columns)


class SnapshotReader(DataSourceReader):
    """Reads every item of a queue with its state.

    Args:
        options: The read options.
        columns: The columns to produce, in order.
    """

    def __init__(self, options: ReadOptions, columns: Sequence[str]) -> None:
        self.options = options
        self.columns = tuple(columns)

    def partitions(self) -> Sequence[InputPartition]:
        """Cut each part of the queue into ranges (runs on the driver)."""
        keys = self.options.where.work_queue().keys
        lengths = {
            "queue": ("LLEN", keys.queue),
            "processing": ("LLEN", keys.processing),
            "delayed": ("ZCARD", keys.delayed),
            "dead": ("ZCARD", keys.dead),
        }
        db = connect(self.options.where.url)
        try:
            sizes = {
                part: int(raw_command(db, command, key)) for part, (command, key) in lengths.items()
            }
        finally:
            db.close()
        step = self.options.partition_size
        return [
            PartRange(part, start, min(start + step, sizes[part]))
            for part in PARTS
            for start in range(0, sizes[part], step)
        ]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        """Read one range, page by page (runs in a task)."""
        if not isinstance(partition, PartRange):
            return  # an empty queue: Spark still runs one task, with no range
        ops = self.options.where.work_queue().ops
        db = connect(self.options.where.url)
        try:
            position = partition.start
            while position < partition.stop:
                last = min(position + self.options.chunk_size, partition.stop) - 1
                examined, entries = run(
                    db,
                    snapshot_page(ops, partition.part, self.options.chunk_bytes, position, last),
                )
                for entry in entries:
                    yield row_of(entry, entry.state(partition.part), self.columns)
                if examined == 0:
                    break  # the part has shrunk below this range
                position += examined
        finally:
            db.close()
