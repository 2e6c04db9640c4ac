"""Completing an item and leasing the next in one call (``complete_and_lease_from``).

Every test runs on both APIs (``acomplete_and_lease_from`` on a ``redis.asyncio`` twin of the
test's client) and every backend; where the number of script calls is the point, it is read
from the real server's ``INFO commandstats``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
import redis

import async_bridge
from helpers import dump_state, keys_left, lrange, script_calls
from plugins.backends import Backend
from redis_work_queue import (
    AsyncWorkQueue,
    InvalidArgumentError,
    Item,
    KeyPrefix,
    WorkQueue,
    acomplete_and_lease_from,
    complete_and_lease_from,
    scripts,
)
from redis_work_queue.ops.lease import LEASE_BUDGET

#: complete_and_lease_from(queue named done, item, queues named names, lease_secs,
#: max_deliveries): whether it completed the item, and (prefix, item) of what it leased.
Call = Callable[..., tuple[bool, tuple[str, Item] | None]]


@pytest.fixture(params=["sync", "asyncio"])
def call(request: pytest.FixtureRequest, db: redis.Redis) -> Call:
    bridge = async_bridge.BlockingAsyncQueue(KeyPrefix("bridge"))

    def run(
        done: str,
        item: Any,
        names: Sequence[str],
        lease_secs: Any = 30,
        max_deliveries: int | None = None,
    ) -> tuple[bool, tuple[str, Item] | None]:
        kind: Any = WorkQueue if request.param == "sync" else AsyncWorkQueue
        queues = [kind(KeyPrefix(name), max_deliveries) for name in names]
        queue = next((q for q in queues if q.name.prefix == done), None)
        if queue is None:
            queue = kind(KeyPrefix(done), max_deliveries)
        if request.param == "sync":
            completed, got = complete_and_lease_from(db, queue, item, queues, lease_secs)
        else:
            twin = bridge._twin(db)
            coro = acomplete_and_lease_from(twin, queue, item, queues, lease_secs)
            completed, got = async_bridge.loop().run(coro)
        assert type(completed) is bool
        if got is None:
            return completed, None
        assert got[0] is queues[[q.name.prefix for q in queues].index(got[0].name.prefix)]
        return completed, (got[0].name.prefix, got[1])

    return run


def calls_counter(backend: Backend) -> Callable[[], int]:
    """Script calls the real server ran since this was made; -1 on fakeredis (not counted).

    Every script is loaded first, so that none is sent twice (EVALSHA, NOSCRIPT, EVAL).
    """
    if not backend.real:
        return lambda: -1
    admin = backend.client(decode_responses=True, protocol=2)
    scripts.preload(admin)
    admin.config_resetstat()
    return lambda: script_calls(admin)


def leased(db: redis.Redis, prefix: str, item_id: str) -> bool:
    return bool(db.exists(f"{prefix}:lease:{item_id}")) and item_id.encode() in lrange(
        db, f"{prefix}:processing"
    )


def add_and_lease(db: redis.Redis, queue: WorkQueue, item_id: str) -> Item:
    """Add an item (its data is its id) to ``queue`` and lease it."""
    queue.add_item(db, Item(item_id.encode(), id=item_id))
    item = queue.lease(db, 30, block=False)
    assert item is not None and item.id() == item_id
    return item


def test_completes_then_leases_the_next_by_priority_in_one_call(
    db: redis.Redis, backend: Backend, call: Call
) -> None:
    hi, lo = WorkQueue(KeyPrefix("hi")), WorkQueue(KeyPrefix("lo"))
    first = add_and_lease(db, lo, "a")
    lo.add_item(db, Item(b"b", id="b"))
    hi.add_item(db, Item(b"c", id="c"))
    calls = calls_counter(backend)

    done, got = call("lo", first, ["hi", "lo"])
    assert done is True
    assert got is not None and got[0] == "hi" and got[1].id() == "c"
    assert got[1].data() == b"c" and got[1].deliveries == 1 and got[1].lease_token
    assert not db.exists("lo:item:a") and lrange(db, "lo:processing") == []
    assert leased(db, "hi", "c")

    done, got = call("hi", got[1], ["hi", "lo"])
    assert done is True
    assert got is not None and got[0] == "lo" and got[1].id() == "b"
    done, got = call("lo", got[1], ["hi", "lo"])
    assert (done, got) == (True, None)
    assert keys_left(db) == []
    assert db.hget("lo:counts", "completed") in (b"2", "2")
    assert db.hget("hi:counts", "completed") in (b"1", "1")
    assert calls() in (-1, 3)


def test_the_lease_is_renewable_and_completable_as_any_other(db: redis.Redis, call: Call) -> None:
    queue = WorkQueue(KeyPrefix("q"))
    queue.add_items(db, [Item(b"1", id="one"), Item(b"2", id="two")])
    first = queue.lease(db, 30, block=False)
    assert first is not None
    _, got = call("q", first, ["q"], lease_secs=0.5)
    assert got is not None
    item = got[1]
    assert 0 < db.pttl("q:lease:two") <= 500
    assert queue.renew(db, item, 30) is True
    assert db.pttl("q:lease:two") > 25_000
    assert queue.complete(db, item) is True
    assert keys_left(db) == []


def test_an_item_done_already_is_reported_and_the_next_still_leased(
    db: redis.Redis, call: Call
) -> None:
    queue = WorkQueue(KeyPrefix("q"))
    queue.add_items(db, [Item(b"1", id="one"), Item(b"2", id="two")])
    first = queue.lease(db, 30, block=False)
    assert first is not None
    assert queue.complete(db, first) is True
    done, got = call("q", first, ["q"])
    assert done is False
    assert got is not None and got[1].id() == "two"
    assert db.hget("q:counts", "completed") in (b"1", "1")


def test_a_queue_not_leased_from_is_completed_in_a_call_of_its_own(
    db: redis.Redis, backend: Backend, call: Call
) -> None:
    other, queue = WorkQueue(KeyPrefix("other")), WorkQueue(KeyPrefix("q"))
    taken = add_and_lease(db, other, "o")
    queue.add_item(db, Item(b"n", id="n"))
    calls = calls_counter(backend)
    done, got = call("other", taken, ["q"])
    assert done is True
    assert got is not None and got[0] == "q" and got[1].id() == "n"
    assert not db.exists("other:item:o")
    assert calls() in (-1, 2)


@pytest.mark.parametrize(
    ("names", "item", "lease_secs", "error"),
    [
        ([], None, 30, "at least one queue"),
        (["q"], None, 0, "lease_secs"),
        (["q"], None, "30", "lease_secs"),
        (["q"], "one", 30, "expected an Item"),
    ],
)
def test_bad_arguments_change_nothing(
    db: redis.Redis, call: Call, names: list[str], item: Any, lease_secs: Any, error: str
) -> None:
    queue = WorkQueue(KeyPrefix("q"))
    queue.add_items(db, [Item(b"1", id="one"), Item(b"2", id="two")])
    held = queue.lease(db, 30, block=False)
    assert held is not None
    before = dump_state(db)
    with pytest.raises(InvalidArgumentError, match=error):
        call("q", held if item is None else item, names, lease_secs)
    assert dump_state(db) == before


def test_a_lease_that_drops_many_gone_ids_goes_on_and_completes_once(
    db: redis.Redis, backend: Backend, call: Call
) -> None:
    queue = WorkQueue(KeyPrefix("q"))
    queue.add_items(db, [Item(b"1", id="one"), Item(b"r", id="real")])
    held = queue.lease(db, 30, block=False)
    assert held is not None and held.id() == "one"
    # Ids whose items are gone, at the oldest end: more than one call may drop.
    db.rpush("q:queue", *[f"gone-{i}" for i in range(LEASE_BUDGET + 50)])
    calls = calls_counter(backend)
    done, got = call("q", held, ["q"])
    assert done is True
    assert got is not None and got[1].id() == "real"
    assert db.llen("q:queue") == 0
    assert db.hget("q:counts", "completed") in (b"1", "1")
    assert calls() in (-1, 2)


def test_an_item_at_its_last_delivery_is_buried_and_the_next_leased(
    db: redis.Redis, call: Call
) -> None:
    queue = WorkQueue(KeyPrefix("q"), max_deliveries=2)
    queue.add_items(db, [Item(b"1", id="one"), Item(b"x", id="spent"), Item(b"n", id="next")])
    held = queue.lease(db, 30, block=False)
    assert held is not None and held.id() == "one"
    db.hset("q:deliveries", "spent", 2)
    done, got = call("q", held, ["q"], max_deliveries=2)
    assert done is True
    assert got is not None and got[1].id() == "next"
    assert [d.id for d in queue.dead_letters(db)] == ["spent"]


def test_empty_queues_lease_nothing_but_the_item_is_completed(db: redis.Redis, call: Call) -> None:
    queue = WorkQueue(KeyPrefix("q"))
    queue.add_item(db, Item(b"1", id="one"))
    queue.add_item(db, Item(b"later", id="later"), delay=30)
    held = queue.lease(db, 30, block=False)
    assert held is not None
    assert call("q", held, ["q"]) == (True, None)
    assert not db.exists("q:item:one")
    assert db.zscore("q:delayed", "later") is not None
