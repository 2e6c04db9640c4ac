"""Key names: every Redis key of a queue is built here and nowhere else."""

from __future__ import annotations

import re

from .errors import InvalidArgumentError, InvalidArgumentTypeError

_GLOB_SPECIAL = re.compile(r"([*?\[\]\\])")

#: The names the key layout uses after a queue's prefix: ``<prefix>:<name>`` or
#: ``<prefix>:<name>:<id>``. A queue may be named ``<prefix>:<name>`` for any name but those in
#: :data:`PER_KEY_NAMES`: its keys then never meet those of queue ``<prefix>``.
RESERVED_NAMES = (
    "queue",
    "processing",
    "item",
    "lease",
    "deliveries",
    "reasons",
    "delayed",
    "dead",
    "waiting",
    "wake",
    "spark",
    "workers",
    "worker",
    "cleaned",
    "counts",
    "durations",
)
#: The names under which a queue keeps one key per item (per worker, per Spark batch), found by
#: pattern (``<prefix>:<name>:*``) by the flush and the deep clean. A queue whose name holds one
#: of them as whole segments after a colon (``x:item``, ``x:dead:y``, ``x:spark:batch``) would
#: have its keys taken for another queue's, so such names are refused.
PER_KEY_NAMES = ("item", "lease", "dead", "worker", "spark:batch")
_CLASHING = re.compile(":(" + "|".join(re.escape(n) for n in PER_KEY_NAMES) + ")(?=:|$)")


def glob_escape(text: str) -> str:
    r"""Escape the characters that Redis glob patterns (SCAN MATCH) treat specially.

    Args:
        text: A literal string, such as a key prefix.

    Returns:
        The string with ``*``, ``?``, ``[``, ``]`` and ``\\`` each preceded by a backslash.
    """
    return _GLOB_SPECIAL.sub(r"\\\1", text)


class KeyPrefix:
    """A string prefixed to a name to make a Redis key.

    Example:
        >>> KeyPrefix("cv:").of("abc")
        'cv:abc'
    """

    __slots__ = ("prefix",)

    def __init__(self, prefix: str) -> None:
        if not isinstance(prefix, str):
            raise InvalidArgumentTypeError(
                f"a key prefix must be a str, not {type(prefix).__name__}: "
                f"write KeyPrefix({str(prefix)[:40]!r})"
            )
        self.prefix = prefix

    def of(self, name: str) -> str:
        """Return ``name`` with this prefix in front of it.

        Raises:
            InvalidArgumentTypeError: ``name`` is not a str.
        """
        if not isinstance(name, str):
            raise InvalidArgumentTypeError(
                f"a key name must be a str, not {type(name).__name__}: write .of(str(name))"
            )
        return self.prefix + name

    @classmethod
    def concat(cls, prefix: KeyPrefix, name: str) -> KeyPrefix:
        """Return a new prefix: ``prefix`` followed by ``name``.

        Raises:
            InvalidArgumentTypeError: ``prefix`` is not a KeyPrefix, or ``name`` not a str.
        """
        if not isinstance(prefix, KeyPrefix):
            raise InvalidArgumentTypeError(
                f"KeyPrefix.concat takes a KeyPrefix first, not {type(prefix).__name__}: "
                "write KeyPrefix.concat(KeyPrefix(prefix), name)"
            )
        return cls(prefix.of(name))

    def __repr__(self) -> str:
        return f"KeyPrefix({self.prefix!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KeyPrefix) and other.prefix == self.prefix

    def __hash__(self) -> int:
        return hash(self.prefix)


def check_queue_name(prefix: str) -> str:
    """Refuse a queue name whose keys another queue's patterns would match.

    Args:
        prefix: The queue's key prefix.

    Returns:
        ``prefix``, unchanged.

    Raises:
        InvalidArgumentError: The name holds a name of :data:`PER_KEY_NAMES` as whole segments
            after a colon: the flush and deep clean of the queue named by what comes before
            would take this queue's keys for their own.
    """
    found = _CLASHING.search(prefix)
    if found is None:
        return prefix
    owner, name = prefix[: found.start()], found.group(1)
    renamed = prefix[: found.end()] + "s" + prefix[found.end() :]
    raise InvalidArgumentError(
        f"the queue name {prefix!r} holds the reserved segment ':{name}': queue {owner!r} keeps "
        f"one key per item under '{owner}:{name}:', so its flush and deep clean would take this "
        f"queue's keys for its own. Rename that segment (for example {renamed!r}); reserved "
        f"after a colon: {', '.join(PER_KEY_NAMES)}"
    )


class QueueKeys:
    """The key layout of one queue, as shared with every client of the design.

    ``<prefix>:queue`` and ``<prefix>:processing`` are lists of ids; ``<prefix>:item:<id>`` holds
    an item's data and ``<prefix>:lease:<id>`` its lease (with an expiry).

    Besides those, the library keeps an item's delivery count in ``<prefix>:deliveries`` and
    its last failure reason in ``<prefix>:reasons`` (hashes, id -> value), delayed items in
    ``<prefix>:delayed`` (sorted set, id -> due time in ms) and dead letters in ``<prefix>:dead``
    (sorted set, id -> time buried in ms) with each one's data, delivery count and reason in the
    hash ``<prefix>:dead:<id>``. The Spark data source keeps the report of the last write in
    ``<prefix>:spark:write`` and its batch records under ``<prefix>:spark:batch:``.
    ``<prefix>:waiting`` (a sorted set: each blocked worker -> ms its registration lapses; the key
    expires with its last registration) and ``<prefix>:wake`` (a short list of wake-up tokens)
    wake workers that block on several queues at once. The worker runner keeps
    ``<prefix>:cleaned`` (a flag with an expiry: a worker ran the light clean lately),
    ``<prefix>:workers`` (sorted set, worker id -> ms its registration lapses) and each live
    worker's ``<prefix>:worker:<id>`` (hash; both expire with the fleet). The scripts count the
    items that took each path (added, completed, failed, retried, dead, expired, requeued) in the
    hash ``<prefix>:counts`` (counter name -> number of items). The workers keep a job-duration
    histogram in ``<prefix>:durations`` (a hash of counters, no expiry). The names the layout
    uses are :data:`RESERVED_NAMES`; queue names are checked by :func:`check_queue_name`.
    """

    __slots__ = (
        "cleaned",
        "counts",
        "dead",
        "dead_prefix",
        "delayed",
        "deliveries",
        "durations",
        "item_prefix",
        "lease_prefix",
        "prefix",
        "processing",
        "queue",
        "reasons",
        "script_args",
        "script_keys",
        "spark_batch_prefix",
        "spark_write",
        "waiting",
        "wake",
        "worker_prefix",
        "workers",
    )

    def __init__(self, prefix: KeyPrefix) -> None:
        """Name the keys of the queue ``prefix``.

        Raises:
            InvalidArgumentError: The name clashes with another queue's keys (see
                :func:`check_queue_name`).
        """
        self.prefix = check_queue_name(prefix.prefix)
        self.queue = prefix.of(":queue")
        self.processing = prefix.of(":processing")
        self.item_prefix = prefix.of(":item:")
        self.lease_prefix = prefix.of(":lease:")
        self.deliveries = prefix.of(":deliveries")
        self.reasons = prefix.of(":reasons")
        self.dead = prefix.of(":dead")
        self.dead_prefix = prefix.of(":dead:")
        self.delayed = prefix.of(":delayed")
        self.waiting = prefix.of(":waiting")
        self.wake = prefix.of(":wake")
        self.spark_write = prefix.of(":spark:write")
        self.spark_batch_prefix = prefix.of(":spark:batch:")
        self.cleaned = prefix.of(":cleaned")
        self.workers = prefix.of(":workers")
        self.worker_prefix = prefix.of(":worker:")
        self.counts = prefix.of(":counts")
        self.durations = prefix.of(":durations")
        #: The KEYS and the first ARGV of one queue in every queue-level script: the scripts
        #: name the other keys from the prefix, as above (see lua/include/queue.lua).
        self.script_keys = (self.queue,)
        self.script_args = (self.prefix,)

    def item(self, item_id: str) -> str:
        """The data key of ``item_id``."""
        return self.item_prefix + item_id

    def lease(self, item_id: str) -> str:
        """The lease key of ``item_id``."""
        return self.lease_prefix + item_id

    def dead_item(self, item_id: str) -> str:
        """The key of ``item_id``'s dead letter."""
        return self.dead_prefix + item_id

    def worker(self, worker_id: str) -> str:
        """The registration (hash) of the worker ``worker_id``."""
        return self.worker_prefix + worker_id

    def spark_batch(self, batch: str) -> str:
        """The record of the items a Spark streaming read leased for one micro-batch."""
        return self.spark_batch_prefix + batch

    def item_pattern(self) -> str:
        """A SCAN MATCH pattern for this queue's data keys, with the prefix glob-escaped."""
        return glob_escape(self.item_prefix) + "*"

    def patterns(self) -> tuple[str, ...]:
        """SCAN MATCH patterns for the queue's keys that are not fixed, prefix glob-escaped.

        They cover item data, leases, dead letters, the Spark data source's batch records and
        the workers' registrations: each is ``<prefix>:<name>:*`` for a name of
        :data:`PER_KEY_NAMES`, which no other queue's keys can match (:func:`check_queue_name`).
        """
        prefixes = (
            self.item_prefix,
            self.lease_prefix,
            self.dead_prefix,
            self.spark_batch_prefix,
            self.worker_prefix,
        )
        return tuple(glob_escape(p) + "*" for p in prefixes)

    def fixed(self) -> tuple[str, ...]:
        """Every key of the queue that is not per item."""
        return (
            self.queue,
            self.processing,
            self.deliveries,
            self.reasons,
            self.dead,
            self.delayed,
            self.waiting,
            self.wake,
            self.spark_write,
            self.cleaned,
            self.workers,
            self.counts,
            self.durations,
        )
