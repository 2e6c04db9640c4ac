"""The operations the Spark data source adds to the queue's: snapshot pages and held completes.

Both are generators of script calls with the uniform KEYS and ARGV of
``lua/include/queue.lua``, each made by its script's builder below.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .. import scripts
from ..calls import ScriptCall, Steps
from ..keyprefix import QueueKeys
from ..validation import decode
from .queue import QueueOps
from .registry import builds, operation

#: The parts of a queue a snapshot reads, and the state of the items in each.
PARTS = ("queue", "processing", "delayed", "dead")
#: Pairs one ``complete_held`` call completes.
COMPLETE_CHUNK = 500


@builds("snapshot")
def snapshot_call(keys: QueueKeys, part: str, max_bytes: int, *entries: scripts.Arg) -> ScriptCall:
    """``lua/snapshot.lua``: one page of one part of the queue (``entries`` says which)."""
    return ScriptCall.on(keys, "snapshot", part, max_bytes, *entries)


@builds("complete_held")
def complete_held_call(keys: QueueKeys, *held: str) -> ScriptCall:
    """``lua/complete_held.lua``: complete items still held (an id, then its lease value, each)."""
    args: tuple[scripts.Arg, ...] = (*keys.script_args, *held)
    script = scripts.load("complete_held")
    return ScriptCall(script, keys.script_keys, args, None, keys.slot_keys)


@dataclass(frozen=True)
class Entry:
    """One item as a snapshot page sees it.

    Attributes:
        id: The item's id.
        data: Its data.
        deliveries: How many times it has been handed out.
        lease_left: Seconds left on its lease, or None when it has none.
        reason: The reason its last try failed (or why it died), or None.
    """

    id: str
    data: bytes
    deliveries: int
    lease_left: float | None
    reason: str | None

    def state(self, part: str) -> str:
        """The item's state, given the part of the queue it was read from."""
        if part == "queue":
            return "queued"
        if part == "processing":
            return "leased" if self.lease_left is not None else "expired"
        return part


@operation(scripts=("snapshot",), docs="spark.md#reads")
def snapshot_page(
    ops: QueueOps, part: str, max_bytes: int, *args: scripts.Arg
) -> Steps[tuple[int, list[Entry]]]:
    """Read one page of a part of the queue (see ``lua/snapshot.lua``).

    Args:
        ops: The queue.
        part: ``queue``, ``processing``, ``delayed``, ``dead`` or ``ids``.
        max_bytes: Stop after the entry that brings the data read to this many bytes.
        *args: The first and last position (or rank) of the page, or the ids.

    Returns:
        How many entries were looked at, and the items among them.
    """
    examined, rows = yield snapshot_call(ops.keys, part, max_bytes, *args)
    entries = [
        Entry(
            decode(raw_id),
            bytes(data),
            int(deliveries),
            int(left) / 1000 if int(left) >= 0 else None,
            None if reason is None else decode(reason),
        )
        for raw_id, data, deliveries, left, reason in rows
    ]
    return int(examined), entries


@operation(scripts=("complete_held",), writes=True, docs="spark.md#streaming-reads")
def complete_held(ops: QueueOps, held: Sequence[tuple[str, str]]) -> Steps[int]:
    """Complete the items whose lease the caller still holds.

    Args:
        ops: The queue.
        held: Pairs of an item id and the lease value it was given (``Item.lease_token``).

    Returns:
        How many items this call completed; the others were not held any more.
    """
    done = 0
    for start in range(0, len(held), COMPLETE_CHUNK):
        fields: list[str] = []
        for item_id, token in held[start : start + COMPLETE_CHUNK]:
            fields += (item_id, token)
        flags: Any = yield complete_held_call(ops.keys, *fields)
        done += sum(int(flag) for flag in flags)
    return done
