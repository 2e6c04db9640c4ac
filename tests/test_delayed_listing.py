"""``delayed``: a page of the delayed items, soonest due first, with due times and bounded
previews (the console's delayed tab)."""

from __future__ import annotations

import time

import pytest
import redis

from redis_work_queue import DelayedItem, InvalidArgumentError, Item, KeyPrefix, WorkQueue

QUEUE = KeyPrefix("later")


def _delay(db: redis.Redis, queue: WorkQueue, n: int) -> list[str]:
    ids = [f"d{k}" for k in range(n)]
    for k, item_id in enumerate(ids):  # due in 100 s, 200 s, ... : d0 first
        queue.add_item(db, Item(f"data {k}", id=item_id), delay=100 * (k + 1))
    return ids


def test_delayed_lists_soonest_due_first_with_due_times(db: redis.Redis, queue: WorkQueue) -> None:
    ids = _delay(db, queue, 5)
    queue.add_item(db, Item(b"now", id="now"))
    now = time.time()
    page = queue.delayed(db)
    assert [d.id for d in page] == ids
    assert [d.position for d in page] == [0, 1, 2, 3, 4]
    for k, d in enumerate(page):
        assert isinstance(d, DelayedItem)
        assert abs(d.due_at - (now + 100 * (k + 1))) < 5
        assert (d.data, d.size, d.truncated) == (f"data {k}".encode(), 6, False)


def test_delayed_pages_and_negative_starts(db: redis.Redis, queue: WorkQueue) -> None:
    ids = _delay(db, queue, 7)
    assert [d.id for d in queue.delayed(db, 2, 3)] == ids[2:5]
    assert [d.position for d in queue.delayed(db, 2, 3)] == [2, 3, 4]
    assert [d.id for d in queue.delayed(db, 5, 10)] == ids[5:]
    assert queue.delayed(db, 9, 3) == []
    assert [(d.position, d.id) for d in queue.delayed(db, -2, 5)] == [(5, "d5"), (6, "d6")]
    assert queue.delayed(db, -10, 2) == []  # positions before the first: none, as peek
    assert [d.id for d in queue.delayed(db, -10, 5)] == ids[:2]


def test_delayed_previews_read_a_bounded_part(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"x" * 10_000, id="big"), delay=60)
    (big,) = queue.delayed(db, preview_bytes=16)
    assert (big.data, big.size, big.truncated) == (b"x" * 16, 10_000, True)
    (sized,) = queue.delayed(db, preview_bytes=0)
    assert (sized.data, sized.size) == (b"", 10_000)
    db.delete("later:item:big")
    (gone,) = queue.delayed(db, preview_bytes=16)
    assert (gone.id, gone.data, gone.size) == ("big", None, None)


@pytest.mark.parametrize(
    ("args", "needle"),
    [((0, 0), "count"), (("0", 1), "start"), ((0, 1, -1), "preview_bytes")],
)
def test_delayed_refuses_bad_pages(
    db: redis.Redis, queue: WorkQueue, args: tuple[object, ...], needle: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=needle):
        queue.delayed(db, *args)  # type: ignore[arg-type]
