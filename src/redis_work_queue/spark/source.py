"""The data source: one class, registered under the short name ``redis-work-queue``."""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from ..errors import InvalidArgumentError
from .options import (
    SCHEMA,
    Options,
    ReadOptions,
    StreamOptions,
    WriteOptions,
    check_read,
)
from .reader import SnapshotReader, read_schema
from .stream import QueueStreamReader
from .writer import QueueStreamWriter, QueueWriter

#: The short name of the data source: ``spark.read.format(NAME)``.
NAME = "redis-work-queue"


class RedisWorkQueueDataSource(DataSource):
    """Items of a redis-work-queue queue as rows, and rows as items.

    * ``df.write.format(NAME).mode("append")`` adds each row as an item (:mod:`.writer`).
    * ``df.writeStream.format(NAME)`` does the same for each micro-batch.
    * ``spark.read.format(NAME).load()`` is a snapshot of the queue (:mod:`.reader`).
    * ``spark.readStream.format(NAME).load()`` leases items, one lease per micro-batch, and
      completes them once Spark has written the batch (:mod:`.stream`).

    Every read and write takes the options ``url`` and ``queue`` (the queue's key prefix).
    """

    @classmethod
    def name(cls) -> str:
        """The short name, ``redis-work-queue``."""
        return NAME

    def schema(self) -> str:
        """The columns of a read (a read may ask for fewer, with ``.schema(...)``).

        ``id string not null, data binary not null, state string not null, deliveries int not
        null, lease_left double, reason string``. Names are case-insensitive; a ``data`` of
        another type is decoded (see :mod:`.reader`).

        Spark asks for it when a read is loaded, so the read's options are checked here: a bad
        one fails ``load()``, not the query after ``start()``.

        Raises:
            InvalidArgumentError: An option is unknown, missing or out of range.
        """
        check_read(Options(self.options))
        return SCHEMA

    def reader(self, schema: StructType) -> SnapshotReader:
        """A snapshot read of the queue."""
        return SnapshotReader(ReadOptions.parse(Options(self.options)), read_schema(schema))

    def streamReader(self, schema: StructType) -> QueueStreamReader:
        """A streaming read that leases the queue's items."""
        return QueueStreamReader(StreamOptions.parse(Options(self.options)), read_schema(schema))

    def writer(self, schema: StructType, overwrite: bool) -> QueueWriter:
        """A batch write (append only).

        Raises:
            InvalidArgumentError: The write asks to overwrite.
        """
        _append_only(overwrite)
        return QueueWriter(WriteOptions.parse(Options(self.options)), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> QueueStreamWriter:
        """A streaming write (append only).

        Raises:
            InvalidArgumentError: The write asks to overwrite.
        """
        _append_only(overwrite)
        return QueueStreamWriter(WriteOptions.parse(Options(self.options)), schema)


def _append_only(overwrite: bool) -> None:
    if overwrite:
        raise InvalidArgumentError(
            "a queue is only appended to: use mode('append'); WorkQueue.flush empties a queue"
        )


def register(spark: SparkSession) -> None:
    """Register the data source with ``spark`` under the name ``redis-work-queue``.

    It also turns on ``spark.sql.python.filterPushdown.enabled``, which batch reads need (they
    take filters on ``state`` and ``id``).

    Example:
        >>> register(spark)  # doctest: +SKIP
        >>> spark.read.format("redis-work-queue").option("url", url).option("queue", "jobs").load()
    """
    spark.dataSource.register(RedisWorkQueueDataSource)
    # Reads push their filters on ``state`` and ``id`` down; Spark refuses a Python data source
    # that takes filters unless this is on (it changes nothing for sources that take none).
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
