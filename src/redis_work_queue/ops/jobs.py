"""Job control by id: where an item is, and what can be done to it by its id.

Each operation is one script call, with the uniform KEYS and ARGV of
``lua/include/queue.lua``, made by its script's builder below; they are run by the queues'
``state`` and ``states`` (:class:`~redis_work_queue.WorkQueue` and its asyncio twin).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, cast

from ..calls import Ask, Command, ScriptCall, Sleep, Steps
from ..errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    ItemDeadError,
    ResultTimeoutError,
)
from ..item import Item
from ..keyprefix import QueueKeys
from ..results import Cancelled, Renewed
from ..validation import (
    MAX_PROGRESS_BYTES,
    check_item_id,
    decode,
    held_token,
    listed_ids,
    when_due,
)
from .queue import QueueOps, _chunks, _parse_token, requeue_dead_call
from .registry import builds, operation

__all__ = ["Cancelled", "ItemState", "Renewed"]

#: Where the docs describe these operations.
DOCS = "jobs.md#job-control-by-id"
#: Ids one ``states`` call reads per script call.
STATE_CHUNK = 500

#: The states an item can be in (see :class:`ItemState`).
State = Literal["queued", "delayed", "leased", "expired", "dead", "completed", "gone"]
STATES: tuple[str, ...] = ("queued", "delayed", "leased", "expired", "dead", "completed", "gone")


@dataclass(frozen=True)
class ItemState:
    """Where one item is, as read by one script call (:meth:`WorkQueue.state`).

    Attributes:
        id: The item's id.
        state: ``"queued"`` (waiting to be leased), ``"delayed"`` (held back until
            ``due_at``), ``"leased"`` (a worker holds a live lease), ``"expired"`` (leased, the
            lease ran out, no clean has requeued it yet), ``"dead"`` (in the dead-letter
            store), ``"completed"`` (done, while its result is kept) or ``"gone"`` (no such
            item: never added, or done without a kept result).
        deliveries: How many times it has been handed out (a dead letter's count when dead).
        lease_left: Seconds left on its lease when leased, else None.
        leased_at: When its current lease was taken (seconds since the epoch), when leased and
            known.
        due_at: When a delayed item falls due (seconds since the epoch), else None.
        reason: The reason of its last failure (a dead letter's reason), or None.
        cancelled: The item was cancelled while leased, and its holder's lease has not run out
            yet (its state is then ``"gone"``: its data is gone already).
        progress: A leased item's last progress report (a number or JSON value), or None.
        result: A completed item's kept result (state ``"completed"``), else None.
    """

    id: str
    state: State
    deliveries: int = 0
    lease_left: float | None = None
    leased_at: float | None = None
    due_at: float | None = None
    reason: str | None = None
    cancelled: bool = False
    progress: Any = None
    result: bytes | None = None

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise ValueError(f"unknown item state {self.state!r}")


@builds("state")
def state_call(keys: QueueKeys, result_bytes: int, *ids: str) -> ScriptCall:
    """``lua/state.lua``: the state of each of ``ids``.

    ``result_bytes`` bounds the bytes of a kept result the reply carries (-1: the whole result);
    each row then ends with the whole result's length.
    """
    return ScriptCall.on(keys, "state", result_bytes, *ids)


def _check_ids(ids: Iterable[str]) -> list[str]:
    return listed_ids(
        ids,
        lambda: f"ids must be a list of str ids, not {type(ids).__name__} (for one id, call state)",
        named=False,
    )


def parse_state(item_id: str, row: Sequence[Any]) -> ItemState:
    """An :class:`ItemState` from one row of ``lua/state.lua``'s reply."""
    raw_state, deliveries, held, left, due, reason = row[:6]
    _, leased_at = _parse_token(held or None)
    return ItemState(
        id=item_id,
        state=cast(State, decode(raw_state)),
        deliveries=int(deliveries),
        lease_left=int(left) / 1000 if int(left) >= 0 else None,
        leased_at=leased_at,
        due_at=int(due) / 1000 if int(due) >= 0 else None,
        reason=decode(reason) if reason else None,
        cancelled=bool(int(row[6])),
        progress=json.loads(row[7]) if row[7] else None,
        result=_as_bytes(row[8]) if row[8] is not None else None,
    )


def _as_bytes(raw: bytes | str) -> bytes:
    return raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogateescape")


def keys_for(ops: QueueOps, item_id: str) -> QueueKeys:
    """The keys of the queue that holds ``item_id``.

    The queue's own, or on a sharded queue those of the id's shard (under its current count).
    """
    shard_for = getattr(ops, "shard_for", None)
    return ops.keys if shard_for is None else cast(QueueOps, shard_for(item_id)).keys


@operation(methods=("states",), scripts=("state",), docs=DOCS)
def states(ops: QueueOps, ids: Iterable[str]) -> Steps[list[ItemState]]:
    """The state of each of ``ids``, in order (one script call per 500 ids)."""
    checked = _check_ids(ids)
    out: list[ItemState] = []
    if getattr(ops, "shard_for", None) is not None:  # a sharded queue: each id on its shard
        for item_id in checked:
            out.append((yield from state(ops, item_id)))
        return out
    for chunk in _chunks(checked, STATE_CHUNK):
        rows = yield state_call(ops.keys, -1, *chunk)
        out += (parse_state(i, row) for i, row in zip(chunk, rows, strict=True))
    return out


@operation(methods=("state",), scripts=("state",), cli="item", docs=DOCS)
def state(ops: QueueOps, item_id: str) -> Steps[ItemState]:
    """The state of one item (one script call)."""
    item_id = check_item_id(item_id)
    (row,) = yield state_call(keys_for(ops, item_id), -1, item_id)
    return parse_state(item_id, row)


@builds("cancel")
def cancel_call(keys: QueueKeys, item_id: str) -> ScriptCall:
    """``lua/cancel.lua``: cancel ``item_id``."""
    return ScriptCall.on(keys, "cancel", item_id)


@builds("promote")
def promote_call(keys: QueueKeys, item_id: str) -> ScriptCall:
    """``lua/promote.lua``: make the delayed ``item_id`` due now."""
    return ScriptCall.on(keys, "promote", item_id)


@builds("reschedule")
def reschedule_call(keys: QueueKeys, item_id: str, delay_ms: int, due_ms: int) -> ScriptCall:
    """``lua/reschedule.lua``: delay the queued or delayed ``item_id`` until a new time."""
    return ScriptCall.on(keys, "reschedule", item_id, delay_ms, due_ms)


@operation(methods=("cancel",), scripts=("cancel",), writes=True, cli="cancel", docs=DOCS)
def cancel(ops: QueueOps, item_id: str) -> Steps[Cancelled]:
    """Cancel one item by id (one script call)."""
    item_id = check_item_id(item_id)
    return Cancelled(int((yield cancel_call(keys_for(ops, item_id), item_id))))


@operation(methods=("promote",), scripts=("promote",), writes=True, cli="promote", docs=DOCS)
def promote(ops: QueueOps, item_id: str) -> Steps[bool]:
    """Make a delayed item due now; True when it was delayed."""
    item_id = check_item_id(item_id)
    return bool(int((yield promote_call(keys_for(ops, item_id), item_id))))


@operation(methods=("retry",), scripts=("requeue_dead",), writes=True, cli="retry", docs=DOCS)
def retry(ops: QueueOps, item_id: str) -> Steps[bool]:
    """Put one dead letter back on the queue (as ``requeue_dead`` of one id); True when it was."""
    item_id = check_item_id(item_id)
    requeued, *_ = yield requeue_dead_call(keys_for(ops, item_id), "ids", item_id)
    return bool(int(requeued))


@operation(methods=("reschedule",), scripts=("reschedule",), writes=True, docs=DOCS)
def reschedule(ops: QueueOps, item_id: str, delay: float | datetime) -> Steps[bool]:
    """Give a queued or delayed item a new due time; True when it was queued or delayed."""
    item_id = check_item_id(item_id)
    if delay is None:
        raise InvalidArgumentTypeError(
            "delay must be seconds from now (>= 0) or an aware datetime, not None"
        )
    delay_ms, due_ms = when_due(delay)
    return bool(int((yield reschedule_call(keys_for(ops, item_id), item_id, delay_ms, due_ms))))


@operation(methods=("renew_outcome",), scripts=("renew",), writes=True, docs=DOCS)
def renew_outcome(ops: QueueOps, item: Item, lease_secs: float) -> Steps[Renewed]:
    """Extend a held lease and say what happened: renewed, not held, or cancelled."""
    return (yield from ops.renew(item, lease_secs))


@builds("progress")
def progress_call(keys: QueueKeys, item_id: str, token: str, progress: bytes) -> ScriptCall:
    """``lua/progress.lua``: keep ``progress`` of ``item_id`` while ``token`` holds its lease."""
    return ScriptCall.on(keys, "progress", item_id, token, progress)


def check_progress(progress: object) -> bytes:
    """A progress report as JSON text.

    Raises:
        InvalidArgumentError: It is not JSON-able, or longer than :data:`MAX_PROGRESS_BYTES`.
    """
    try:
        text = json.dumps(progress, allow_nan=False, separators=(",", ":")).encode()
    except (TypeError, ValueError) as err:
        raise InvalidArgumentTypeError(
            f"progress must be a number or a JSON-able value, not {type(progress).__name__}: {err}"
        ) from err
    if len(text) > MAX_PROGRESS_BYTES:
        raise InvalidArgumentError(
            f"progress is {len(text)} bytes as JSON, more than the limit of "
            f"{MAX_PROGRESS_BYTES}: report a number or a small summary"
        )
    return text


@operation(methods=("report_progress",), scripts=("progress",), writes=True, docs=DOCS)
def report_progress(ops: QueueOps, item: Item, progress: object) -> Steps[bool]:
    """Keep a leased item's progress report while its lease lasts; True when held."""
    item, token = held_token(item)
    text = check_progress(progress)
    return bool(int((yield progress_call(keys_for(ops, item.id()), item.id(), token, text))))


#: The longest single blocking read of a result wait, in seconds.
RESULT_SLICE_SECS = 5.0
#: How long a wait pauses between reads of the state while the result key holds the failure
#: record of an earlier death of an item now alive again (added again under its id).
STALE_SLICE_SECS = 0.5


def _wait_command(key: str, wait: float) -> tuple[str, str, str, float]:
    """Block until ``key`` holds an entry, and keep it there (any number of callers may wait)."""
    return ("BRPOPLPUSH", key, key, round(wait, 3))


@operation(methods=("result",), scripts=("state",), commands=("BRPOPLPUSH",), docs=DOCS)
def result(ops: QueueOps, item_id: str, timeout: float | None = None) -> Steps[bytes]:
    """An item's kept result, waiting for it (a blocking read, no polling) until ``timeout``."""
    item_id = check_item_id(item_id)
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not timeout >= 0
        or math.isinf(timeout)
    ):
        raise InvalidArgumentError(
            f"timeout must be a number of seconds >= 0 (or None to wait for ever), not {timeout!r}"
        )
    deadline = math.inf if timeout is None else time.monotonic() + timeout
    found = yield from state(ops, item_id)
    key = keys_for(ops, item_id).result(item_id)
    max_block: float | None = None
    stale = False
    while True:
        if found.state == "completed" and found.result is not None:
            return found.result
        if found.state == "dead":
            raise ItemDeadError(item_id, found.reason)
        left = deadline - time.monotonic()
        if left <= 0:
            raise ResultTimeoutError(item_id, found.state, timeout or 0.0)
        if max_block is None:
            max_block = float((yield Ask("max_block")))
        wait = max(min(left, max_block, RESULT_SLICE_SECS), 0.01)
        if stale:  # the key holds an earlier death's record: it would wake the read at once
            yield Sleep(min(wait, STALE_SLICE_SECS))
        else:
            kept = _as_bytes(
                (yield Command(_wait_command(key, wait), route=key, slot_keys=(key,))) or b""
            )
            if kept[:1] == b"c":
                return kept[1:]
            if kept[:1] == b"d":  # the dying script's failure record
                found = yield from state(ops, item_id)
                if found.state in ("dead", "gone"):
                    raise ItemDeadError(
                        item_id, found.reason or kept[1:].decode(errors="replace") or None
                    )
                stale = True
                continue
        found = yield from state(ops, item_id)
