"""A queue spread over shards: one logical queue made of ordinary queues, each under its own tag.

``WorkQueue(KeyPrefix("jobs"), shards=N)`` (N > 1) runs its operations on :class:`ShardedOps`.
Shard ``i`` is an ordinary queue of the reference layout whose prefix is ``{jobs:i}`` or
``{jobs:i.k}`` (:func:`shard_tags`: the tag falls in the ``i``-th of N equal ranges of the
cluster's slots): its own ``{hash tag}``, so on Redis Cluster the shards spread evenly over
primaries that own equal ranges of slots, and a client of the reference design pointed at a
shard's prefix works that shard. An item's shard is fixed by its id:
``crc32(id as UTF-8) mod N`` (:func:`shard_index`), so an id always meets its earlier copy and
dedup by id holds.

- **Adds** are grouped by shard: one script call per shard (per chunk), all sent together, which
  a Redis Cluster client sends as one pipeline per node.
- **Leases** start at a shard of the caller's own (a random one, kept per thread and per
  asyncio task) and stay on it while it has items, at most :data:`STICK` leases in a row, then
  move on: workers spread over the shards and no shard waits long behind another. On one
  server every shard is looked at in one script call and a blocked worker wakes at once for an
  item on any shard (the wake lists of ``lease_from``); on Redis Cluster the shards are looked
  at in turn and a blocked worker waits on its own shard for at most :data:`SHARD_WAIT_SLICE`
  seconds before it looks at the others.
- **Stats and counts** are summed; **peek**, **pending** and **dead letters** merged; **cleans**,
  **flush** and dead-letter actions run shard by shard.
- **Changing the shard count**: ``WorkQueue(name, shards=M, shards_before=(N,))`` adds by the
  new count while every operation that reads, leases or cleans covers the shards of both. An id
  is looked for on its shard under each count (complete, renew, release, item data), and a
  checked add refuses an id that exists on its shard under an earlier count.

The queue's own records of its workers (heartbeats, durations, the light-clean turn) live on its
*home* shard, shard 0.
"""

from __future__ import annotations

import binascii
import contextlib
import functools
import logging
import math
import random
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from .. import results
from ..calls import Ask, Command, Pipelined, ScriptCall, Steps
from ..errors import InvalidArgumentError, InvalidArgumentTypeError, WorkQueueError
from ..item import Item
from ..keyprefix import KeyPrefix, QueueKeys
from ..retryable import transient
from ..validation import check_item, check_item_id, check_page, check_preview, to_ms
from . import lease as lease_ops
from .lease import LeaseRequest, lease_items
from .queue import ADD_CHUNK, ADD_CHUNK_BYTES, AddCall, QueueOps, Wait, complete_call
from .registry import operation

#: How many leases in a row a caller takes from one shard before it moves on to the next one.
STICK = 16
#: On Redis Cluster, the longest a blocked caller waits on its own shard before it looks at the
#: others again: the bound of its wake-up time for an item added to another shard.
SHARD_WAIT_SLICE = 0.5
#: The most shards a queue may have.
MAX_SHARDS = 1024

T = TypeVar("T")

logger = logging.getLogger("redis_work_queue")


def shard_index(item_id: str, shards: int) -> int:
    """The shard of ``item_id`` on a queue of ``shards`` shards: CRC-32 of its UTF-8, mod."""
    return zlib.crc32(item_id.encode("utf-8", "surrogateescape")) % shards


#: The hash slots of Redis Cluster.
SLOTS = 16384


def key_slot(tag: str) -> int:
    """The Redis Cluster slot of a hash tag: CRC-16 (XMODEM) of its UTF-8 bytes, mod 16384."""
    return binascii.crc_hqx(tag.encode("utf-8", "surrogateescape"), 0) % SLOTS


def slot_range_start(index: int, parts: int) -> int:
    """The first slot of the ``index``-th of ``parts`` equal ranges of the slots.

    That is ``16384 * index / parts`` rounded half up, where ``redis-cli --cluster create``
    starts each primary's range.
    """
    return (2 * index * SLOTS + parts) // (2 * parts)


@functools.lru_cache(maxsize=256)
def shard_tags(name: str, shards: int) -> tuple[str, ...]:
    """The hash tags of the ``shards`` shards of the queue ``name``, by index.

    Shard ``i``'s tag is the first of ``name:i``, ``name:i.1``, ``name:i.2``... whose slot
    (:func:`key_slot`) lies in the ``i``-th of ``shards`` equal ranges of the 16384 slots,
    from :func:`slot_range_start` of ``i`` to that of ``i + 1``: a cluster whose primaries own
    equal ranges of slots (as ``redis-cli --cluster create`` makes it) holds as even a share of
    the shards on each primary as the counts allow. A queue of one shard is the unsharded queue.
    """
    if shards == 1:
        return (name,)
    tags = []
    for index in range(shards):
        low, high = slot_range_start(index, shards), slot_range_start(index + 1, shards)
        base = f"{name}:{index}"
        start = binascii.crc_hqx(base.encode("utf-8", "surrogateescape"), 0)
        step = 0
        while not low <= (binascii.crc_hqx(b".%d" % step, start) if step else start) % SLOTS < high:
            step += 1
        tags.append(f"{base}.{step}" if step else base)
    return tuple(tags)


def shard_prefix(name: str, index: int, shards: int) -> str:
    """The key prefix of shard ``index`` of ``shards`` of the queue ``name``: ``{tag}``.

    The tag is :func:`shard_tags`'s (``{jobs:5}``, ``{jobs:3.41}``...); a queue of one shard
    is the unsharded queue ``name``.
    """
    if shards == 1:
        return name
    return f"{{{shard_tags(name, shards)[index]}}}"


def check_shards(name: str, shards: object, before: object) -> tuple[int, tuple[int, ...]]:
    """Check a queue's shard count and earlier counts; return them.

    Raises:
        InvalidArgumentError: A count is not an int in 1..MAX_SHARDS, or a sharded queue's name
            holds a brace (each shard gets its own ``{hash tag}``).
    """

    def count(value: object, what: str) -> int:
        if type(value) is not int or not 1 <= value <= MAX_SHARDS:
            raise InvalidArgumentError(
                f"{what} must be an int from 1 to {MAX_SHARDS}, got {value!r}"
            )
        return value

    current = count(shards, "shards")
    if isinstance(before, int):
        before = (before,)
    if not isinstance(before, Iterable) or isinstance(before, str | bytes):
        raise InvalidArgumentTypeError(
            f"shards_before takes a shard count or a tuple of them, not {type(before).__name__}"
        )
    earlier = tuple(count(value, "shards_before") for value in before)
    if (current > 1 or any(n > 1 for n in earlier)) and ("{" in name or "}" in name):
        raise InvalidArgumentError(
            f"a sharded queue's name must not hold a brace ({name!r}): each shard gets its own "
            f"{{hash tag}}, {shard_prefix(name, 0, max(current, 2))!r} and so on; name it "
            "without the tag"
        )
    return current, tuple(n for n in dict.fromkeys(earlier) if n != current)


@dataclass(frozen=True)
class ShardStats:
    """One shard of a queue, as :meth:`WorkQueue.shard_stats` sees it.

    Attributes:
        index: The shard's position: the current count's shards by index (0 to N-1), then
            those of earlier counts (0 for an unsharded queue).
        prefix: The shard's key prefix (``{jobs:3}``; the queue's own for an unsharded queue).
        stats: Its counts by state.
        counts: Its counters.
    """

    index: int
    prefix: str
    stats: results.QueueStats
    counts: results.QueueCounts


_sum = results.sum_fields


def _flags(reply: Any) -> list[int]:
    return [int(flag) for flag in reply]


class ShardedOps(QueueOps):
    """The operations of a queue spread over shards (see the module's description).

    Args:
        name: The logical queue's name (no braces).
        shards: How many shards new items go to.
        shards_before: Earlier shard counts whose shards may still hold items.
        max_deliveries, replicas, replica_timeout, keep_results: As for :class:`QueueOps`, for
            every shard.
    """

    def __init__(
        self,
        name: KeyPrefix,
        shards: int,
        shards_before: Iterable[int] = (),
        max_deliveries: int | None = None,
        replicas: int = 0,
        replica_timeout: float = 1.0,
        keep_results: float | None = None,
    ) -> None:
        logical = name.prefix
        self.shards, self.shards_before = check_shards(logical, shards, shards_before)
        self.name = logical
        options = (max_deliveries, replicas, replica_timeout, keep_results)
        keep_ms = 0 if keep_results is None else to_ms(keep_results, "keep_results")
        #: Every shard that may hold items: the current count's, by index, then each earlier
        #: count's that are not among them (the unsharded queue, for a count of 1).
        self.shard_ops: list[QueueOps] = []
        #: Each count's shards, by index.
        self.by_count: dict[int, list[QueueOps]] = {}
        known: dict[str, QueueOps] = {}
        for count in (self.shards, *self.shards_before):
            row = []
            for index in range(count):
                prefix = shard_prefix(logical, index, count)
                if prefix not in known:
                    known[prefix] = QueueOps(QueueKeys(KeyPrefix(prefix), None, keep_ms), *options)
                    self.shard_ops.append(known[prefix])
                row.append(known[prefix])
            self.by_count[count] = row
        home = self.by_count[self.shards][0]
        super().__init__(home.keys, *options)
        #: Every key of every shard that is not per item: they cannot be named together on
        #: Redis Cluster.
        self.all_slot_keys = tuple(k for q in self.shard_ops for k in q.slot_keys)
        # (shard position, leases in a row there): kept per thread and per asyncio task.
        self._cursor: ContextVar[tuple[int, int] | None] = ContextVar(
            f"rwq-shard-cursor-{logical}", default=None
        )

    # Where an id lives ------------------------------------------------------------------------

    def _of(self, count: int, item_id: str) -> QueueOps:
        return self.by_count[count][shard_index(item_id, count)]

    def shard_for(self, item_id: str) -> QueueOps:
        """The shard a new item of ``item_id`` goes to."""
        return self._of(self.shards, item_id)

    def candidates(self, item_id: str) -> list[QueueOps]:
        """The shards an item of ``item_id`` may be on: under the count, then earlier ones."""
        found = [self.shard_for(item_id)]
        for count in self.shards_before:
            shard = self._of(count, item_id)
            if shard not in found:
                found.append(shard)
        return found

    def _by_candidates(
        self, item: Item, make: Callable[[QueueOps], Steps[T]], done: Callable[[T], bool]
    ) -> Steps[T]:
        """Run ``make(shard)`` on the item's shards in turn until ``done`` says it was there."""
        result: T | None = None
        for shard in self.candidates(check_item(item).id()):
            result = yield from make(shard)
            if done(result):
                return result
        assert result is not None
        return result

    # Leasing order ----------------------------------------------------------------------------

    def lease_order(self) -> list[QueueOps]:
        """Every shard, starting at the caller's own (a random one on its first lease)."""
        cursor = self._cursor.get()
        if cursor is None:
            cursor = (random.randrange(len(self.shard_ops)), 0)
            self._cursor.set(cursor)
        start = cursor[0]
        return self.shard_ops[start:] + self.shard_ops[:start]

    def note_leased(self, shard: QueueOps | None) -> None:
        """Record the shard the caller leased from (None: it found nothing)."""
        count = len(self.shard_ops)
        cursor = self._cursor.get() or (0, 0)
        if shard is None:
            return
        at = self.shard_ops.index(shard)
        streak = cursor[1] + 1 if at == cursor[0] else 1
        if streak >= STICK:
            at, streak = (at + 1) % count, 0
        self._cursor.set((at, streak))

    # Adding -----------------------------------------------------------------------------------

    def pipeline_add(self, item: Item) -> tuple[ScriptCall, Command]:
        """The calls that queue an unchecked add on a caller's pipeline (on the item's shard)."""
        return self.shard_for(check_item(item).id()).pipeline_add(item)

    def add_checked(
        self, items: list[Item], skip_check: bool, call: AddCall, wait: Wait, one: bool
    ) -> Steps[list[bool]]:
        """Add checked ``items``: one call per shard (per chunk), sent together."""
        flags: list[bool | None] = [None] * len(items)
        if not skip_check and self.shards_before:
            for position, item in enumerate(items):
                if (yield from self._exists_elsewhere(item.id())):
                    flags[position] = False
        groups: dict[int, list[int]] = {}
        for position, item in enumerate(items):
            if flags[position] is None:
                shard = self.shard_for(item.id())
                groups.setdefault(self.shard_ops.index(shard), []).append(position)
        calls: list[tuple[ScriptCall, list[int]]] = []
        for index, positions in groups.items():
            shard = self.shard_ops[index]
            for chunk in _chunks_of(positions, items):
                calls.append((call(shard, [items[p] for p in chunk]), chunk))
        if wait is None:
            if len(calls) == 1:
                replies = [(yield calls[0][0])]
            else:
                replies = (yield Pipelined(tuple(sent for sent, _ in calls))) if calls else []
            for (_, chunk), reply in zip(calls, replies, strict=True):
                for position, flag in zip(chunk, _flags(reply), strict=True):
                    flags[position] = bool(flag)
        else:
            for sent, chunk in calls:
                reply = yield sent
                for position, flag in zip(chunk, _flags(reply[0]), strict=True):
                    flags[position] = bool(flag)
                done = [bool(f) for f in flags if f is not None]
                self._check_acked(wait, reply, done[0] if one and done else done)
        return [bool(flag) for flag in flags]

    def _exists_elsewhere(self, item_id: str) -> Steps[bool]:
        """Whether an item of ``item_id`` is on its shard under an earlier count."""
        for shard in self.candidates(item_id)[1:]:
            key = shard.keys.item(item_id)
            if int((yield Command(("EXISTS", key), route=key, slot_keys=(key,)))):
                return True
        return False

    def quick_add_keys(self, item_id: str, skip_check: bool) -> QueueKeys | None:
        """The item's shard, unless an add that checks must look at an earlier count's too."""
        return self.shard_for(item_id).keys if skip_check or not self.shards_before else None

    # Leasing ----------------------------------------------------------------------------------

    def lease_with(self, request: LeaseRequest) -> Steps[list[Item]]:
        """Lease for ``request`` from the caller's shard first; see the module."""
        leased = yield from lease_shards(self.lease_order(), request)
        self.note_leased(leased[0][0] if leased else None)
        return [item for _, item in leased]

    def renew(self, item: Item, lease_secs: float) -> Steps[results.Renewed]:
        """Extend a held lease, on the item's shard; what the renewal did there."""
        to_ms(lease_secs, "lease_secs")
        return (
            yield from self._by_candidates(
                item, lambda s: s.renew(item, lease_secs), lambda r: r != results.Renewed.NOT_HELD
            )
        )

    def checked_renew(self, item: Item, lease_secs: float) -> ScriptCall:
        """The call of :meth:`renew` on the item's shard under the current count."""
        return self.shard_for(check_item(item).id()).checked_renew(item, lease_secs)

    def renew_many(self, items: Iterable[Item], lease_secs: float) -> Steps[list[bool]]:
        """Extend many held leases, sent together; one flag per item."""
        checked = list(items)
        calls = [self.checked_renew(item, lease_secs) for item in checked]
        flags = yield from self._pipelined(calls, renewed=True)
        return (
            yield from self._retry_elsewhere(checked, flags, lambda s, i: s.renew(i, lease_secs))
        )

    def _retry_elsewhere(
        self,
        items: Sequence[Item],
        flags: list[bool],
        run: Callable[[QueueOps, Item], Steps[bool] | Steps[results.Renewed]],
    ) -> Steps[list[bool]]:
        """For an item not found on its shard, try its shards under earlier counts."""
        if not self.shards_before:
            return flags
        for position, item in enumerate(items):
            if not flags[position]:
                for shard in self.candidates(item.id())[1:]:
                    if bool((yield from run(shard, item))):
                        flags[position] = True
                        break
        return flags

    def give_back(self, items: Iterable[Item], reason: str | None) -> Steps[list[bool]]:
        """Release held items uncounted, sent together; one flag per item."""
        checked = list(items)
        calls = [
            self.shard_for(check_item(i).id()).checked_release(i, 0, reason, undo=True)
            for i in checked
        ]
        flags = yield from self._pipelined(calls)
        return (
            yield from self._retry_elsewhere(
                checked, flags, lambda s, i: s.release(i, 0, reason, True)
            )
        )

    def release_outcome(
        self, item: Item, delay: float, reason: str | None, undo: bool = False
    ) -> Steps[results.Released]:
        """Give a held item back, on its shard, and say where it went."""
        self.checked_release(item, delay, reason, undo)  # checks the arguments first
        return (
            yield from self._by_candidates(
                item,
                lambda s: s.release_outcome(item, delay, reason, undo),
                lambda out: out != results.Released.NOT_HELD,
            )
        )

    def checked_release(
        self, item: Item, delay: float, reason: str | None, undo: bool = False
    ) -> ScriptCall:
        """The call of :meth:`release_outcome` on the item's shard under the current count."""
        return self.shard_for(check_item(item).id()).checked_release(item, delay, reason, undo)

    # Completing -------------------------------------------------------------------------------

    def complete(
        self, items: Iterable[Item], replicas: int | None = None, *, one: bool = False
    ) -> Steps[list[Item]]:
        """Complete items, shard by shard; returns those this call completed, in order."""
        checked = [check_item(item) for item in items]
        self._wait(replicas)
        done_ids: set[int] = set()
        for attempt in range(1 + len(self.shards_before)):
            groups: dict[int, list[int]] = {}
            for position, item in enumerate(checked):
                options = self.candidates(item.id())
                if position not in done_ids and attempt < len(options):
                    index = self.shard_ops.index(options[attempt])
                    groups.setdefault(index, []).append(position)
            for index, positions in groups.items():
                shard = self.shard_ops[index]
                completed = yield from shard.complete([checked[p] for p in positions], replicas)
                ids = {id(i) for i in completed}
                done_ids.update(p for p in positions if id(checked[p]) in ids)
        return [item for position, item in enumerate(checked) if position in done_ids]

    def complete_one(
        self, item: Item, replicas: int | None = None, result: bytes | str | None = None
    ) -> Steps[bool]:
        """Complete one item, on its shard; True for the one call that removed it."""
        common = result is None and not self.keep_results_ms and not self.shards_before
        if common and replicas is None and not self.replicas:
            item_id = check_item(item).id()  # the common case, short: a hot path
            return bool((yield complete_call(self.shard_for(item_id).keys, item_id))[0])
        self._wait(replicas)
        return (
            yield from self._by_candidates(
                item, lambda s: s.complete_one(item, replicas, result), bool
            )
        )

    # Cleaning ---------------------------------------------------------------------------------

    def light_clean(self) -> Steps[results.CleanReport]:
        """One light clean of every shard, their steps sent together; the reports summed."""
        reports = yield from gather([shard.light_clean() for shard in self.shard_ops])
        return _sum(reports)

    def deep_clean(
        self, progress: results.ProgressCallback | None = None
    ) -> Steps[results.CleanReport]:
        """A deep clean of every shard, side by side (as :meth:`light_clean`); reports summed.

        ``progress`` hears of each shard's progress as that shard reports it.
        """
        reports = yield from gather([shard.deep_clean(progress) for shard in self.shard_ops])
        return _sum(reports)

    # Inspection -------------------------------------------------------------------------------

    def group_keys(self) -> QueueKeys:
        """Refuse groups: a group's turns and cap would be split over the shards.

        Raises:
            InvalidArgumentError: Always.
        """
        raise InvalidArgumentError(
            "groups are not available on a sharded queue (shards > 1): each shard would keep "
            "its own turns and group_concurrency; use groups on an unsharded queue"
        )

    def stats(
        self, groups: Iterable[str] | None = None, top_groups: int = 0
    ) -> Steps[results.QueueStats]:
        """The counts of every shard, summed."""
        if groups is not None or top_groups:
            self.group_keys()
        found = []
        for shard in self.shard_ops:
            found.append((yield from shard.stats()))
        return _sum(found)

    def counts(self) -> Steps[results.QueueCounts]:
        """The counters of every shard, summed."""
        found = []
        for shard in self.shard_ops:
            found.append((yield from shard.counts()))
        return _sum(found)

    def shard_stats(self) -> Steps[list[ShardStats]]:
        """Every shard's counts and counters."""
        out = []
        for index, shard in enumerate(self.shard_ops):
            stats = yield from shard.stats()
            counts = yield from shard.counts()
            out.append(ShardStats(index, shard.keys.prefix, stats, counts))
        return out

    def peek(
        self, start: int, count: int, preview_bytes: int | None = None
    ) -> Steps[list[results.QueuedItem]]:
        """A page of the merged main queues: the shards' items taken in turn, by position."""
        check_page(start, count)
        check_preview(preview_bytes)
        newest = start < 0
        want = -start if newest else start + count
        rows: list[tuple[int, int, results.QueuedItem]] = []
        for index, shard in enumerate(self.shard_ops):
            page = yield from shard.peek(-want if newest else 0, want, preview_bytes)
            for offset, row in enumerate(reversed(page) if newest else page):
                rows.append((offset, index, row))
        rows.sort(key=lambda row: (row[0], row[1]))
        ordered = [row for _, _, row in rows]
        if newest:
            total = yield from self.length(self.keys.queue)
            picked = list(reversed(ordered[:want]))[:count]
            base = max(total + start, 0)
        else:
            picked, base = ordered[start : start + count], start
        return [
            results.QueuedItem(base + k, row.id, row.data, row.size) for k, row in enumerate(picked)
        ]

    def pending(self, start: int, count: int) -> Steps[list[results.PendingItem]]:
        """A page of the merged processing lists, oldest lease first."""
        check_page(start, count)
        return (
            yield from self._merged(
                start,
                count,
                lambda shard, first, want: shard.pending(first, want),
                lambda row: math.inf if row.leased_at is None else row.leased_at,
            )
        )

    def dead_letters(
        self, start: int, count: int, preview_bytes: int | None = None
    ) -> Steps[list[results.DeadLetter]]:
        """A page of the merged dead letters, oldest first."""
        check_page(start, count)
        check_preview(preview_bytes)
        return (
            yield from self._merged(
                start,
                count,
                lambda shard, first, want: shard.dead_letters(first, want, preview_bytes),
                lambda row: row.died_at,
            )
        )

    def _merged(
        self,
        start: int,
        count: int,
        page: Callable[[QueueOps, int, int], Steps[list[T]]],
        order: Callable[[T], float],
    ) -> Steps[list[T]]:
        """A page of rows merged over the shards, in ``order``.

        ``page(shard, first, want)`` reads ``want`` rows of a shard from ``first`` (a negative
        ``first`` counts from the end); each shard gives the rows the merged page may need.
        """
        newest = start < 0
        want = -start if newest else start + count
        rows: list[T] = []
        for shard in self.shard_ops:
            rows += yield from page(shard, -want if newest else 0, want)
        rows.sort(key=order)
        if newest:
            return rows[-want:][:count]
        return rows[start : start + count]

    def item_data(self, item_id: str, dead: bool = False) -> Steps[bytes | None]:
        """One item's whole data, from its shard."""
        item_id = check_item_id(item_id)
        for shard in self.candidates(item_id):
            data = yield from shard.item_data(item_id, dead)
            if data is not None:
                return data
        return None

    def flush(self, progress: Callable[[int], None] | None = None) -> Steps[results.FlushReport]:
        """Delete every key of every shard."""
        reports = []
        removed = 0
        for shard in self.shard_ops:

            def step(n: int, before: int = removed) -> None:
                if progress is not None:
                    progress(before + n)

            report = yield from shard.flush(step)
            removed += report.keys
            reports.append(report)
        return _sum(reports)

    # Dead letters -----------------------------------------------------------------------------

    def _dead_each(
        self,
        ids: Iterable[str] | None,
        progress: Callable[[int], None] | None,
        run: Callable[[QueueOps, list[str] | None, Callable[[int], None] | None], Steps[int]],
    ) -> Steps[int]:
        done = 0
        chosen = None if ids is None else [str(i) for i in ids]
        for shard in self.shard_ops:
            mine = None if chosen is None else [i for i in chosen if shard in self.candidates(i)]
            if mine is not None and not mine:
                continue

            def step(n: int, before: int = done) -> None:
                if progress is not None:
                    progress(before + n)

            done += yield from run(shard, mine, step)
        return done

    def requeue_dead(
        self, ids: Iterable[str] | None, progress: Callable[[int], None] | None = None
    ) -> Steps[int]:
        """Requeue dead letters on every shard (all when ``ids`` is None); returns how many."""
        return (yield from self._dead_each(ids, progress, lambda s, i, p: s.requeue_dead(i, p)))

    def purge_dead(self, ids: Iterable[str] | None) -> Steps[int]:
        """Delete dead letters on every shard (all when ``ids`` is None); returns how many."""
        return (yield from self._dead_each(ids, None, lambda s, i, p: s.purge_dead(i)))

    # Counting ---------------------------------------------------------------------------------

    def length(self, key: str, kind: str = "LLEN") -> Steps[int]:
        """The summed length of the shards' key named as ``key`` names the home shard's."""
        attribute = next(
            (a for a in ("queue", "processing", "dead") if getattr(self.keys, a) == key), None
        )
        if attribute is None:
            return (yield from super().length(key, kind))
        total = 0
        for shard in self.shard_ops:
            total += int((yield Command((kind, getattr(shard.keys, attribute)))))
        return total


def gather(operations: Sequence[Steps[T]]) -> Steps[list[T]]:
    """Run operations side by side: each round, their pending script calls go together.

    Every round takes the next call of each operation still running; the script calls (that
    wait for no replica) are sent as one :class:`Pipelined` (one round trip; one pipeline per
    node on Redis Cluster), any other call on its own. An error of the round is raised in the
    first operation of the batch and the others are closed (each step is atomic: what ran,
    ran).

    Returns:
        Each operation's result, in order.
    """
    values: list[Any] = [None] * len(operations)
    pending: dict[int, Any] = {}
    for index, steps in enumerate(operations):
        try:
            pending[index] = next(steps)
        except StopIteration as done:
            values[index] = done.value
    try:
        while pending:
            batch = [i for i, c in pending.items() if isinstance(c, ScriptCall) and c.wait is None]
            replies: dict[int, Any] = {}
            if len(batch) > 1:
                calls = tuple(pending[i] for i in batch)
                try:
                    replies = dict(zip(batch, (yield Pipelined(calls)), strict=True))
                except Exception as err:  # handed to each operation of the batch, then raised
                    for index in batch:
                        with contextlib.suppress(Exception):
                            operations[index].throw(err)
                        del pending[index]
                    raise
            for index in list(pending):
                try:
                    if index in replies:
                        pending[index] = operations[index].send(replies[index])
                        continue
                    try:
                        reply = yield pending[index]
                    except Exception as err:  # the operation cleans up, or not, and raises
                        pending[index] = operations[index].throw(err)
                        continue
                    pending[index] = operations[index].send(reply)
                except StopIteration as done:
                    values[index] = done.value
                    del pending[index]
    finally:
        for index in pending:
            operations[index].close()
    return values


def _chunks_of(positions: list[int], items: Sequence[Item]) -> list[list[int]]:
    """``positions`` cut into add chunks (at most ADD_CHUNK items or ADD_CHUNK_BYTES of data)."""
    chunks: list[list[int]] = []
    chunk: list[int] = []
    size = 0
    for position in positions:
        length = len(items[position].data())
        if chunk and (len(chunk) >= ADD_CHUNK or size + length > ADD_CHUNK_BYTES):
            chunks.append(chunk)
            chunk, size = [], 0
        chunk.append(position)
        size += length
    if chunk:
        chunks.append(chunk)
    return chunks


# Leasing over shards --------------------------------------------------------------------------


#: How long a shard whose node failed a call is passed over by the leases of this process.
DOWN_SECS = 2.0
#: Shards passed over, by key prefix: until when (``time.monotonic()``).
_DOWN: dict[str, float] = {}


def _up_first(order: Sequence[QueueOps]) -> list[QueueOps]:
    """``order`` without the shards passed over for now (all of them when all are)."""
    if not _DOWN:
        return list(order)
    now = time.monotonic()
    up = [q for q in order if _DOWN.get(q.keys.prefix, 0.0) <= now]
    return up or list(order)


def _lease_on(
    shard: QueueOps, request: LeaseRequest, errors: list[BaseException]
) -> Steps[list[tuple[QueueOps, Item]]]:
    """Lease from one shard, passing it over when its node fails.

    A transient error (its node is down, or failing over) is noted in ``errors``, the shard
    passed over for :data:`DOWN_SECS`, and nothing is returned: the caller goes on with the
    other shards.
    """
    try:
        found = yield from lease_items([shard], request)
    except Exception as err:
        if not transient(err):
            raise
        errors.append(err)
        _DOWN[shard.keys.prefix] = time.monotonic() + DOWN_SECS
        return []
    if _DOWN:
        _DOWN.pop(shard.keys.prefix, None)
    return [(shard, item) for _, item in found]


def _nonblocking(request: LeaseRequest, count: int) -> LeaseRequest:
    return LeaseRequest(count, request.lease_ms, request.at_most_once, False, 0, request.max_block)


def lease_shards(
    order: Sequence[QueueOps], request: LeaseRequest
) -> Steps[list[tuple[QueueOps, Item]]]:
    """Lease up to ``request.count`` items from queues ``order``, the first first.

    The first queue alone is one cheap call (a worker's own shard, which mostly has items);
    when it has fewer than asked, the others are looked at: in one script call when they can be
    named together (one server), else in turn. Blocking, a caller waits on every queue at once
    where they can be named together (the wake lists), else on the first queue for at most
    :data:`SHARD_WAIT_SLICE` at a time between looks at the others. On Redis Cluster a shard
    whose node fails is passed over for :data:`DOWN_SECS` while the others are leased from;
    its error is raised only when nothing could be leased.

    Returns:
        (queue, item) pairs; empty when nothing came in time.
    """
    order = _up_first(order)
    errors: list[BaseException] = []
    first = order[0]
    got = yield from _lease_on(first, _nonblocking(request, request.count), errors)
    rest = order[1:]
    if len(got) >= request.count:
        return got
    if not rest:
        if got or not request.block:
            return _or_raise(got, errors)
        found = yield from lease_items([first], request)
        return [(first, item) for _, item in found]
    together = bool((yield Ask("together", tuple(k for q in order for k in q.slot_keys))))
    wanted = _nonblocking(request, request.count - len(got))
    try:
        got += yield from _look(rest, wanted, together, errors)
    except WorkQueueError as err:
        if not got:
            raise
        # Hand out what was leased (each shard's call is atomic); the failing shard raises
        # again at the next lease that reaches it.
        logger.warning("a shard of the queue failed after a lease from another: %s", err)
    if got or not request.block:
        return _or_raise(got, errors)
    return (yield from _block(order, request, together))


def _or_raise(
    got: list[tuple[QueueOps, Item]], errors: list[BaseException]
) -> list[tuple[QueueOps, Item]]:
    """``got``; but when nothing was leased and a shard failed, that shard's error."""
    if not got and errors:
        raise errors[0]
    return got


def _block(
    order: Sequence[QueueOps], request: LeaseRequest, together: bool
) -> Steps[list[tuple[QueueOps, Item]]]:
    """Wait for an item on any of ``order`` (see :func:`lease_shards`)."""
    if together:
        found = yield from lease_items(order, request)
        return [(order[index], item) for index, item in found]
    deadline = time.monotonic() + request.timeout_ms / 1000 if request.timeout_ms else math.inf
    got: list[tuple[QueueOps, Item]] = []
    while not got:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        order = _up_first(order)
        wait_ms = max(round(min(remaining, SHARD_WAIT_SLICE) * 1000), 1)
        wait = LeaseRequest(
            request.count, request.lease_ms, request.at_most_once, True, wait_ms, request.max_block
        )
        errors: list[BaseException] = []
        got = yield from _lease_on(order[0], wait, errors)
        if not got:
            more = _nonblocking(request, request.count)
            got = yield from _look(order[1:], more, False, errors)
        if not got and len(errors) == len(order):
            raise errors[0]
    return got


def _look(
    queues: Sequence[QueueOps],
    request: LeaseRequest,
    together: bool,
    errors: list[BaseException],
) -> Steps[list[tuple[QueueOps, Item]]]:
    """Lease without blocking from ``queues`` in order: in one call, or one queue at a time.

    A queue that fails is noted in ``errors`` and passed over.
    """
    if together:
        found = yield from lease_items(queues, request)
        return [(queues[index], item) for index, item in found]
    got: list[tuple[QueueOps, Item]] = []
    for queue in queues:
        want = request.count - len(got)
        if want <= 0:
            break
        got += yield from _lease_on(queue, _nonblocking(request, want), errors)
    return got


def expand(queues: Sequence[QueueOps]) -> tuple[list[QueueOps], list[int]]:
    """Every queue of ``queues`` as the shards it leases from, in order, and each one's owner."""
    flat: list[QueueOps] = []
    owners: list[int] = []
    for index, queue in enumerate(queues):
        shards = queue.lease_order() if isinstance(queue, ShardedOps) else [queue]
        flat += shards
        owners += [index] * len(shards)
    return flat, owners


def lease_from(queues: Sequence[QueueOps], request: LeaseRequest) -> Steps[tuple[int, Item] | None]:
    """``lease_from`` over queues of which some are sharded: their shards in priority order."""
    flat, owners = expand(queues)
    leased = yield from lease_shards(flat, request)
    if not leased:
        return None
    shard, item = leased[0]
    index = owners[flat.index(shard)]
    owner = queues[index]
    if isinstance(owner, ShardedOps):
        owner.note_leased(shard)
    return index, item


def complete_and_lease_from(
    queue: QueueOps, item: Item, queues: Sequence[QueueOps], lease_secs: float
) -> Steps[tuple[bool, tuple[int, Item] | None]]:
    """``complete_and_lease_from`` where some queues are sharded.

    One script call when the item's shard is the first the caller leases from (it stays on a
    shard while it has items) and has an item, or, where the two can be named together (one
    server), when the caller has just moved on from the item's shard to the next of the same
    queue; otherwise the completion, then a lease over every shard without blocking.
    """
    request = LeaseRequest.of(lease_secs)  # (``item`` is checked by the caller, lease.py)
    flat, owners = expand(queues)
    shard = queue.candidates(item.id()) if isinstance(queue, ShardedOps) else [queue]
    first, mine = flat[0], shard[0]
    over = [first] if mine is first else [first, mine]
    one_call = len(shard) == 1 and not first.replicas and not mine.replicas
    if one_call and mine is not first:
        one_call = mine in flat and owners[flat.index(mine)] == owners[0]
        one_call = one_call and bool((yield Ask("together", (*first.slot_keys, *mine.slot_keys))))
    if one_call:
        done, rows = yield from lease_ops.complete_and_lease(
            over, len(over) - 1, item.id(), request
        )
        if rows:
            owner = queues[owners[0]]
            if isinstance(owner, ShardedOps):
                owner.note_leased(over[rows[0][0]])
            return done, (owners[0], rows[0][1])
    else:
        done = yield from queue.complete_one(item)
    leased = yield from lease_from(queues, request)
    return done, leased


@operation(
    methods=("shard_stats",),
    scripts=("stats",),
    commands=("HGETALL",),
    docs="sharding.md#inspection",
)
def shard_stats(ops: QueueOps) -> Steps[list[ShardStats]]:
    """Each shard's counts and counters (one row for an unsharded queue)."""
    if isinstance(ops, ShardedOps):
        return (yield from ops.shard_stats())
    stats = yield from ops.stats()
    counts = yield from ops.counts()
    return [ShardStats(0, ops.keys.prefix, stats, counts)]
