"""Adding items: add_item, add_unique_item, the pipeline variants, binary data."""

from __future__ import annotations

import os

import pytest
import redis

from helpers import b, get, lrange
from plugins.backends import Backend
from redis_work_queue import Item, KeyPrefix, WorkQueue

QUEUE = KeyPrefix("add")
QUEUE_SHARDS = (1, 4)
#: Tests that read this queue's keys or its order across all items: unsharded only.
SHARDS_SKIP = {
    "test_add_item_duplicate_id_changes_nothing",
    "test_add_item_of_leased_item_is_refused",
    "test_add_item_stores_data_then_queues_id",
    "test_add_through_pipeline",
    "test_add_unique_item",
    "test_add_unique_item_with_existing_id_overwrites_and_requeues",
    "test_binary_data_round_trips",
    "test_pipelined_add_of_an_existing_id_overwrites_and_requeues",
    "test_str_data_is_utf8",
}


def test_add_item_stores_data_then_queues_id(db: redis.Redis, queue: WorkQueue) -> None:
    assert queue.add_item(db, Item(b"payload", id="a")) is True
    assert get(db, "add:item:a") == b"payload"
    assert lrange(db, "add:queue") == [b"a"]
    assert queue.queue_len(db) == 1
    assert queue.processing(db) == 0
    assert not db.exists("add:lease:a")


def test_add_item_duplicate_id_changes_nothing(db: redis.Redis, queue: WorkQueue) -> None:
    assert queue.add_item(db, Item(b"first", id="dup")) is True
    assert queue.add_item(db, Item(b"second", id="dup")) is False
    assert get(db, "add:item:dup") == b"first"
    assert queue.queue_len(db) == 1
    assert lrange(db, "add:queue") == [b"dup"]


def test_add_item_of_leased_item_is_refused(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"first", id="x"))
    leased = queue.lease(db, 30, block=False)
    assert leased is not None
    assert queue.add_item(db, Item(b"again", id="x")) is False
    assert queue.queue_len(db) == 0
    assert queue.processing(db) == 1
    assert get(db, "add:item:x") == b"first"


def test_add_item_after_completion_adds_again(db: redis.Redis, queue: WorkQueue) -> None:
    item = Item(b"v1", id="again")
    queue.add_item(db, item)
    assert queue.complete(db, item) is True
    assert queue.add_item(db, Item(b"v2", id="again")) is True
    leased = queue.lease(db, 30, block=False)
    assert leased is not None
    assert leased.data() == b"v2"


def test_add_unique_item(db: redis.Redis, queue: WorkQueue) -> None:
    item = Item(b"u")
    assert queue.add_unique_item(db, item) is None
    assert lrange(db, "add:queue") == [b(item.id())]
    assert get(db, f"add:item:{item.id()}") == b"u"


def test_add_unique_item_with_existing_id_overwrites_and_requeues(
    db: redis.Redis, queue: WorkQueue
) -> None:
    """As documented: the check is skipped, so the data is overwritten and the id queued
    twice; the second copy is dropped when it is met, never leased twice."""
    queue.add_unique_item(db, Item(b"one", id="same"))
    queue.add_unique_item(db, Item(b"two", id="same"))
    assert queue.queue_len(db) == 2
    assert get(db, "add:item:same") == b"two"
    first = queue.lease(db, 30, block=False)
    assert first is not None
    assert first.data() == b"two"
    assert queue.lease(db, 30, block=False) is None  # the stray copy is dropped
    assert queue.queue_len(db) == 0
    assert lrange(db, "add:processing") == [b"same"]


@pytest.mark.parametrize("method", ["add_unique_item_to_pipeline", "add_item_to_pipeline"])
def test_pipelined_add_of_an_existing_id_overwrites_and_requeues(
    db: redis.Redis, queue: WorkQueue, method: str
) -> None:
    """As documented: neither pipelined add checks for an existing id (its replies are shaped
    as SET and LPUSH), so both behave as add_unique_item does."""
    assert queue.add_item(db, Item(b"one", id="same")) is True
    pipe = db.pipeline()
    getattr(queue, method)(pipe, Item(b"two", id="same"))
    assert pipe.execute() == [True, 2]
    assert queue.queue_len(db) == 2
    assert get(db, "add:item:same") == b"two"


@pytest.mark.parametrize("method", ["add_unique_item_to_pipeline", "add_item_to_pipeline"])
@pytest.mark.parametrize("transaction", [True, False])
def test_add_through_pipeline(
    db: redis.Redis, queue: WorkQueue, method: str, transaction: bool
) -> None:
    items = [Item(f"p{i}".encode(), id=f"p{i}") for i in range(5)]
    pipe = db.pipeline(transaction=transaction)
    for item in items:
        assert getattr(queue, method)(pipe, item) is None
    assert queue.queue_len(db) == 0  # nothing runs before execute
    assert not db.exists("add:item:p0")
    results = pipe.execute()
    assert results == [True, 1, True, 2, True, 3, True, 4, True, 5]  # as SET and LPUSH reply
    assert queue.queue_len(db) == 5
    leased = [queue.lease(db, 30, block=False) for _ in items]
    assert [it.id() for it in leased if it] == [it.id() for it in items]  # FIFO
    assert [it.data() for it in leased if it] == [it.data() for it in items]


def test_pipeline_loads_scripts_after_script_flush(db: redis.Redis, queue: WorkQueue) -> None:
    db.script_flush()
    pipe = db.pipeline()
    queue.add_unique_item_to_pipeline(pipe, Item(b"x", id="x"))
    pipe.execute()
    assert queue.queue_len(db) == 1


def test_scripts_reload_after_script_flush(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"1", id="1"))
    db.script_flush()  # EVALSHA now fails with NOSCRIPT; the library falls back to EVAL
    assert queue.add_item(db, Item(b"2", id="2")) is True
    db.script_flush()
    leased = queue.lease(db, 30, block=False)
    assert leased is not None
    db.script_flush()
    assert queue.complete(db, leased) is True
    assert queue.queue_len(db) == 1


def test_str_data_is_utf8(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item("naïve ☃", id="s"))
    assert get(db, "add:item:s") == "naïve ☃".encode()
    leased = queue.lease(db, 30, block=False)
    assert leased is not None
    assert leased.data().decode("utf-8") == "naïve ☃"


BINARY_CASES = {
    "empty": b"",
    "nul-bytes": b"\x00\x00a\x00b\x00",
    "all-256-bytes": bytes(range(256)) * 4,
    "invalid-utf8": b"\xff\xfe\xc3\x28\x80",
    "one-mebibyte": os.urandom(1024 * 1024),
}


@pytest.mark.parametrize("payload", BINARY_CASES.values(), ids=BINARY_CASES.keys())
def test_binary_data_round_trips(backend: Backend, queue: WorkQueue, payload: bytes) -> None:
    """Binary data survives add and lease, also on clients with decode_responses=True."""
    db = backend.client()
    assert queue.add_item(db, Item(payload, id="bin")) is True
    queue.add_unique_item(db, Item(payload, id="bin-unique"))
    pipe = db.pipeline()
    queue.add_unique_item_to_pipeline(pipe, Item(bytearray(payload), id="bin-pipe"))
    pipe.execute()
    raw_client = backend.client(decode_responses=False)
    for item_id in ("bin", "bin-unique", "bin-pipe"):
        assert raw_client.get(f"add:item:{item_id}") == payload
    for item_id in ("bin", "bin-unique", "bin-pipe"):
        leased = queue.lease(db, 30, block=False)
        assert leased is not None
        assert leased.id() == item_id
        assert type(leased.data()) is bytes
        assert leased.data() == payload
        assert queue.complete(db, leased) is True
