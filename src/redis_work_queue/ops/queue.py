"""The queue's operations, each written once as a generator of Redis calls (see :mod:`..calls`).

This module builds script arguments and parses replies; it never talks to Redis itself. The
argument builders of the scripts it runs come first (one per script, see
:func:`.registry.builds`), then :class:`QueueOps`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from functools import partial
from typing import Any, NamedTuple

from .. import scripts
from ..calls import Command, Pipelined, ScriptCall, Steps
from ..clients import Reply
from ..errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    OutcomeUnknownError,
    ReplicationError,
)
from ..flow import (
    GroupArg,
    GroupStats,
    RateLimit,
    check_group,
    check_groups,
    parse_cap,
    parse_rate,
    parse_rate_spec,
)
from ..item import Item
from ..keyprefix import QueueKeys
from ..results import (
    CleanReport,
    DeadLetter,
    FlushReport,
    PendingItem,
    ProgressCallback,
    QueueCounts,
    QueuedItem,
    QueueStats,
    Released,
    Renewed,
)
from ..validation import (
    MAX_SECS,
    check_ids,
    check_item,
    check_item_id,
    check_max_deliveries,
    check_page,
    check_preview,
    check_replicas,
    check_result,
    decode,
    held_token,
    new_token,
    to_ms,
    when_due,
)
from . import cleaning
from .events import events_cap
from .lease import (
    LEASE_BUDGET,
    LEASE_CHUNK,
    TICK_SECS,
    WAIT_SLICE_SECS,
    LeasePlan,
    LeaseRequest,
    lease_items,
    lease_request,
)
from .registry import Operation, builds, operation, register

logger = logging.getLogger("redis_work_queue")

#: What this module names for other modules: its own operations, and (re-exported) the results
#: and checks that used to live here.
__all__ = [
    "ADD_CHUNK",
    "ADD_CHUNK_BYTES",
    "COMPLETE_CHUNK",
    "DEAD_CHUNK",
    "FLUSH_CHUNK",
    "LEASE_BUDGET",
    "LEASE_CHUNK",
    "MAX_SECS",
    "PIPELINE_CHUNK",
    "SCAN_COUNT",
    "STATS_CHUNK",
    "TICK_SECS",
    "WAIT_SLICE_SECS",
    "DeadLetter",
    "FlushReport",
    "LeasePlan",
    "LeaseRequest",
    "PendingItem",
    "QueueCounts",
    "QueueOps",
    "QueueStats",
    "QueuedItem",
    "Released",
    "check_item",
    "check_max_deliveries",
    "check_page",
    "check_replicas",
    "decode",
    "held_token",
    "lease_items",
    "new_token",
    "parse_counts",
    "to_ms",
    "when_due",
]

#: The COUNT hint of each SCAN step of a flush.
SCAN_COUNT = 1000
#: Dead letters requeued or purged per script call.
DEAD_CHUNK = 500
#: Items added per script call, and the most bytes of data one call carries.
ADD_CHUNK = 500
ADD_CHUNK_BYTES = 4 << 20
#: Items completed per script call.
COMPLETE_CHUNK = 500
#: Processing-list entries whose lease one stats call checks.
STATS_CHUNK = 2000
#: The most groups one ``stats`` call reads.
STATS_GROUPS = 1000
#: Keys one flush step deletes.
FLUSH_CHUNK = 1000
#: Script calls sent per round trip by the operations that make many independent calls.
PIPELINE_CHUNK = 1000


#: Where the docs describe the operations of the queues.
API = "queue.md#the-api"
#: The WAIT that follows a write: (replicas, timeout in ms), or None.
Wait = tuple[int, int] | None


class Adding(NamedTuple):
    """The options of an add, as the public methods take them; checked when the add runs."""

    #: Seconds from now, or an aware ``datetime``, when the item falls due; None: now.
    delay: float | datetime | None = None
    #: Seconds the item lives; None: until it is completed.
    ttl: float | None = None
    #: Replicas that must acknowledge the add; None: the queue's own setting.
    replicas: int | None = None
    #: The items' group: one for all, or one (or None) per item; None: the main queue.
    group: GroupArg = None

    @property
    def plain(self) -> bool:
        """No option is given."""
        return (
            self.delay is None and self.ttl is None and self.replicas is None and self.group is None
        )


#: The registration of an operation that writes, documented with the API.
_writing = partial(operation, writes=True, docs=API)
#: The registration of the leasing operations, which differ only in their method.
_leasing = partial(
    operation,
    scripts=("lease", "claim", "set_rate", "group_set"),
    commands=("BRPOPLPUSH",),
    writes=True,
    docs=API,
)
#: The registration of a writing operation sent as independent calls in pipelines.
_pipelined_op = partial(operation, commands=("SCRIPT|EXISTS", "SCRIPT|LOAD"), writes=True, docs=API)

#: An add with no option: the common case.
PLAIN = Adding()
#: Makes the call that adds a chunk of checked items to a queue (see :meth:`QueueOps.add`).
AddCall = Callable[["QueueOps", Sequence[Item]], ScriptCall]


# The scripts' argument builders -------------------------------------------------------------


@builds("add")
def add_call(
    keys: QueueKeys,
    skip_check: str,
    delay_ms: int,
    due_ms: int,
    ttl_ms: int,
    grouped: str,
    *items: scripts.Arg,
    wait: Wait = None,
) -> ScriptCall:
    """``lua/add.lua``: add ``items`` (an id, then its data, for each).

    With ``grouped`` ``'1'``, each item's group follows its data (``''`` for none). The call is
    made here, not by :meth:`ScriptCall.on`: adding is a hot path.
    """
    args = (*keys.script_args, skip_check, delay_ms, due_ms, ttl_ms, grouped, *items)
    return ScriptCall(scripts.load("add"), keys.script_keys, args, wait, keys.slot_keys)


@builds("renew")
def renew_call(keys: QueueKeys, item_id: str, token: str, lease_ms: int) -> ScriptCall:
    """``lua/renew.lua``: extend the lease on ``item_id`` while it holds ``token``."""
    return ScriptCall.on(keys, "renew", item_id, token, lease_ms)


@builds("release")
def release_call(
    keys: QueueKeys,
    item_id: str,
    token: str,
    delay_ms: int,
    max_deliveries: int,
    undo: str,
    reason: str | None = None,
) -> ScriptCall:
    """``lua/release.lua``: give ``item_id`` back while it holds ``token``."""
    reasons = () if reason is None else (reason,)
    return ScriptCall.on(keys, "release", item_id, token, delay_ms, max_deliveries, undo, *reasons)


@builds("complete")
def complete_call(keys: QueueKeys, *ids: str, wait: Wait = None) -> ScriptCall:
    """``lua/complete.lua``: complete the items ``ids``."""
    return ScriptCall.on(keys, "complete", *ids, wait=wait)


@builds("complete_result")
def complete_result_call(
    keys: QueueKeys, keep_ms: int, item_id: str, result: bytes, *, wait: Wait = None
) -> ScriptCall:
    """``lua/complete_result.lua``: complete ``item_id`` and keep ``result`` for ``keep_ms``."""
    return ScriptCall.on(keys, "complete_result", keep_ms, item_id, result, wait=wait)


@builds("stats")
def stats_call(keys: QueueKeys, first: int, last: int, top: int, *groups: str) -> ScriptCall:
    """``lua/stats.lua``: the queue's counts, with processing-list entries first..last.

    The counts of each of ``groups``, and of the ``top`` groups with the most items waiting,
    come with them.
    """
    return ScriptCall.on(keys, "stats", first, last, top, *groups)


@builds("peek")
def peek_call(keys: QueueKeys, first: int, last: int, preview: int) -> ScriptCall:
    """``lua/peek.lua``: the main queue's entries first..last (list indexes), with their data.

    ``preview`` is how many bytes of each item's data come back (-1: all of it).
    """
    return ScriptCall.on(keys, "peek", first, last, preview)


@builds("pending")
def pending_call(keys: QueueKeys, first: int, last: int) -> ScriptCall:
    """``lua/pending.lua``: the processing list's entries first..last, with their leases."""
    return ScriptCall.on(keys, "pending", first, last)


@builds("dead_letters")
def dead_letters_call(keys: QueueKeys, first: int, last: int, preview: int) -> ScriptCall:
    """``lua/dead_letters.lua``: the dead letters first..last, oldest first.

    ``preview`` is how many bytes of each dead letter's data come back (-1: all of it).
    """
    return ScriptCall.on(keys, "dead_letters", first, last, preview)


@builds("requeue_dead")
def requeue_dead_call(keys: QueueKeys, which: str, *chosen: scripts.Arg) -> ScriptCall:
    """``lua/requeue_dead.lua``: requeue the ``'oldest'`` count, or the ``'ids'``, chosen."""
    return ScriptCall.on(keys, "requeue_dead", which, *chosen)


@builds("purge_dead")
def purge_dead_call(keys: QueueKeys, which: str, *chosen: scripts.Arg) -> ScriptCall:
    """``lua/purge_dead.lua``: delete the ``'oldest'`` count, or the ``'ids'``, chosen."""
    return ScriptCall.on(keys, "purge_dead", which, *chosen)


#: The builders of the dead-letter actions, by script name.
_DEAD_ACTIONS = {"requeue_dead": requeue_dead_call, "purge_dead": purge_dead_call}


# Replies ------------------------------------------------------------------------------------


def parse_counts(reply: Any) -> QueueCounts:
    """A :class:`QueueCounts` from ``HGETALL <prefix>:counts`` (RESP2 list or RESP3 dict)."""
    pairs = reply.items() if isinstance(reply, dict) else zip(reply[::2], reply[1::2], strict=True)
    known = set(QueueCounts.__dataclass_fields__)
    found: dict[str, int] = {}
    for raw_name, raw_value in pairs:
        name = decode(raw_name)
        if name in known:
            found[name] = int(raw_value)
    return QueueCounts(**found)


def _group_names(groups: Iterable[str] | None) -> list[str]:
    """The names of ``stats``'s ``groups``, checked (at most :data:`STATS_GROUPS`)."""
    if groups is None:
        return []
    if isinstance(groups, str | bytes):
        raise InvalidArgumentTypeError(
            "stats's groups must be an iterable of group names, not one name: groups=[name]"
        )
    names = [check_group(name, "a name of stats's groups") for name in groups]
    if len(names) > STATS_GROUPS:
        raise InvalidArgumentError(
            f"stats reads at most {STATS_GROUPS} groups per call, got {len(names)}"
        )
    return names


def check_top_groups(top_groups: object) -> int:
    """``stats``'s ``top_groups``, checked: an int of 0 to :data:`STATS_GROUPS`.

    Raises:
        InvalidArgumentTypeError: It is not an int.
        InvalidArgumentError: It is out of range.
    """
    if isinstance(top_groups, bool) or not isinstance(top_groups, int):
        raise InvalidArgumentTypeError(
            f"stats's top_groups must be an int (how many groups), not {type(top_groups).__name__}"
        )
    if not 0 <= top_groups <= STATS_GROUPS:
        raise InvalidArgumentError(
            f"stats's top_groups must be 0 to {STATS_GROUPS}, got {top_groups}"
        )
    return top_groups


def _add_chunks(items: Sequence[Item]) -> Iterator[Sequence[Item]]:
    chunk: list[Item] = []
    size = 0
    for item in items:
        if chunk and (len(chunk) >= ADD_CHUNK or size + len(item.data()) > ADD_CHUNK_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(item)
        size += len(item.data())
    if chunk:
        yield chunk


def _parse_token(value: bytes | str | None) -> tuple[str | None, float | None]:
    if value is None:
        return None, None
    token = decode(value)
    _, at, ms = token.rpartition("@")
    return token, int(ms) / 1000 if at and ms.isdigit() else None


def _chunks(seq: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(seq), size):
        yield seq[start : start + size]


def _key_bytes(key: bytes | str) -> bytes:
    return key if isinstance(key, bytes) else key.encode("utf-8", "surrogateescape")


class QueueOps:
    """The operations of one queue, as generators of calls.

    Args:
        keys: The queue's key names.
        max_deliveries: Bury an item instead of handing it out more times than this; None for
            no limit.
    """

    def __init__(
        self,
        keys: QueueKeys,
        max_deliveries: int | None = None,
        replicas: int = 0,
        replica_timeout: float = 1.0,
        keep_results: float | None = None,
    ) -> None:
        self.keys = keys
        self.max_deliveries = check_max_deliveries(max_deliveries)
        self.replicas = check_replicas(replicas)
        self.replica_timeout_ms = to_ms(replica_timeout, "replica_timeout")
        #: How long a completed item's result is kept, in ms; 0: results are not kept.
        self.keep_results_ms = 0 if keep_results is None else to_ms(keep_results, "keep_results")
        #: This queue's part of every script's KEYS and ARGV, and the keys named from them.
        self.script_keys = keys.script_keys
        self.script_args = keys.script_args
        #: The cap of the queue's event stream, or None with events off.
        self.events_maxlen = events_cap(keys)
        self.slot_keys = keys.slot_keys
        self.plan = LeasePlan([self])
        #: What this queue's light cleans carry from one pass to the next.
        self.clean_state = cleaning.CleanState()
        #: The rate limit this queue object declares (see ``ops/flow.py``), and whether its
        #: declaration has been sent.
        self.rate_limit: RateLimit | None = None
        self.rate_declared = False
        #: The group concurrency this queue object declares, and whether it has been sent.
        self.group_concurrency: int | None = None
        self.cap_declared = False
        #: The rate limit of every group this queue object declares, and whether it was sent.
        self.group_rate_limit: RateLimit | None = None
        self.group_rate_declared = False

    def group_keys(self) -> QueueKeys:
        """The keys that hold the queue's groups (see ``lua/include/group.lua``)."""
        return self.keys

    def _wait(self, replicas: int | None) -> tuple[int, int] | None:
        """The WAIT of a write: the call's ``replicas`` or else the queue's; None for none."""
        wanted = self.replicas if replicas is None else check_replicas(replicas)
        return (wanted, self.replica_timeout_ms) if wanted else None

    @staticmethod
    def _check_acked(wait: tuple[int, int] | None, reply: Reply, done: object) -> Reply:
        """Split a reply of a call made with ``wait``; raise when too few replicas acked."""
        if wait is None:
            return reply
        value, acked = reply
        if acked < wait[0]:
            raise ReplicationError(acked, wait[0], wait[1], done)
        return value

    # Adding -----------------------------------------------------------------------------------

    def checked_add(
        self,
        items: Sequence[Item],
        skip_check: bool,
        delay: float | datetime | None = None,
        ttl: float | None = None,
        wait: Wait = None,
        groups: Sequence[str | None] | None = None,
    ) -> ScriptCall:
        """The one call that adds ``items``, checking that each id is new unless ``skip_check``.

        ``groups``, when given, holds each item's group (checked by :func:`check_groups`), or
        None for an item without one. The options are checked here; the items are not (see
        :func:`check_item`).
        """
        delay_ms, due_ms = when_due(delay)
        ttl_ms = 0 if ttl is None else to_ms(ttl, "ttl")
        fields: list[scripts.Arg] = []
        if groups is None:
            for item in items:
                fields += (item.id(), item.data())
        else:
            for item, group in zip(items, groups, strict=True):
                fields += (item.id(), item.data(), group or "")
        flag = "1" if skip_check else "0"
        grouped = "0" if groups is None else "1"
        return add_call(self.keys, flag, delay_ms, due_ms, ttl_ms, grouped, *fields, wait=wait)

    @_writing(
        methods=("add_item_to_pipeline", "add_unique_item_to_pipeline"),
        scripts=("add",),
        commands=("LLEN", "SCRIPT|EXISTS", "SCRIPT|LOAD"),
        via=("add_unique_item",),
    )
    def pipeline_add(self, item: Item) -> tuple[ScriptCall, Command]:
        """The calls that queue the add of one item whose id is new on a caller's pipeline.

        They leave two replies in the pipeline's results, shaped as the reference client's SET
        and LPUSH leave them: 1 (the item was stored) and the main queue's length after it.

        Raises:
            InvalidArgumentError: ``item`` is not an Item.
        """
        item = check_item(item)
        call = add_call(self.keys, "p", 0, 0, 0, "0", item.id(), item.data())
        return call, Command(("LLEN", self.keys.queue))

    @operation(methods=("add_items",), scripts=("add",), commands=("WAIT",), writes=True, docs=API)
    def add(
        self, items: Iterable[Item], skip_check: bool, options: Adding = PLAIN, *, one: bool = False
    ) -> Steps[list[bool]]:
        """Add items, in chunks; one flag per item, True when it was added.

        With ``one`` (a single item), a :class:`ReplicationError` carries that item's flag as
        its result and an :class:`OutcomeUnknownError` carries None; otherwise both carry the
        flags of the chunks written before. ``group``: see :func:`check_groups`.
        """
        checked = [check_item(item) for item in items]
        groups = check_groups(options.group, len(checked))
        if groups is not None:
            self.group_keys()
        delay, ttl = options.delay, options.ttl
        wait = self._wait(options.replicas)
        self.checked_add([], skip_check, delay, ttl)  # validates the options before sending

        # The chunks are made in order, one call each: the next chunk's groups start at done.
        done = 0

        def call(queue: QueueOps, chunk: Sequence[Item]) -> ScriptCall:
            nonlocal done
            chunk_groups = None if groups is None else groups[done : done + len(chunk)]
            done += len(chunk)
            return queue.checked_add(chunk, skip_check, delay, ttl, wait, chunk_groups)

        return (yield from self.add_checked(checked, skip_check, call, wait, one))

    def add_checked(
        self, items: list[Item], skip_check: bool, call: AddCall, wait: Wait, one: bool
    ) -> Steps[list[bool]]:
        """Send the adds of checked ``items``; ``call`` makes a chunk's call (see :meth:`add`)."""
        added: list[bool] = []
        for chunk in _add_chunks(items):
            try:
                reply: Reply = yield call(self, chunk)
            except OutcomeUnknownError as err:
                if not one:
                    err.result = added
                raise
            flags: list[int] = reply if wait is None else reply[0]
            added += (bool(flag) for flag in flags)
            self._check_acked(wait, reply, added[0] if one else added)
        return added

    def quick_add_keys(self, item_id: str, skip_check: bool) -> QueueKeys | None:
        """The keys of the queue a plain add of ``item_id`` goes to in one call, or None."""
        return self.keys

    @_writing(
        methods=("add_item", "add_unique_item"),
        scripts=("add",),
        commands=("WAIT",),
    )
    def add_one(self, item: Item, skip_check: bool, options: Adding = PLAIN) -> Steps[bool]:
        """Add one item; True when it was added."""
        if options.plain and not self.replicas:
            # The common case, kept short: it is a hot path.
            item = check_item(item)
            item_id = item.id()
            keys = self.quick_add_keys(item_id, skip_check)
            if keys is not None:
                flag = "1" if skip_check else "0"
                return bool((yield add_call(keys, flag, 0, 0, 0, "0", item_id, item.data()))[0])
        added = yield from self.add([item], skip_check, options, one=True)
        return added[0]

    # Leasing ----------------------------------------------------------------------------------

    @_leasing(methods=("lease_many",))
    def lease(
        self, lease_secs: float, block: bool, timeout: float, at_most_once: bool, count: int = 1
    ) -> Steps[list[Item]]:
        """Lease up to ``count`` items; see ``WorkQueue.lease``."""
        request = yield from lease_request(lease_secs, block, timeout, at_most_once, count)
        return (yield from self.lease_with(request))

    def lease_with(self, request: LeaseRequest) -> Steps[list[Item]]:
        """Lease for a checked ``request`` (see :func:`.lease.lease_request`)."""
        leased = yield from lease_items([self], request)
        return [item for _, item in leased]

    @_leasing(methods=("lease",))
    def lease_one(
        self, lease_secs: float, block: bool, timeout: float, at_most_once: bool = False
    ) -> Steps[Item | None]:
        """Lease one item, or None; see ``WorkQueue.lease``."""
        leased = yield from self.lease(lease_secs, block, timeout, at_most_once)
        return leased[0] if leased else None

    @operation(methods=("renew",), scripts=("renew",), writes=True, docs=API)
    def renew(self, item: Item, lease_secs: float) -> Steps[Renewed]:
        """Extend a held lease; what happened (true only when it was extended)."""
        return Renewed(int((yield self.checked_renew(item, lease_secs))))

    def checked_renew(self, item: Item, lease_secs: float) -> ScriptCall:
        """The one call of :meth:`renew` (its arguments are checked here)."""
        item, token = held_token(item)
        return renew_call(self.keys, item.id(), token, to_ms(lease_secs, "lease_secs"))

    @_pipelined_op(methods=("renew_many",), scripts=("renew",))
    def renew_many(self, items: Iterable[Item], lease_secs: float) -> Steps[list[bool]]:
        """Extend many held leases, one call each, sent together; one flag per item."""
        flags = yield from self._pipelined(
            [self.checked_renew(i, lease_secs) for i in items], renewed=True
        )
        return flags

    @_pipelined_op(methods=("give_back",), scripts=("release",))
    def give_back(self, items: Iterable[Item], reason: str | None) -> Steps[list[bool]]:
        """Release held items uncounted (as ``release(..., undo=True)``), sent together."""
        calls = [self.checked_release(i, 0, reason, undo=True) for i in items]
        return (yield from self._pipelined(calls))

    @staticmethod
    def _pipelined(calls: Sequence[ScriptCall], renewed: bool = False) -> Steps[list[bool]]:
        """Independent one-call operations, :data:`PIPELINE_CHUNK` per round trip; their flags.

        With ``renewed`` (renewals), a flag is True for a reply of 1 only (2: cancelled).
        """
        flags: list[bool] = []
        for chunk in _chunks(calls, PIPELINE_CHUNK):
            replies = yield Pipelined(tuple(chunk))
            flags += (int(reply) == 1 if renewed else bool(int(reply)) for reply in replies)
        return flags

    @operation(methods=("release",), scripts=("release",), writes=True, docs=API)
    def release(
        self, item: Item, delay: float, reason: str | None, undo: bool = False
    ) -> Steps[bool]:
        """Give a held item back; True when the caller held it.

        With ``undo`` the delivery is not counted and the item goes back to the leasing end, as
        if it had never been handed out (a worker that stops before starting the job).
        """
        return (yield from self.release_outcome(item, delay, reason, undo)) != Released.NOT_HELD

    @operation(methods=("release_outcome",), scripts=("release",), writes=True, docs=API)
    def release_outcome(
        self, item: Item, delay: float, reason: str | None, undo: bool = False
    ) -> Steps[Released]:
        """Give a held item back and say where it went; see :meth:`release`."""
        return Released(int((yield self.checked_release(item, delay, reason, undo))))

    def checked_release(
        self, item: Item, delay: float, reason: str | None, undo: bool = False
    ) -> ScriptCall:
        """The one call of :meth:`release_outcome` (its arguments are checked here)."""
        item, token = held_token(item)
        delay_ms = to_ms(delay, "delay", minimum=0)
        if reason is not None and not isinstance(reason, str):
            raise InvalidArgumentTypeError(f"reason must be a str, not {type(reason).__name__}")
        flag = "1" if undo else "0"
        return release_call(
            self.keys, item.id(), token, delay_ms, self.max_deliveries, flag, reason
        )

    # Completing -------------------------------------------------------------------------------

    @_writing(
        methods=("complete_many",),
        scripts=("complete",),
        commands=("WAIT",),
    )
    def complete(
        self, items: Iterable[Item], replicas: int | None = None, *, one: bool = False
    ) -> Steps[list[Item]]:
        """Complete items; returns those this call completed.

        With ``one`` (a single item), a :class:`ReplicationError` carries a bool as its result
        (True when this call completed it) and an :class:`OutcomeUnknownError` carries None;
        otherwise both carry the items of the chunks completed before.
        """
        checked = [check_item(item) for item in items]
        wait = self._wait(replicas)
        done: list[Item] = []
        for chunk in _chunks(checked, COMPLETE_CHUNK):
            try:
                reply: Reply = yield complete_call(self.keys, *(i.id() for i in chunk), wait=wait)
            except OutcomeUnknownError as err:
                if not one:
                    err.result = done
                raise
            flags: list[int] = reply if wait is None else reply[0]
            done += (item for item, flag in zip(chunk, flags, strict=True) if flag)
            self._check_acked(wait, reply, bool(done) if one else done)
        return done

    @_writing(
        methods=("complete",),
        scripts=("complete", "complete_result"),
        commands=("WAIT",),
    )
    def complete_one(
        self, item: Item, replicas: int | None = None, result: bytes | str | None = None
    ) -> Steps[bool]:
        """Complete one item; True for the one call that removed it.

        On a queue that keeps results, ``result`` (bytes, or str as UTF-8; None: empty) is kept
        with it, in the same script call.
        """
        if self.keep_results_ms or result is not None:
            return (yield from self._complete_kept(item, replicas, result))
        if replicas is None and not self.replicas:
            item = check_item(item)
            return bool((yield complete_call(self.keys, item.id()))[0])
        done = yield from self.complete([item], replicas, one=True)
        return bool(done)

    def _complete_kept(
        self, item: Item, replicas: int | None, result: bytes | str | None
    ) -> Steps[bool]:
        """Complete one item and keep its result (see :meth:`complete_one`)."""
        item = check_item(item)
        value = check_result(result, self.keep_results_ms)
        wait = self._wait(replicas)
        call = complete_result_call(self.keys, self.keep_results_ms, item.id(), value, wait=wait)
        reply: Reply = yield call
        done = bool(reply if wait is None else reply[0])
        self._check_acked(wait, reply, done)
        return done

    # Cleaning ---------------------------------------------------------------------------------

    @_writing(
        methods=("light_clean",),
        scripts=("light_clean", "forget_gone"),
        commands=("LLEN",),
        cli="light-clean",
    )
    def light_clean(self) -> Steps[CleanReport]:
        """One pass over the processing list; see ``WorkQueue.light_clean``."""
        return (yield from cleaning.light_clean(self, self.clean_state))

    def _scan(self, pattern: str) -> Steps[list[list[bytes]]]:
        """SCAN for ``pattern``; one list of keys per step."""
        batches: list[list[bytes]] = []
        cursor: Any = 0
        while True:
            scan = ("SCAN", cursor, "MATCH", pattern, "COUNT", SCAN_COUNT)
            cursor, found = yield Command(scan, route=self.keys.queue, slot_keys=self.slot_keys)
            if isinstance(cursor, dict):  # redis-py's cluster client: {node: cursor}
                (cursor,) = cursor.values()
            if found:
                batches.append([_key_bytes(key) for key in found])
            if int(cursor) == 0:
                return batches

    @_writing(
        methods=("deep_clean",),
        scripts=(
            "deep_clean_scan",
            "deep_clean_walk",
            "deep_clean_hold",
            "deep_clean_renew",
            "light_clean",
            "deep_clean",
            "forget_gone",
        ),
        commands=("LLEN", "EXISTS"),
        cli="deep-clean",
    )
    def deep_clean(self, progress: ProgressCallback | None = None) -> Steps[CleanReport]:
        """Recover every item not queued and not leased; see ``WorkQueue.deep_clean``."""
        return (yield from cleaning.deep_clean(self, new_token(), progress))

    # Inspection -------------------------------------------------------------------------------

    @operation(methods=("stats",), scripts=("stats",), cli="info", docs=API)
    def stats(self, groups: Iterable[str] | None = None, top_groups: int = 0) -> Steps[QueueStats]:
        """The queue's counts (and those of ``groups`` and the top groups); see the facade.

        The processing list is read in chunks; the groups' counts come with the first.
        """
        names = _group_names(groups)
        wanted = check_top_groups(top_groups)
        start = live = examined = gone = 0
        asked: list[Any] = []
        top: list[Any] = []
        while True:
            first = start == 0
            reply: list[Any] = yield stats_call(
                self.keys,
                start,
                start + STATS_CHUNK - 1,
                wanted if first else 0,
                *(names if first else ()),
            )
            if first:
                asked, top = reply[10], reply[12]
            queued, processing, delayed, dead, seen, alive, done = (int(v) for v in reply[:7])
            examined += seen
            live += alive
            gone += done  # entries of completed items, awaiting a light clean
            start += STATS_CHUNK
            if seen < STATS_CHUNK or start >= processing:
                break
        leased = min(live, processing)
        every = parse_rate_spec(reply[13])

        def counts(ready: Any, busy: Any, paused: Any, own: Any, waiting: Any) -> GroupStats:
            limit = parse_rate_spec(own) or every
            return GroupStats(int(ready), int(busy), bool(paused), limit, bool(waiting))

        return QueueStats(
            queued=queued,
            leased=leased,
            expired=max(processing - leased - gone, 0),
            delayed=delayed,
            dead=dead,
            rate_limit=parse_rate(reply[7]),
            grouped=int(reply[8]),
            group_concurrency=parse_cap(reply[9]),
            groups={name: counts(*row) for name, row in zip(names, asked, strict=True)},
            groups_waiting=int(reply[11]),
            top_groups={decode(row[0]): counts(*row[1:]) for row in top},
            group_rate_limit=every,
        )

    @operation(methods=("counts",), commands=("HGETALL",), docs=API)
    def counts(self) -> Steps[QueueCounts]:
        """The queue's counters (one HGETALL); see ``WorkQueue.counts``."""
        key = self.keys.counts
        return parse_counts((yield Command(("HGETALL", key), route=key, slot_keys=(key,))))

    @operation(methods=("peek",), scripts=("peek",), docs=API)
    def peek(
        self, start: int, count: int, preview_bytes: int | None = None
    ) -> Steps[list[QueuedItem]]:
        """A page of the main queue, in leasing order; see ``WorkQueue.peek``."""
        check_page(start, count)
        bound = check_preview(preview_bytes)
        # Position p (0 = next to be leased) is list index -(p + 1); negative positions count
        # from the newest item, which is list index 0.
        if start >= 0:
            first, last = -(start + count), -(start + 1)
        else:
            first, last = -start - count, -start - 1
            first = max(first, 0)
        length, *rows = yield peek_call(self.keys, first, last, bound)
        base = start if start >= 0 else max(int(length) + start, 0)
        return [
            QueuedItem(base + offset, decode(raw_id), data, None if size is None else int(size))
            for offset, (raw_id, data, size) in enumerate(reversed(rows))
        ]

    @operation(methods=("item_data",), commands=("GET", "HGET"), docs=API)
    def item_data(self, item_id: str, dead: bool = False) -> Steps[bytes | None]:
        """One item's whole data (of its dead letter with ``dead``); see ``WorkQueue.item_data``."""
        item_id = check_item_id(item_id)
        if dead:
            key = self.keys.dead_item(item_id)
            command: tuple[scripts.Arg, ...] = ("HGET", key, "data")
        else:
            key = self.keys.item(item_id)
            command = ("GET", key)
        data: bytes | None = yield Command(command, route=key, slot_keys=(key,))
        return data

    @operation(methods=("pending",), scripts=("pending",), docs=API)
    def pending(self, start: int, count: int) -> Steps[list[PendingItem]]:
        """A page of the processing list, oldest lease first; see ``WorkQueue.pending``."""
        check_page(start, count)
        if start >= 0:
            first, last = -(start + count), -(start + 1)
        else:
            first, last = max(-start - count, 0), -start - 1
        rows: list[list[Reply]] = yield pending_call(self.keys, first, last)
        out = []
        for raw_id, deliveries, lease, pttl in reversed(rows):
            token, leased_at = _parse_token(lease)
            left = int(pttl) / 1000 if int(pttl) >= 0 else None
            out.append(PendingItem(decode(raw_id), int(deliveries), leased_at, left, token))
        return out

    @operation(methods=("flush",), commands=("SCAN", "UNLINK"), writes=True, cli="flush", docs=API)
    def flush(self, progress: Callable[[int], None] | None = None) -> Steps[FlushReport]:
        """Delete every key of the queue, in chunks; see ``WorkQueue.flush``.

        ``progress``, if given, is called with the number of keys deleted so far after each chunk.
        """
        keys = self.keys
        removed = items = 0
        for pattern in keys.patterns():
            for batch in (yield from self._scan(pattern)):
                for chunk in _chunks(batch, FLUSH_CHUNK):
                    gone = int((yield Command(("UNLINK", *chunk))))
                    removed += gone
                    if pattern == keys.item_pattern():
                        items += gone
                    if progress is not None:
                        progress(removed)
        removed += int((yield Command(("UNLINK", *keys.fixed()))))
        if progress is not None:
            progress(removed)
        report = FlushReport(keys=removed, items=items)
        logger.info("flushed %s: %s", keys.prefix, report)
        return report

    # Dead letters -----------------------------------------------------------------------------

    @operation(methods=("dead_letters",), scripts=("dead_letters",), cli="dead-letters", docs=API)
    def dead_letters(
        self, start: int, count: int, preview_bytes: int | None = None
    ) -> Steps[list[DeadLetter]]:
        """One page of dead letters, oldest first."""
        check_page(start, count)
        bound = check_preview(preview_bytes)
        stop = start + count - 1
        if start < 0 <= stop:
            stop = -1
        rows: list[list[Reply]] = yield dead_letters_call(self.keys, start, stop, bound)
        return [
            DeadLetter(decode(i), data, int(n), decode(reason), int(ms) / 1000, int(size))
            for i, data, n, reason, ms, size in rows
        ]

    def _dead_action(
        self, name: str, ids: Iterable[str] | None, progress: Callable[[int], None] | None
    ) -> Steps[int]:
        build = _DEAD_ACTIONS[name]
        done = 0
        if ids is None:
            # Dead letters that stay (a requeue's whose id is live again) are passed over by
            # the next chunk, so every one is looked at once, in bounded chunks.
            passed = 0
            while True:
                reply = yield build(self.keys, "oldest", DEAD_CHUNK, passed)
                moved, missed = int(reply[0]), int(reply[1])
                passed += int(reply[2]) if len(reply) > 2 else 0
                done += moved
                if progress is not None:
                    progress(done)
                if moved + missed < DEAD_CHUNK:
                    return done
        for chunk in _chunks(check_ids(ids, name), DEAD_CHUNK):
            reply = yield build(self.keys, "ids", *chunk)
            done += int(reply[0])
            if progress is not None:
                progress(done)
        return done

    @_writing(
        methods=("requeue_dead",),
        scripts=("requeue_dead",),
        cli="dead-letters",
    )
    def requeue_dead(
        self, ids: Iterable[str] | None, progress: Callable[[int], None] | None = None
    ) -> Steps[int]:
        """Requeue dead letters (all when ``ids`` is None); returns how many.

        ``progress``, if given, is called with the number requeued so far after each chunk.
        """
        return (yield from self._dead_action("requeue_dead", ids, progress))

    @_writing(
        methods=("purge_dead",),
        scripts=("purge_dead",),
        cli="dead-letters",
    )
    def purge_dead(self, ids: Iterable[str] | None) -> Steps[int]:
        """Delete dead letters (all when ``ids`` is None); returns how many."""
        return (yield from self._dead_action("purge_dead", ids, None))

    # Counting ---------------------------------------------------------------------------------

    @operation(
        methods=("queue_len", "processing", "dead_count"), commands=("LLEN", "ZCARD"), docs=API
    )
    def length(self, key: str, kind: str = "LLEN") -> Steps[int]:
        """The length of one of the queue's keys."""
        return int((yield Command((kind, key))))


#: The facades' ``leased``: a lease, then the completion or the release of the item.
register(
    Operation(
        "leased",
        methods=("leased",),
        scripts=("lease", "claim", "complete", "release", "set_rate", "group_set"),
        commands=("BRPOPLPUSH",),
        writes=True,
        docs=API,
        via=("lease", "complete", "release"),
    )
)
