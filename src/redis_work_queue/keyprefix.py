"""Key names: every Redis key of a queue is named here, from the layout table of :mod:`.layout`."""

from __future__ import annotations

import re

from . import layout
from .errors import InvalidArgumentError, InvalidArgumentTypeError
from .layout import PER_KEY_NAMES, RESERVED_NAMES

__all__ = [
    "PER_KEY_NAMES",
    "RESERVED_NAMES",
    "KeyPrefix",
    "QueueKeys",
    "check_queue_name",
    "glob_escape",
]

_GLOB_SPECIAL = re.compile(r"([*?\[\]\\])")

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
    if prefix.startswith("\0"):
        raise InvalidArgumentError(
            f"the queue name {prefix!r} starts with a NUL character, which the scripts read as "
            "the start of the events setting: drop the leading '\\0'"
        )
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


#: (QueueKeys attribute, suffix) of every row of the layout, in its order.
_SUFFIXES = tuple((row.attribute, row.suffix) for row in layout.ROWS)
_FIXED = tuple(row.attribute for row in layout.FIXED)
_PER_KEY = tuple(row.attribute for row in layout.PER_KEY)


class QueueKeys:
    """The key layout of one queue: the name of every key, made once.

    The layout is declared in :mod:`redis_work_queue.layout`, one row per key: its suffix after
    the prefix, its Redis type, who writes it and what it holds (the wire contract's key table
    is made from it). Each row gives an attribute here, holding the key (``queue`` is
    ``<prefix>:queue``) or, for a key per item, worker or Spark batch, its prefix
    (``item_prefix`` is ``<prefix>:item:``, and :meth:`item` names one item's key).

    Only four keys are shared with every client of the design: ``<prefix>:queue`` and
    ``<prefix>:processing`` are lists of ids; ``<prefix>:item:<id>`` holds an item's data and
    ``<prefix>:lease:<id>`` its lease (with an expiry). The names the layout uses are
    :data:`RESERVED_NAMES`; queue names are checked by :func:`check_queue_name`.
    """

    # For the type checker: every attribute and value below comes from layout.ROWS (a test
    # checks that these annotations name exactly the attributes the rows give).
    queue: str
    processing: str
    item_prefix: str
    lease_prefix: str
    deliveries: str
    reasons: str
    dead: str
    dead_prefix: str
    delayed: str
    waiting: str
    wake: str
    spark_write: str
    spark_batch_prefix: str
    cleaned: str
    workers: str
    worker_prefix: str
    counts: str
    durations: str
    schedules: str
    schedules_data: str
    schedules_due: str
    schedules_last: str
    schedules_turn: str
    result_prefix: str
    progress_prefix: str
    rate: str
    events: str
    groups: str
    groups_state: str
    groups_backlog: str
    groups_paced: str
    grouped: str
    group_prefix: str
    removals: str
    #: The queue's key prefix.
    prefix: str
    #: The KEYS and the first ARGV of one queue in every queue-level script: the scripts name
    #: the other keys from the prefix (see lua/include/queue.lua).
    script_keys: tuple[str, ...]
    script_args: tuple[str, ...]
    #: Every key of the queue that is not per item (:meth:`fixed`): a call on Redis Cluster is
    #: checked to touch one slot with them.
    slot_keys: tuple[str, ...]

    __slots__ = ("prefix", "script_args", "script_keys", "slot_keys", *layout.ATTRIBUTES)

    def __init__(
        self, prefix: KeyPrefix, events_maxlen: int | None = None, keep_results_ms: int = 0
    ) -> None:
        r"""Name the keys of the queue ``prefix``.

        Args:
            prefix: The queue's key prefix.
            events_maxlen: With events on (see :mod:`~.ops.events`), the cap of ``P:events``.
                None: events off.
            keep_results_ms: With ``keep_results``, how long a result (or a dead item's
                failure record) is kept, in ms; 0: results are not kept.

        With events on or results kept, the scripts' argument carries the settings before the
        prefix (``\\0<cap>\\0<prefix>``, ``\\0:<keep ms>\\0<prefix>`` or
        ``\\0<cap>:<keep ms>\\0<prefix>``, read by ``lua/include/queue.lua``); otherwise it is
        the prefix alone.

        Raises:
            InvalidArgumentError: The name clashes with another queue's keys (see
                :func:`check_queue_name`).
        """
        name = self.prefix = check_queue_name(prefix.prefix)
        for attribute, suffix in _SUFFIXES:
            setattr(self, attribute, name + suffix)
        self.script_keys = (self.queue,)
        settings = ("" if events_maxlen is None else str(events_maxlen)) + (
            f":{keep_results_ms}" if keep_results_ms else ""
        )
        self.script_args = (f"\0{settings}\0{name}",) if settings else (name,)
        self.slot_keys = tuple(getattr(self, attribute) for attribute in _FIXED)

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

    def result(self, item_id: str) -> str:
        """The kept result of ``item_id`` (a list of one entry)."""
        return self.result_prefix + item_id

    def progress(self, item_id: str) -> str:
        """The last progress report of the leased ``item_id``."""
        return self.progress_prefix + item_id

    def group(self, name: str) -> str:
        """The list of the ready ids of group ``name``."""
        return self.group_prefix + name

    def item_pattern(self) -> str:
        """A SCAN MATCH pattern for this queue's data keys, with the prefix glob-escaped."""
        return glob_escape(self.item_prefix) + "*"

    def patterns(self) -> tuple[str, ...]:
        """SCAN MATCH patterns for the queue's keys that are not fixed, prefix glob-escaped.

        They cover every family of keys of the layout (item data, leases, dead letters, the
        Spark data source's batch records, the workers' registrations): each is
        ``<prefix>:<name>:*`` for a name of :data:`PER_KEY_NAMES`, which no other queue's keys
        can match (:func:`check_queue_name`).
        """
        return tuple(glob_escape(getattr(self, attribute)) + "*" for attribute in _PER_KEY)

    def fixed(self) -> tuple[str, ...]:
        """Every key of the queue that is not per item."""
        return self.slot_keys
