"""The event stream of a queue made with ``events=True``.

Every script that changes an item (``lua/include/events.lua``) appends one entry to the capped
stream ``P:events`` in the same call: its kind, the item's id, and its delivery count and
reason where known. The scripts learn that events are on, and the cap, from the queue's
argument (:class:`~redis_work_queue.keyprefix.QueueKeys`). :func:`read_events` reads one page
of entries (XREAD, blocking at most a bounded time); the queues' ``events`` iterate them.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

from ..calls import Ask, Command, Steps
from ..errors import InvalidArgumentError, InvalidArgumentTypeError
from ..keyprefix import QueueKeys
from ..validation import decode
from .registry import operation

if TYPE_CHECKING:
    from .queue import QueueOps

__all__ = ["EVENTS_MAXLEN", "EVENT_KINDS", "Event", "check_events", "events_cap", "found_cap"]

#: Where the docs describe the events.
DOCS = "jobs.md#events"
#: The default cap of the stream (XADD's approximate MAXLEN).
EVENTS_MAXLEN = 10_000
#: The largest cap a queue may set.
MAX_EVENTS_MAXLEN = 100_000_000
#: Entries one read asks for at most.
EVENTS_PAGE = 500
#: The longest single blocking read, in seconds.
EVENTS_SLICE_SECS = 5.0

#: What an event reports.
EventKind = Literal[
    "added",
    "leased",
    "completed",
    "failed",
    "retried",
    "dead",
    "expired",
    "requeued",
    "cancelled",
    "promoted",
]
EVENT_KINDS: tuple[str, ...] = get_args(EventKind)

_ENTRY_ID = re.compile(r"\d+(-\d+)?")


@dataclass(frozen=True)
class Event:
    """One entry of a queue's event stream.

    Attributes:
        kind: What happened: ``"added"``, ``"leased"``, ``"completed"``, ``"failed"`` (a
            release), ``"retried"`` (back to the queue after a failure or an expired lease),
            ``"dead"`` (buried in the dead letters), ``"expired"`` (a lease ran out and a clean
            found it), ``"requeued"`` (a dead letter back to the queue), ``"cancelled"`` or
            ``"promoted"`` (a delayed item made due now).
        id: The item's id.
        delivery: The item's delivery count: leased, this delivery; completed, failed,
            retried, dead, expired, requeued (a dead letter's), cancelled and promoted, the
            delivery that ended or the deliveries so far; None for an item never delivered
            (and for added).
        reason: The failure's reason (failed, dead, expired), else None.
        event_id: The stream entry's id: pass it as ``since`` to read the events after it.
        at: When it happened, in seconds since the epoch (the server's clock, ms precision).
    """

    kind: str
    id: str
    delivery: int | None
    reason: str | None
    event_id: str
    at: float


def check_events(events: object, maxlen: object, sharded: bool) -> int | None:
    """The stream's cap of a queue made with ``events`` and ``events_maxlen``; None when off.

    Raises:
        InvalidArgumentTypeError: ``events`` is not a bool, or ``maxlen`` not an int.
        InvalidArgumentError: ``maxlen`` is out of range, or events are asked of a sharded
            queue.
    """
    if not isinstance(events, bool):
        raise InvalidArgumentTypeError(
            f"events must be True or False, not {type(events).__name__}: write events=True"
        )
    if isinstance(maxlen, bool) or not isinstance(maxlen, int):
        raise InvalidArgumentTypeError(
            f"events_maxlen must be an int, not {type(maxlen).__name__}: "
            f"write events_maxlen={EVENTS_MAXLEN}"
        )
    if not 1 <= maxlen <= MAX_EVENTS_MAXLEN:
        raise InvalidArgumentError(
            f"events_maxlen must be between 1 and {MAX_EVENTS_MAXLEN:,}, not {maxlen:,}"
        )
    if not events:
        return None
    if sharded:
        raise InvalidArgumentError(
            "events=True is not available on a sharded queue (shards > 1 or shards_before): "
            "leave events off, or use an unsharded queue"
        )
    return maxlen


def events_cap(keys: QueueKeys) -> int | None:
    """The cap of the event stream that ``keys``' script argument carries; None: events off."""
    head = keys.script_args[0]
    if not head.startswith("\0"):
        return None
    cap = head[1 : head.index("\0", 1)].partition(":")[0]
    return int(cap) if cap else None


def found_cap(kind: Any, length: Any) -> int | None:
    """The cap with which an operator's tool (``rwq``, the dashboard) appends to a queue's events.

    Such a tool does not know the queue's ``events`` setting: it reads ``P:events``. None when
    the key holds no stream (events off: the tool writes none); else the default cap, or the
    stream's length when that is longer, so that the tool never trims what the application keeps.

    Args:
        kind: ``TYPE P:events``.
        length: ``XLEN P:events`` (read only when it is a stream; else anything).
    """
    if decode(kind) != "stream":
        return None
    return min(max(EVENTS_MAXLEN, int(length)), MAX_EVENTS_MAXLEN)


def _check_since(since: object) -> str:
    if not isinstance(since, str):
        raise InvalidArgumentTypeError(
            f"since must be a str (an event_id, '0' or '$'), not {type(since).__name__}"
        )
    if since != "$" and _ENTRY_ID.fullmatch(since) is None:
        raise InvalidArgumentError(
            f"since must be an Event's event_id ('1700000000000-0'), '0' for every kept event "
            f"or '$' for the new ones only, not {since!r}"
        )
    return since


def check_block(block: object) -> float | None:
    """``block`` of ``events``: None, or seconds >= 0.

    Raises:
        InvalidArgumentError: It is not.
    """
    if block is None:
        return None
    if isinstance(block, bool) or not isinstance(block, int | float) or not 0 <= block < 1e7:
        raise InvalidArgumentError(
            f"block must be a number of seconds >= 0 (or None not to wait), not {block!r}"
        )
    return float(block)


def parse_event(entry_id: Any, fields: Any) -> Event:
    """An :class:`Event` from one stream entry (its id and its fields, as a list or a dict)."""
    ident = decode(entry_id)
    if isinstance(fields, dict):
        pairs = {decode(k): decode(v) for k, v in fields.items()}
    else:
        pairs = {decode(k): decode(v) for k, v in zip(fields[::2], fields[1::2], strict=True)}
    delivery = pairs.get("delivery")
    return Event(
        kind=pairs.get("kind", ""),
        id=pairs.get("id", ""),
        delivery=int(delivery) if delivery else None,
        reason=pairs.get("reason"),
        event_id=ident,
        at=int(ident.split("-")[0]) / 1000,
    )


def _entries(reply: Any) -> list[Any]:
    """The entries of an XREAD reply of one stream (RESP2 list or RESP3 map)."""
    if not reply:
        return []
    if isinstance(reply, dict):
        return list(next(iter(reply.values()))[0] if reply else [])
    return list(reply[0][1])


@operation(methods=("events",), commands=("XREAD", "XREVRANGE"), cli="events", docs=DOCS)
def read_events(
    ops: QueueOps, since: str = "0", block: float | None = None, count: int = EVENTS_PAGE
) -> Steps[tuple[str, list[Event]]]:
    """One page of events after ``since`` (waiting up to ``block`` seconds for one).

    Returns the id to read after next and the events; ``since`` ``'$'`` is resolved to the
    stream's last entry first.
    """
    since = _check_since(since)
    wait = check_block(block)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 10_000:
        raise InvalidArgumentError(f"count must be an int from 1 to 10,000, not {count!r}")
    key = ops.keys.events
    if since == "$":
        last = yield Command(("XREVRANGE", key, "+", "-", "COUNT", 1), route=key)
        since = decode(last[0][0]) if last else "0-0"
    command: tuple[Any, ...] = ("XREAD", "COUNT", count)
    if wait is not None:
        max_block = float((yield Ask("max_block")))
        slice_secs = max(min(wait, max_block, EVENTS_SLICE_SECS), 0.001)
        command += ("BLOCK", max(1, round(slice_secs * 1000)))
    reply = yield Command((*command, "STREAMS", key, since), route=key, slot_keys=(key,))
    found = [parse_event(entry_id, fields) for entry_id, fields in _entries(reply)]
    return (found[-1].event_id if found else since), found


class Feed:
    """The bookkeeping of ``events``: the page to read next, and when the feed ends.

    Each page waits up to what is left of ``block`` seconds; an event restarts the wait. With
    ``block`` None the feed ends at the first empty page.

    Raises:
        InvalidArgumentError: ``block`` is negative (when the feed is made).
    """

    def __init__(self, ops: QueueOps, since: str, block: float | None) -> None:
        self.ops = ops
        self.since = since
        self.block = check_block(block)
        self.deadline = self._restarted()
        self.ended = False

    def _restarted(self) -> float | None:
        return None if self.block is None else time.monotonic() + self.block

    def page(self) -> Steps[list[Event]] | None:
        """The read of the next page of events, or None once the feed has ended."""
        return None if self.ended else self._read()

    def _read(self) -> Steps[list[Event]]:
        left = None if self.deadline is None else max(self.deadline - time.monotonic(), 0.0)
        self.since, found = yield from read_events(self.ops, self.since, left or None)
        if found:
            self.deadline = self._restarted()
        elif self.deadline is None or time.monotonic() >= self.deadline:
            self.ended = True
        return found
