"""Bad input is refused with a clear exception before anything is sent to Redis, and a queue
key of the wrong Redis type gives WrongKeyTypeError without changing anything."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import redis

from helpers import dump_state, keys_left
from redis_work_queue import (
    InvalidArgumentError,
    Item,
    KeyPrefix,
    ScriptError,
    WorkQueue,
    WorkQueueError,
    WrongKeyTypeError,
)

QUEUE = KeyPrefix("err")


@pytest.fixture
def sent(db: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """Every command the library sends through ``db`` (recorded from now on)."""
    commands: list[tuple[Any, ...]] = []
    original = db.execute_command

    def spy(*args: Any, **options: Any) -> Any:
        commands.append(args)
        return original(*args, **options)

    monkeypatch.setattr(db, "execute_command", spy)
    return commands


def test_exception_hierarchy() -> None:
    assert issubclass(InvalidArgumentError, ValueError)
    assert issubclass(InvalidArgumentError, WorkQueueError)
    assert issubclass(WrongKeyTypeError, WorkQueueError)
    assert issubclass(ScriptError, WorkQueueError)


BAD_LEASE_SECS = [0, 0.0, -1, -0.5, math.nan, math.inf, -math.inf, True, False, "5", None, 0.0004]


@pytest.mark.parametrize("lease_secs", BAD_LEASE_SECS, ids=repr)
@pytest.mark.parametrize("block", [False, True])
def test_bad_lease_secs(
    db: redis.Redis,
    queue: WorkQueue,
    sent: list[tuple[Any, ...]],
    lease_secs: Any,
    block: bool,
) -> None:
    with pytest.raises(InvalidArgumentError):
        queue.lease(db, lease_secs, block=block, timeout=1)
    assert sent == []


@pytest.mark.parametrize("lease_secs", [1e20, 1e308], ids=repr)
def test_huge_lease_secs_is_refused_before_anything_changes(
    bytes_db: redis.Redis, queue: WorkQueue, lease_secs: float
) -> None:
    """A lease Redis cannot store must be refused up front: it must neither surface as a
    bare OverflowError nor pop the item off the queue and lose it."""
    queue.add_item(bytes_db, Item(b"keep", id="keep"))
    before = dump_state(bytes_db)
    with pytest.raises(InvalidArgumentError):
        queue.lease(bytes_db, lease_secs, block=False)
    assert dump_state(bytes_db) == before
    assert queue.queue_len(bytes_db) == 1


@pytest.mark.parametrize("timeout", [-1, -0.001, math.nan, math.inf, "1", None, True], ids=repr)
def test_bad_timeout(
    db: redis.Redis, queue: WorkQueue, sent: list[tuple[Any, ...]], timeout: Any
) -> None:
    with pytest.raises(InvalidArgumentError):
        queue.lease(db, 10, timeout=timeout)
    assert sent == []


@pytest.mark.parametrize("lease_secs", ["5", None, b"1"], ids=repr)
def test_a_duration_of_the_wrong_type_is_also_a_type_error(
    db: redis.Redis, queue: WorkQueue, sent: list[tuple[Any, ...]], lease_secs: Any
) -> None:
    with pytest.raises(InvalidArgumentError, match="lease_secs must be a number") as raised:
        queue.lease(db, lease_secs, block=False)
    assert isinstance(raised.value, TypeError)
    with pytest.raises(InvalidArgumentError) as out_of_range:
        queue.lease(db, -1, block=False)
    assert not isinstance(out_of_range.value, TypeError)  # a bad value is a ValueError only
    assert sent == []


def test_a_reason_that_is_not_a_str_is_a_type_error(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"r", id="r"))
    item = queue.lease(db, 30, block=False)
    assert item is not None
    with pytest.raises(InvalidArgumentError, match="reason must be a str") as raised:
        queue.release(db, item, reason=7)  # type: ignore[arg-type]
    assert isinstance(raised.value, TypeError)
    assert queue.pending(db)[0].id == "r"  # still held: nothing was sent


NOT_ITEMS = ["id", b"data", None, 5, {"data": "x", "id": "y"}]


@pytest.mark.parametrize("not_item", NOT_ITEMS, ids=repr)
@pytest.mark.parametrize("method", ["add_item", "add_unique_item", "complete"])
def test_non_item_refused(
    db: redis.Redis,
    queue: WorkQueue,
    sent: list[tuple[Any, ...]],
    method: str,
    not_item: Any,
) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        getattr(queue, method)(db, not_item)
    assert isinstance(raised.value, TypeError)  # a wrong Python type is also a TypeError
    assert sent == []
    assert keys_left(db) == []


@pytest.mark.parametrize("method", ["add_unique_item_to_pipeline", "add_item_to_pipeline"])
def test_non_item_refused_on_pipeline(db: redis.Redis, queue: WorkQueue, method: str) -> None:
    pipe = db.pipeline()
    with pytest.raises(InvalidArgumentError):
        getattr(queue, method)(pipe, "not an item")
    assert len(pipe) == 0
    assert pipe.execute() == []
    assert keys_left(db) == []


def test_empty_id_and_wrong_data_type() -> None:
    with pytest.raises(InvalidArgumentError, match="empty"):
        Item(b"x", id="")
    with pytest.raises(InvalidArgumentError, match="bytes or str"):
        Item(12345)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        Item.from_dict({"data": None})


# Wrong Redis types at the queue's keys -----------------------------------------------------


def _populate(db: redis.Redis, queue: WorkQueue) -> None:
    """Other items in every state: queued, leased, expired lease, lost (in neither list)."""
    for i in range(4):
        queue.add_item(db, Item(f"d{i}".encode(), id=f"i{i}"))
    queue.lease(db, 30, block=False)  # i0 leased
    queue.lease(db, 30, block=False)  # i1 leased, lease gone below
    db.delete("err:lease:i1")
    db.set("err:item:lost", b"lost")


def _break(db: redis.Redis, key: str) -> None:
    """Replace a list of the queue by a string."""
    db.delete(key)
    db.set(key, b"not a list")


Op = Callable[[WorkQueue, redis.Redis], Any]

WRONG_TYPE_CASES: list[tuple[str, str, Op]] = [
    ("queue", "add_item", lambda q, db: q.add_item(db, Item(b"new", id="new"))),
    ("queue", "add_unique_item", lambda q, db: q.add_unique_item(db, Item(b"new", id="new"))),
    ("queue", "lease", lambda q, db: q.lease(db, 30, block=False)),
    ("queue", "lease-blocking", lambda q, db: q.lease(db, 30, timeout=0.05)),
    ("queue", "queue_len", lambda q, db: q.queue_len(db)),
    ("queue", "light_clean", lambda q, db: q.light_clean(db)),
    ("queue", "deep_clean", lambda q, db: q.deep_clean(db)),
    ("processing", "lease", lambda q, db: q.lease(db, 30, block=False)),
    ("processing", "complete", lambda q, db: q.complete(db, Item(b"", id="i0"))),
    ("processing", "processing", lambda q, db: q.processing(db)),
    ("processing", "light_clean", lambda q, db: q.light_clean(db)),
    ("processing", "deep_clean", lambda q, db: q.deep_clean(db)),
]


@pytest.mark.parametrize(
    ("broken", "name", "operation"),
    WRONG_TYPE_CASES,
    ids=[f"{key}-is-string-{name}" for key, name, _ in WRONG_TYPE_CASES],
)
def test_wrong_key_type_raises_and_changes_nothing(
    bytes_db: redis.Redis, queue: WorkQueue, broken: str, name: str, operation: Op
) -> None:
    """WrongKeyTypeError promises "nothing was changed": every key, the other items' data,
    lists and leases included, must be exactly as before the failed call."""
    _populate(bytes_db, queue)
    _break(bytes_db, f"err:{broken}")
    before = dump_state(bytes_db)
    with pytest.raises(WrongKeyTypeError) as caught:
        operation(queue, bytes_db)
    assert isinstance(caught.value, TypeError)
    assert "wrong" in str(caught.value).lower()
    assert dump_state(bytes_db) == before


def test_queue_works_again_once_the_key_is_fixed(db: redis.Redis, queue: WorkQueue) -> None:
    _populate(db, queue)
    _break(db, "err:queue")
    with pytest.raises(WrongKeyTypeError):
        queue.lease(db, 30, block=False)
    db.delete("err:queue")  # the queued ids i2, i3 went with it; their data is intact
    assert queue.light_clean(db).requeued == 1  # i1
    assert queue.deep_clean(db).requeued == 3  # i2, i3, lost
    seen = set()
    while (item := queue.lease(db, 30, block=False)) is not None:
        seen.add(item.id())
        assert queue.complete(db, item) is True
    assert seen == {"i1", "i2", "i3", "lost"}
