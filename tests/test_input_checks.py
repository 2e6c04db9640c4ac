"""Bad input is refused with the library's error before anything is written, for every item of
a batch: ids that have no UTF-8 bytes or would name another id's keys, a single id where a list
is taken, bytes ids, and pages past what Redis's list indexes hold."""

from __future__ import annotations

import json

import pytest
import redis

from helpers import dump_state
from redis_work_queue import InvalidArgumentError, Item, KeyPrefix, WorkQueue, lease_from

QUEUE = KeyPrefix("checks")
#: A lone surrogate: Python text with no UTF-8 bytes.
LONE = json.loads('"\\ud800"')
#: Two surrogates that stand for the bytes of "é": they would name the keys of the id "é".
ALIAS = "\udcc3\udca9"


def _with_id(item_id: str, data: bytes = b"x") -> Item:
    """An item whose id was set after it was made (as a dict, an item can be changed)."""
    item = Item(data, id="placeholder")
    item["id"] = item_id
    return item


def _leased(db: redis.Redis, queue: WorkQueue, n: int) -> list[Item]:
    queue.add_items(db, [Item(b"d", id=f"ok-{i}") for i in range(n)])
    return queue.lease_many(db, 30, n, block=False)


@pytest.mark.parametrize("bad", [LONE, ALIAS, "ok" + LONE])
def test_an_item_refuses_an_id_without_bytes_of_its_own(bad: str) -> None:
    with pytest.raises(InvalidArgumentError, match="item id"):
        Item(b"x", id=bad)


def test_an_id_with_bytes_that_are_not_utf8_is_kept() -> None:
    """A surrogate from U+DC80 to U+DCFF alone stands for one byte, as ids read back from
    Redis keep it: such an id is valid."""
    assert Item(b"x", id="a\udcff").id() == "a\udcff"
    assert Item(b"x", id=b"a\xff").id() == "a\udcff"


def test_bytes_ids_are_decoded_not_turned_into_their_repr() -> None:
    assert Item(b"x", id=b"abc").id() == "abc"
    assert Item(b"x", id=bytearray(b"\xc3\xa9")).id() == "é"


@pytest.mark.parametrize("bad", [LONE, ALIAS])
def test_add_items_checks_every_item_before_the_first_call(
    db: redis.Redis, queue: WorkQueue, bad: str
) -> None:
    items = [Item(b"d", id=f"good-{i}") for i in range(1200)] + [_with_id(bad)]
    before = dump_state(db)
    with pytest.raises(InvalidArgumentError, match="item id"):
        queue.add_items(db, items)
    with pytest.raises(InvalidArgumentError, match="item id"):
        queue.add_items(db, items, unique=True)
    with pytest.raises(InvalidArgumentError, match="item id"):
        queue.add_item(db, _with_id(bad))
    with pytest.raises(InvalidArgumentError, match="item id"):
        queue.add_item(db, _with_id(bad), ttl=30)
    assert dump_state(db) == before


def test_an_id_that_spells_another_id_is_never_stored_on_its_keys(
    db: redis.Redis, queue: WorkQueue
) -> None:
    assert queue.add_item(db, Item(b"1", id="é"))
    with pytest.raises(InvalidArgumentError, match="would be stored as the bytes of 'é'"):
        queue.add_item(db, _with_id(ALIAS, b"2"))
    assert queue.item_data(db, "é") == b"1"
    with pytest.raises(InvalidArgumentError):
        queue.item_data(db, ALIAS)


@pytest.mark.parametrize("bad", [LONE, ALIAS])
def test_complete_many_checks_every_item_before_the_first_call(
    db: redis.Redis, queue: WorkQueue, bad: str
) -> None:
    leased = _leased(db, queue, 3)
    stray = _with_id(bad)
    stray.lease_token = leased[0].lease_token
    before = dump_state(db)
    with pytest.raises(InvalidArgumentError, match="item id"):
        queue.complete_many(db, [*leased, stray])
    with pytest.raises(InvalidArgumentError, match="item id"):
        queue.complete(db, stray)
    with pytest.raises(InvalidArgumentError, match="item id"):
        queue.release(db, stray)
    with pytest.raises(InvalidArgumentError, match="item id"):
        queue.renew_many(db, [*leased, stray], 30)
    assert dump_state(db) == before


@pytest.mark.parametrize("action", ["requeue_dead", "purge_dead"])
def test_dead_letter_actions_take_a_list_of_ids_never_one_str(
    db: redis.Redis, queue: WorkQueue, action: str
) -> None:
    before = dump_state(db)
    with pytest.raises(InvalidArgumentError, match=r"list of ids .* pass \['job-1'\]"):
        getattr(queue, action)(db, "job-1")
    with pytest.raises(InvalidArgumentError, match="list of ids"):
        getattr(queue, action)(db, b"job-1")
    with pytest.raises(InvalidArgumentError, match=r"ids\[1\]"):
        getattr(queue, action)(db, ["job-1", LONE])
    with pytest.raises(InvalidArgumentError, match=r"ids\[1\] must be a str"):
        getattr(queue, action)(db, ["job-1", 7])
    assert dump_state(db) == before


@pytest.mark.parametrize("listing", ["peek", "pending", "dead_letters"])
@pytest.mark.parametrize(
    ("start", "count"), [(2**63, 1), (-(2**63) - 1, 1), (2**53 + 1, 1), (0, 2**63), (0, 2**64)]
)
def test_a_page_past_redis_list_indexes_is_refused(
    db: redis.Redis, queue: WorkQueue, listing: str, start: int, count: int
) -> None:
    queue.add_item(db, Item(b"d", id="one"))
    with pytest.raises(InvalidArgumentError, match=r"start|count"):
        getattr(queue, listing)(db, start, count)


@pytest.mark.parametrize("listing", ["peek", "pending", "dead_letters"])
def test_the_largest_page_is_answered(db: redis.Redis, queue: WorkQueue, listing: str) -> None:
    queue.add_item(db, Item(b"d", id="one"))
    assert getattr(queue, listing)(db, 2**53, 2**53) == []
    assert len(getattr(queue, listing)(db, -(2**53), 2**53)) <= 1


def test_lease_from_names_what_is_not_a_queue(db: redis.Redis) -> None:
    with pytest.raises(InvalidArgumentError, match=r"queues\[1\] is a str"):
        lease_from(db, [WorkQueue(QUEUE), "x"], 30)  # type: ignore[list-item]
