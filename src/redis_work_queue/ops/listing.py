"""Listings for an operator's console: a page of the delayed items, soonest due first.

The other listings (``peek``, ``pending``, ``dead_letters``) live with the queue's operations
(:mod:`.queue`); this one reads the delayed set in the same bounded way: one page of ids by
index, each item's data up to a preview bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..calls import ScriptCall, Steps
from ..keyprefix import QueueKeys
from ..results import SIZE_OF_DATA, Previewed
from ..validation import check_page, check_preview, decode
from .registry import builds, operation

__all__ = ["DelayedItem", "delayed", "delayed_call"]

API = "queue.md#the-api"


@dataclass(frozen=True)
class DelayedItem(Previewed):
    """An item held back until a due time, as seen by :meth:`WorkQueue.delayed`.

    Attributes:
        position: 0 for the item due soonest, 1 for the next, and so on.
        id: The item's id.
        due_at: When it falls due (seconds since the epoch).
        data: Its data (its first ``preview_bytes`` bytes when the listing asked for a
            preview), or None when the id is a leftover of an item that no longer exists.
        size: The length of its whole data in bytes, or None when there is none; when not
            given, the length of ``data``.
    """

    position: int
    id: str
    due_at: float
    data: bytes | None
    size: int | None = SIZE_OF_DATA


@builds("delayed")
def delayed_call(keys: QueueKeys, first: int, last: int, preview: int) -> ScriptCall:
    """``lua/delayed.lua``: the delayed set's entries first..last (soonest due first).

    ``preview`` is how many bytes of each item's data come back (-1: all of it).
    """
    return ScriptCall.on(keys, "delayed", first, last, preview)


@operation(methods=("delayed",), scripts=("delayed",), docs=API)
def delayed(
    keys: QueueKeys, start: int, count: int, preview_bytes: int | None = None
) -> Steps[list[DelayedItem]]:
    """A page of the delayed items, soonest due first; see ``WorkQueue.delayed``."""
    check_page(start, count)
    bound = check_preview(preview_bytes)
    if start >= 0:
        first, last = start, start + count - 1
    else:
        first, last = start, min(start + count - 1, -1)  # from the latest due, onwards
    total, *rows = yield delayed_call(keys, first, last, bound)
    base = start if start >= 0 else max(int(total) + start, 0)
    return [
        DelayedItem(
            base + offset,
            decode(raw_id),
            int(due) / 1000,
            data,
            None if size is None else int(size),
        )
        for offset, (raw_id, due, data, size) in enumerate(rows)
    ]
