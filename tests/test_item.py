"""Item: construction, ids, data conversions, and ids of every shape going through a queue."""

from __future__ import annotations

import json
import time
import uuid

import pytest
import redis

from helpers import b, get, keys_left, lrange, wait_for
from redis_work_queue import InvalidArgumentError, Item, KeyPrefix, WorkQueue


def test_data_bytes_str_bytearray_memoryview() -> None:
    assert Item(b"\x00abc").data() == b"\x00abc"
    assert Item("héllo").data() == "héllo".encode()
    assert Item(bytearray(b"xy")).data() == b"xy"
    assert Item(memoryview(b"mv")).data() == b"mv"
    assert isinstance(Item(bytearray(b"xy")).data(), bytes)


def test_bytearray_is_copied() -> None:
    source = bytearray(b"abc")
    item = Item(source)
    source[0] = ord("z")
    assert item.data() == b"abc"


def test_default_id_is_uuid7_hex() -> None:
    item = Item(b"x")
    item_id = item.id()
    assert len(item_id) == 32
    assert item_id == item_id.lower()
    int(item_id, 16)  # only hex digits
    assert item_id[12] == "7"  # version nibble
    assert item_id[16] in "89ab"  # RFC 4122 variant
    assert uuid.UUID(hex=item_id).version == 7


def test_default_ids_are_unique_and_time_ordered() -> None:
    ids = [Item(b"").id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    # The first 48 bits are the creation time in milliseconds.
    millis = int(ids[-1][:12], 16)
    assert abs(millis - time.time() * 1000) < 60_000


def test_explicit_id_and_accessors() -> None:
    item = Item(b"data", id="job-1")
    assert item.id() == "job-1"
    assert item.data() == b"data"
    assert item.lease_token is None


def test_non_str_id_is_converted() -> None:
    assert Item(b"", id=5).id() == "5"  # type: ignore[arg-type]


def test_data_json_and_from_json_data() -> None:
    value = {"a": [1, 2, {"b": None}], "s": "é"}
    item = Item.from_json_data(value, id="j")
    assert item.id() == "j"
    assert item.data_json() == value
    assert b" " not in item.data()  # compact separators
    assert json.loads(item.data()) == value
    assert len(Item.from_json_data(1).id()) == 32


def test_from_dict() -> None:
    assert Item.from_dict({"data": "x", "id": "i"}) == Item(b"x", id="i")
    loaded = Item.from_dict({"data": "y"})
    assert loaded.data() == b"y"
    assert len(loaded.id()) == 32
    with pytest.raises(KeyError):
        Item.from_dict({"id": "i"})


def test_parse() -> None:
    assert Item.parse('{"data": "d", "id": "p"}') == Item(b"d", id="p")
    assert Item.parse(b'{"data": "d"}').data() == b"d"
    with pytest.raises(InvalidArgumentError):
        Item.parse("[1, 2]")
    with pytest.raises(ValueError):
        Item.parse("not json")


def test_equality_hash_and_repr() -> None:
    one = Item(b"d", id="i")
    assert one == Item(bytearray(b"d"), id="i")
    assert one != Item(b"e", id="i")
    assert one != Item(b"d", id="j")
    assert one != "i"
    assert hash(one) == hash(Item(b"d", id="i"))
    assert len({one, Item(b"d", id="i")}) == 1
    assert "id='i'" in repr(one)
    long_repr = repr(Item(b"x" * 1000, id="l"))
    assert len(long_repr) < 100
    assert "..." in long_repr


@pytest.mark.parametrize(
    "bad",
    [None, 5, 1.5, ["a"], {"a": 1}, object()],
    ids=["None", "int", "float", "list", "dict", "object"],
)
def test_wrong_data_type(bad: object) -> None:
    with pytest.raises(InvalidArgumentError):
        Item(bad)  # type: ignore[arg-type]


def test_empty_id_rejected() -> None:
    with pytest.raises(InvalidArgumentError):
        Item(b"x", id="")
    with pytest.raises(ValueError):  # InvalidArgumentError is a ValueError
        Item(b"x", id="")


SPECIAL_IDS = [
    "ünïcødé-✓-日本",
    "with:colons:in:it",
    "with spaces  in it",
    "{braces}",
    "a}b{c",
    "star*",
    "question?",
    "[brackets]",
    "back\\slash",
    "*?[]\\",
    ":item:",
    "emoji-🎉",
]


def test_special_ids_full_lifecycle(db: redis.Redis) -> None:
    """Unicode, colons, spaces, braces and glob characters survive add, lease, complete and
    both cleans."""
    queue = WorkQueue(KeyPrefix("special"))
    for item_id in SPECIAL_IDS:
        assert queue.add_item(db, Item(item_id.encode(), id=item_id))
        assert get(db, f"special:item:{item_id}") == item_id.encode()
    assert lrange(db, "special:queue") == [b(i) for i in reversed(SPECIAL_IDS)]

    # Lease every item for a very short time, let the leases expire, recover them.
    leased = [queue.lease(db, 0.05, block=False) for _ in SPECIAL_IDS]
    assert [it.id() for it in leased if it] == SPECIAL_IDS
    assert all(it is not None and it.data() == it.id().encode() for it in leased)
    for item_id in SPECIAL_IDS:
        assert get(db, f"special:lease:{item_id}") is not None
    wait_for(
        lambda: not any(db.exists(f"special:lease:{i}") for i in SPECIAL_IDS),
        timeout=5,
        what="leases to expire",
    )
    report = queue.light_clean(db)
    assert (report.examined, report.requeued, report.dropped) == (
        len(SPECIAL_IDS),
        len(SPECIAL_IDS),
        0,
    )
    assert queue.queue_len(db) == len(SPECIAL_IDS)
    assert queue.processing(db) == 0

    # Lose them all (data keys only), and let the deep clean find them.
    db.delete("special:queue")
    report = queue.deep_clean(db)
    assert report.examined == len(SPECIAL_IDS)
    assert report.requeued == len(SPECIAL_IDS)
    assert sorted(lrange(db, "special:queue")) == sorted(b(i) for i in SPECIAL_IDS)

    # Lease for real and complete each exactly once.
    done = set()
    while (item := queue.lease(db, 30, block=False)) is not None:
        assert item.data() == item.id().encode()
        assert get(db, f"special:lease:{item.id()}") == item.lease_token.encode()
        assert queue.complete(db, item) is True
        assert queue.complete(db, item) is False
        done.add(item.id())
    assert done == set(SPECIAL_IDS)
    assert queue.queue_len(db) == 0
    assert queue.processing(db) == 0
    assert keys_left(db) == []
