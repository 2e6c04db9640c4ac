"""The options of the data source, checked once, and the keys it keeps beside a queue.

Spark hands options over as strings, with case-insensitive names. Each reader and writer turns
them into one of the frozen dataclasses below when it is created on the driver, so a bad option
fails the query before any task runs.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from .. import routing
from ..connect import mask
from ..errors import InvalidArgumentError
from ..keyprefix import KeyPrefix, QueueKeys
from ..workqueue import WorkQueue

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

T = TypeVar("T", int, float)
#: The parsed options a reader keeps.
Parsed = TypeVar("Parsed")

#: Every column the reader can produce, its Spark type, and whether it can be null.
COLUMNS = {
    "id": ("string", False),
    "data": ("binary", False),
    "state": ("string", False),
    "deliveries": ("int", False),
    "lease_left": ("double", True),
    "reason": ("string", True),
}
#: The DDL schema of a read.
SCHEMA = ", ".join(
    f"{name} {kind}{'' if nullable else ' not null'}" for name, (kind, nullable) in COLUMNS.items()
)

#: How long the report of the last write and the record of a leased batch are kept (seconds).
KEEP_SECS = 7 * 24 * 3600


def report_key(queue: str) -> str:
    """The hash where writes to ``queue`` leave the totals of their last commit."""
    return QueueKeys(KeyPrefix(queue)).spark_write


def batch_key(queue: str, batch: str) -> str:
    """The record of the items a streaming read leased from ``queue`` for one micro-batch."""
    return QueueKeys(KeyPrefix(queue)).spark_batch(batch)


#: Options every read and write takes.
COMMON_OPTIONS = (
    "url",
    "queue",
    "maxDeliveries",
    "cluster",
    "sentinels",
    "sentinelMaster",
    "username",
    "password",
    "tlsCaCerts",
)
#: Options of a write (batch or streaming).
WRITE_OPTIONS = (
    "idColumn",
    "dataColumn",
    "delaySeconds",
    "ttlSeconds",
    "chunkSize",
    "chunkBytes",
    "reportKey",
    "badRows",
)
#: Options of a batch read.
READ_OPTIONS = ("partitionSize", "chunkSize", "chunkBytes")
#: Options of a streaming read.
STREAM_OPTIONS = (
    "maxItemsPerBatch",
    "maxBytesPerBatch",
    "leaseSeconds",
    "renewSeconds",
    "cleanSeconds",
    "numPartitions",
    "chunkSize",
    "chunkBytes",
)
#: Options Spark itself adds: ``load(path)``/``save(path)`` (the queue) and a stream's checkpoint.
SPARK_OPTIONS = ("path", "checkpointLocation")
#: Names other sources use for what an option of this one does.
FOREIGN_NAMES = {
    "maxoffsetspertrigger": "maxItemsPerBatch",
    "maxrecordspertrigger": "maxItemsPerBatch",
    "maxitemspertrigger": "maxItemsPerBatch",
    "maxfilespertrigger": "maxItemsPerBatch",
    "maxbytespertrigger": "maxBytesPerBatch",
    "host": "url",
    "uri": "url",
    "prefix": "queue",
    "key": "queue",
}


def unknown_option_error(name: str, allowed: Iterable[str], what: str) -> InvalidArgumentError:
    """The error for an option ``name`` that a ``what`` does not take, with the closest name."""
    names = sorted(set(allowed), key=str.lower)
    by_lower = {known.lower(): known for known in names}
    guess = FOREIGN_NAMES.get(name.lower())
    if guess is None or guess.lower() not in by_lower:
        close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
        guess = by_lower[close[0]] if close else None
    hint = f"; did you mean {guess!r}?" if guess else ""
    return InvalidArgumentError(
        f"a {what} has no option {name!r}{hint} (its options: {', '.join(names)})"
    )


class Options:
    """Typed access to Spark's string options (names are case-insensitive).

    Args:
        options: The options as Spark passes them.
    """

    def __init__(self, options: Mapping[str, str]) -> None:
        self._options = {str(k).lower(): str(v) for k, v in options.items()}

    def check_names(self, allowed: Iterable[str], what: str) -> None:
        """Refuse any option that is not in ``allowed`` (or added by Spark itself).

        Args:
            allowed: The option names a ``what`` takes.
            what: What is being read or written, for the message (``batch write``...).

        Raises:
            InvalidArgumentError: An option is unknown; the message names the closest valid one.
        """
        known = [*COMMON_OPTIONS, *allowed]
        lowered = {name.lower() for name in (*known, *SPARK_OPTIONS)}
        for name in self._options:
            if name not in lowered:
                raise unknown_option_error(name, known, what)

    def text(self, name: str, default: str | None = None) -> str | None:
        """The option ``name`` as given, or ``default``."""
        return self._options.get(name.lower(), default)

    def required(self, name: str) -> str:
        """The option ``name``, which must be given and not empty.

        Raises:
            InvalidArgumentError: It is missing or empty.
        """
        value = self.text(name)
        if not value:
            raise InvalidArgumentError(f"the option {name!r} is required")
        return value

    def _parsed(self, name: str, kind: type[T], what: str, minimum: T) -> T | None:
        """The option ``name`` converted by ``kind``, at least ``minimum``; None when not given.

        Raises:
            InvalidArgumentError: It does not convert, or is out of range.
        """
        value = self.text(name)
        if value is None or value == "":
            return None
        try:
            number = kind(value)
        except ValueError:
            raise InvalidArgumentError(
                f"the option {name!r} must be {what}, not {value!r}"
            ) from None
        if not math.isfinite(number) or number < minimum:
            raise InvalidArgumentError(f"the option {name!r} must be at least {minimum}")
        return number

    def optional_number(self, name: str, minimum: float = 0) -> float | None:
        """The option ``name`` as a finite number of at least ``minimum``; None when not given.

        Raises:
            InvalidArgumentError: It is not such a number.
        """
        return self._parsed(name, float, "a number", float(minimum))

    def number(self, name: str, default: float, minimum: float = 0) -> float:
        """The option ``name`` as a finite number of at least ``minimum``, or ``default``.

        Raises:
            InvalidArgumentError: It is not such a number.
        """
        value = self.optional_number(name, minimum)
        return default if value is None else value

    def optional_integer(self, name: str, minimum: int = 1) -> int | None:
        """The option ``name`` as an int of at least ``minimum``; None when not given.

        Raises:
            InvalidArgumentError: It is not such an int.
        """
        return self._parsed(name, int, "an integer", minimum)

    def integer(self, name: str, default: int, minimum: int = 1) -> int:
        """The option ``name`` as an int of at least ``minimum``, or ``default``.

        Raises:
            InvalidArgumentError: It is not such an int.
        """
        value = self.optional_integer(name, minimum)
        return default if value is None else value


def _flag(options: Options, name: str) -> bool:
    value = (options.text(name) or "false").lower()
    if value not in ("true", "false"):
        raise InvalidArgumentError(f"the option {name!r} is 'true' or 'false', not {value!r}")
    return value == "true"


@dataclass(frozen=True)
class QueueOptions:
    """Where the queue is, and how every task connects to it.

    Attributes:
        url: The Redis URL (``url`` option, else the ``REDIS_URL`` environment variable of the
            driver): ``redis://`` or ``rediss://`` (TLS), with a password if need be; opened with
            ``from_url`` in every task. Without ``sentinels``, it is required.
        queue: The queue's key prefix (``queue`` option, or the path of ``load``/``save``).
        max_deliveries: The queue's delivery limit (``maxDeliveries``), or None.
        cluster: The URL names a node of a Redis Cluster (``cluster``: true or false); the queue
            must then be hash-tagged (``{jobs}``) so that its keys share a slot.
        sentinels: ``host:port`` of Sentinels (``sentinels``, comma-separated), which name the
            primary of ``sentinel_master``; None without Sentinel.
        sentinel_master: The service name Sentinel knows the primary by (``sentinelMaster``).
        username: The ACL user (``username``), or None (the URL's, if any).
        password: The password (``password``), or None (the URL's, if any).
        tls_ca_certs: A CA bundle to check the server's certificate with (``tlsCaCerts``; a
            ``rediss://`` URL turns TLS on).
    """

    url: str
    queue: str
    max_deliveries: int | None
    cluster: bool = False
    sentinels: tuple[tuple[str, int], ...] | None = None
    sentinel_master: str = "mymaster"
    username: str | None = None
    password: str | None = None
    tls_ca_certs: str | None = None

    @classmethod
    def parse(cls, options: Options) -> QueueOptions:
        """Read the options shared by reads and writes.

        Raises:
            InvalidArgumentError: No URL (nor Sentinels), no queue, or a bad option.
        """
        sentinels = cls._sentinels(options.text("sentinels"))
        url = options.text("url") or os.environ.get("REDIS_URL") or ""
        if not url and sentinels is None:
            raise InvalidArgumentError(
                "give the Redis URL with the option 'url' (or REDIS_URL), or 'sentinels'"
            )
        queue, path = options.text("queue"), options.text("path")
        if queue and path and queue != path:
            raise InvalidArgumentError(
                f"the option 'queue' ({queue!r}) and the path ({path!r}) name different queues: "
                "give one of them"
            )
        if not (queue or path):
            raise InvalidArgumentError(
                "the option 'queue' is required (or name the queue as the path: load('jobs'))"
            )
        clustered = _flag(options, "cluster")
        if clustered and sentinels is not None:
            raise InvalidArgumentError("give 'cluster' or 'sentinels', not both")
        made = cls(
            url=url,
            queue=queue or path or "",
            max_deliveries=options.optional_integer("maxDeliveries"),
            cluster=clustered,
            sentinels=sentinels,
            sentinel_master=options.text("sentinelMaster") or "mymaster",
            username=options.text("username") or None,
            password=options.text("password") or None,
            tls_ca_certs=options.text("tlsCaCerts") or None,
        )
        if clustered and not routing.same_slot(_queue_keys(made.queue)):
            raise InvalidArgumentError(
                f"on Redis Cluster the queue needs a hash tag so that its keys share a slot: "
                f"name it {{{made.queue}}} rather than {made.queue!r}"
            )
        return made

    @staticmethod
    def _sentinels(text: str | None) -> tuple[tuple[str, int], ...] | None:
        if not text:
            return None
        found = []
        for part in text.split(","):
            host, _, port = part.strip().rpartition(":")
            if not host or not port.isdigit():
                raise InvalidArgumentError(
                    f"the option 'sentinels' is a list of host:port, not {text!r}"
                )
            found.append((host, int(port)))
        return tuple(found)

    def __repr__(self) -> str:
        """The options, with the password and the URL's credentials hidden."""
        return (
            f"QueueOptions(url={mask(self.url)!r}, queue={self.queue!r}, "
            f"cluster={self.cluster}, sentinels={self.sentinels})"
        )

    def work_queue(self) -> WorkQueue:
        """The queue these options name."""
        return WorkQueue(KeyPrefix(self.queue), max_deliveries=self.max_deliveries)


def _queue_keys(queue: str) -> list[str]:
    keys = QueueKeys(KeyPrefix(queue))
    return [keys.queue, keys.processing, keys.delayed, keys.dead, keys.spark_write]


@dataclass(frozen=True)
class WriteOptions:
    """How rows become items.

    Attributes:
        where: The queue.
        id_column: The column whose value is each item's id (``idColumn``); None gives every
            row a fresh UUIDv7 id.
        data_column: The column holding each item's data (``dataColumn``); None makes the whole
            row, as compact JSON, the data.
        delay: Seconds each item is held back (``delaySeconds``), or None.
        ttl: Seconds each item lives (``ttlSeconds``), or None.
        chunk_size: Most rows per add (``chunkSize``; 5000); one script call per 500 items at
            most.
        chunk_bytes: Most bytes of data per add (``chunkBytes``).
        skip_bad_rows: What a row with a null (or empty) id or null data does (``badRows``):
            ``fail`` (False, the default) fails its task before it adds anything; ``skip``
            (True) leaves the row out and counts it.
        report_key: The hash that receives the totals of each commit (``reportKey``; the empty
            string turns the report off).
    """

    where: QueueOptions
    id_column: str | None
    data_column: str | None
    delay: float | None
    ttl: float | None
    chunk_size: int
    chunk_bytes: int
    skip_bad_rows: bool
    report_key: str | None

    @classmethod
    def parse(cls, options: Options) -> WriteOptions:
        """Read the options of a write.

        Raises:
            InvalidArgumentError: An option is unknown, missing or out of range.
        """
        options.check_names(WRITE_OPTIONS, "write")
        where = QueueOptions.parse(options)
        ttl = options.optional_number("ttlSeconds", minimum=0.001)
        report = options.text("reportKey")
        bad_rows = (options.text("badRows") or "fail").lower()
        if bad_rows not in ("fail", "skip"):
            raise InvalidArgumentError(
                f"the option 'badRows' is 'fail' (the default) or 'skip', not {bad_rows!r}"
            )
        return cls(
            where=where,
            id_column=options.text("idColumn") or None,
            data_column=options.text("dataColumn") or None,
            delay=options.optional_number("delaySeconds"),
            ttl=ttl,
            chunk_size=options.integer("chunkSize", 5000),
            chunk_bytes=options.integer("chunkBytes", 4 << 20),
            skip_bad_rows=bad_rows == "skip",
            report_key=report_key(where.queue) if report is None else (report or None),
        )


@dataclass(frozen=True)
class ReadOptions:
    """How a snapshot is read.

    Attributes:
        where: The queue.
        partition_size: Entries of a list or set per Spark partition (``partitionSize``).
        chunk_size: Entries per script call (``chunkSize``).
        chunk_bytes: Most bytes of data per script call (``chunkBytes``).
    """

    where: QueueOptions
    partition_size: int
    chunk_size: int
    chunk_bytes: int

    @classmethod
    def parse(cls, options: Options, strict: bool = True) -> ReadOptions:
        """Read the options of a batch read.

        Args:
            options: The options.
            strict: Refuse options a batch read does not take.

        Raises:
            InvalidArgumentError: An option is unknown, missing or out of range.
        """
        if strict:
            options.check_names(READ_OPTIONS, "batch read")
        return cls(
            where=QueueOptions.parse(options),
            partition_size=options.integer("partitionSize", 10_000),
            chunk_size=options.integer("chunkSize", 500),
            chunk_bytes=options.integer("chunkBytes", 4 << 20),
        )


@dataclass(frozen=True)
class StreamOptions:
    """How a streaming read leases.

    Attributes:
        where: The queue.
        max_items: Most items leased per micro-batch (``maxItemsPerBatch``; 100,000).
        max_bytes: About the most bytes of data leased per micro-batch (``maxBytesPerBatch``;
            16 MB): leasing stops once it is reached.
        lease_secs: Length of each lease (``leaseSeconds``); renewed while the batch runs.
        renew_secs: Seconds between renewals (``renewSeconds``; a third of the lease).
        clean_secs: Seconds between light cleans run by the query (``cleanSeconds``; the lease
            length by default; 0 never cleans).
        partitions: Spark partitions per micro-batch (``numPartitions``).
        chunk_size: Items per script call when tasks fetch data (``chunkSize``).
        chunk_bytes: Most bytes of data per script call (``chunkBytes``).
    """

    where: QueueOptions
    max_items: int
    max_bytes: int
    lease_secs: float
    renew_secs: float
    clean_secs: float
    partitions: int
    chunk_size: int
    chunk_bytes: int

    @classmethod
    def parse(cls, options: Options, strict: bool = True) -> StreamOptions:
        """Read the options of a streaming read, renewals more often than the lease runs out.

        Args:
            options: The options.
            strict: Refuse options a streaming read does not take.

        Raises:
            InvalidArgumentError: An option is unknown, missing or out of range, or
                ``renewSeconds`` is not below ``leaseSeconds``.
        """
        if strict:
            options.check_names(STREAM_OPTIONS, "streaming read")
        lease = options.number("leaseSeconds", 60.0, minimum=0.01)
        renew = options.number("renewSeconds", lease / 3, minimum=0.005)
        if renew >= lease:
            raise InvalidArgumentError("the option 'renewSeconds' must be below 'leaseSeconds'")
        return cls(
            where=QueueOptions.parse(options),
            max_items=options.integer("maxItemsPerBatch", 100_000),
            max_bytes=options.integer("maxBytesPerBatch", 16 << 20),
            lease_secs=lease,
            renew_secs=renew,
            clean_secs=options.number("cleanSeconds", lease),
            partitions=options.integer("numPartitions", 2),
            chunk_size=options.integer("chunkSize", 500),
            chunk_bytes=options.integer("chunkBytes", 4 << 20),
        )


def check_read(options: Options) -> None:
    """Check the options of a read, batch or streaming, when it is loaded.

    ``load()`` does not say which kind of read it makes, so a name either kind takes passes
    here; each kind refuses the other's names when its reader is made.

    Raises:
        InvalidArgumentError: An option is unknown to both kinds, missing or out of range.
    """
    options.check_names((*READ_OPTIONS, *STREAM_OPTIONS), "read")
    ReadOptions.parse(options, strict=False)
    StreamOptions.parse(options, strict=False)


class Configured(Generic[Parsed]):
    """A reader's parsed options and the schema of its read, as Spark hands them over.

    Args:
        options: The parsed options.
        schema: The schema of the read.
    """

    def __init__(self, options: Parsed, schema: StructType) -> None:
        self.options = options
        self.schema = schema
