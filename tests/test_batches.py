"""Batches: add_items, lease_many and complete_many give the results of the same operations done
one at a time (duplicates, existing ids, missing and already-completed ids), across chunk
boundaries (500 items, 4 MB of data), and a bad item anywhere in a batch writes nothing."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from helpers import keys_left, raw, wait_for
from plugins.backends import Backend
from redis_work_queue import InvalidArgumentError, Item, KeyPrefix, WorkQueue, transport
from redis_work_queue.calls import ScriptCall
from redis_work_queue.ops import ADD_CHUNK, ADD_CHUNK_BYTES, COMPLETE_CHUNK

BATCH = KeyPrefix("batch")
SINGLE = KeyPrefix("single")


@pytest.fixture
def script_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[ScriptCall]]:
    """Every script call the library sends (recorded through transport.execute)."""
    seen: list[ScriptCall] = []
    original = transport.execute

    def recording(db: Any, call: Any) -> Any:
        if isinstance(call, ScriptCall):
            seen.append(call)
        return original(db, call)

    monkeypatch.setattr(transport, "execute", recording)
    yield seen


def _calls_of(calls: list[ScriptCall], name: str) -> list[ScriptCall]:
    return [c for c in calls if c.script.name == name]


def _added_data(queue: WorkQueue, call: ScriptCall) -> list[Any]:
    """The data of the items an add call carries: after the queue's own arguments and the four
    of add (unique, delay, due time, ttl), (id, data) pairs."""
    return list(call.args[len(queue.ops.script_args) + 4 :][1::2])


def queue_state(db: redis.Redis, queue: WorkQueue) -> dict[bytes, Any]:
    """Every key of ``queue``, named without its prefix, with a comparable value.

    Lease values hold random tokens and times, so only their presence and kind is kept; sorted
    sets are compared by member.
    """
    prefix = queue.name.prefix.encode()
    state: dict[bytes, Any] = {}
    cursor: Any = 0
    keys: list[bytes] = []
    while True:
        cursor, found = raw(db, "SCAN", cursor, "MATCH", queue.name.prefix + ":*", "COUNT", 1000)
        keys += found
        if int(cursor) == 0:
            break
    for key in keys:
        name = bytes(key)[len(prefix) :]
        kind = raw(db, "TYPE", key)
        kind = kind.decode() if isinstance(kind, bytes) else str(kind)
        if kind == "string":
            value: Any = raw(db, "GET", key)
            if name.startswith(b":lease:"):
                value = "delayed" if value == b"delayed" else "lease"
        elif kind == "list":
            value = list(raw(db, "LRANGE", key, 0, -1))
        elif kind == "hash":
            flat = raw(db, "HGETALL", key)
            value = (
                dict(flat.items())
                if isinstance(flat, dict)
                else dict(zip(flat[0::2], flat[1::2], strict=True))
            )
        elif kind == "zset":
            value = sorted(raw(db, "ZRANGE", key, 0, -1))
        else:
            value = kind
        state[name] = value
    return state


def _ids(items: list[Item]) -> list[str]:
    return [item.id() for item in items]


def lease_n(db: redis.Redis, queue: WorkQueue, n: int) -> list[Item]:
    """Lease ``n`` items with lease_many calls of at most 50 (a single call hands out at most
    100: see test_lease_many_hands_out_count_items_when_there_are_that_many)."""
    leased: list[Item] = []
    while len(leased) < n:
        got = queue.lease_many(db, 30, min(50, n - len(leased)), block=False)
        assert got, f"only {len(leased)} of {n} items could be leased"
        leased += got
    return leased


def test_add_items_matches_add_item_one_at_a_time(db: redis.Redis) -> None:
    batch, single = WorkQueue(BATCH), WorkQueue(SINGLE)
    for queue in (batch, single):
        queue.add_item(db, Item(b"old", id="exists"))
        queue.add_item(db, Item(b"leased", id="held"))
        assert queue.lease(db, 30, block=False) is not None  # "exists" is leased now
        queue.add_item(db, Item(b"later", id="delayed"), delay=60)
    items = [
        Item(b"a", id="a"),
        Item(b"b", id="b"),
        Item(b"a2", id="a"),  # a duplicate within the batch
        Item(b"x", id="exists"),  # leased
        Item(b"y", id="held"),  # queued
        Item(b"z", id="delayed"),  # delayed
        Item(b"c", id="c"),
        Item(b"b3", id="b"),
    ]
    flags = batch.add_items(db, items)
    one_by_one = [single.add_item(db, item) for item in items]
    assert flags == one_by_one == [True, True, False, False, False, False, True, False]
    assert queue_state(db, batch) == queue_state(db, single)
    # The first copy of a duplicated id wins; leasing order is the order of the batch.
    order = [batch.lease(db, 30, block=False) for _ in range(4)]
    assert [(i.id(), i.data()) for i in order if i] == [
        ("held", b"leased"),
        ("a", b"a"),
        ("b", b"b"),
        ("c", b"c"),
    ]


def test_add_items_unique_skips_the_check(db: redis.Redis) -> None:
    batch, single = WorkQueue(BATCH), WorkQueue(SINGLE)
    items = [Item(b"1", id="u"), Item(b"2", id="u"), Item(b"3", id="v")]
    assert batch.add_items(db, items, unique=True) == [True, True, True]
    for item in items:
        single.add_unique_item(db, item)
    assert queue_state(db, batch) == queue_state(db, single)
    assert batch.queue_len(db) == 3  # no check: the id is queued twice, its last data kept
    assert raw(db, "GET", "batch:item:u") == b"2"


@pytest.mark.parametrize("ttl", [None, 300])
@pytest.mark.parametrize("unique", [False, True])
def test_add_items_keeps_and_drops_bookkeeping_as_add_item_does(
    db: redis.Redis, unique: bool, ttl: float | None
) -> None:
    """Existing items (one with a delivery count), a new id with a count left behind by another
    client, duplicates: the batch and one call per item leave the same keys, with or without
    the existence check and a time to live."""
    batch, single = WorkQueue(BATCH), WorkQueue(SINGLE)
    for queue in (batch, single):
        queue.add_item(db, Item(b"old", id="seen"))
        leased = queue.lease(db, 30, block=False)
        assert leased is not None and queue.release(db, leased, reason="again")
        queue.add_item(db, Item(b"", id="empty"))  # an empty value still exists
        raw(db, "HSET", f"{queue.name.prefix}:deliveries", "stale", 3)
    items = [
        Item(b"1", id="seen"),
        Item(b"2", id="stale"),
        Item(b"3", id="empty"),
        Item(b"4", id="new"),
        Item(b"5", id="new"),
    ]
    flags = batch.add_items(db, items, unique=unique, ttl=ttl)
    if unique:
        for item in items:
            single.add_unique_item(db, item, ttl=ttl)
        assert flags == [True] * 5
    else:
        one_by_one = [single.add_item(db, item, ttl=ttl) for item in items]
        assert flags == one_by_one == [False, True, False, True, False]
    assert queue_state(db, batch) == queue_state(db, single)
    for item_id in ("seen", "stale", "empty", "new"):
        written = unique or item_id in ("stale", "new")
        has_ttl = [raw(db, "PTTL", f"{q.prefix}:item:{item_id}") > 0 for q in (BATCH, SINGLE)]
        assert has_ttl == [written and ttl is not None] * 2, item_id


def test_add_items_writes_a_batch_s_data_in_one_mset(real_db: redis.Redis) -> None:
    queue = WorkQueue(BATCH)

    def calls(command: str) -> int:
        stats: dict[str, dict[str, int]] = real_db.info("commandstats")
        return stats.get(f"cmdstat_{command}", {}).get("calls", 0)

    for unique in (False, True):
        before = calls("mset"), calls("set")
        items = [Item(b"d", id=f"{unique}-{i}") for i in range(100)]
        assert queue.add_items(real_db, items, unique=unique) == [True] * 100
        assert (calls("mset"), calls("set")) == (before[0] + 1, before[1])
    assert queue.queue_len(real_db) == 200


def test_add_items_of_an_empty_batch_sends_nothing(
    db: redis.Redis, script_calls: list[ScriptCall]
) -> None:
    queue = WorkQueue(BATCH)
    assert queue.add_items(db, []) == []
    assert queue.add_items(db, iter([])) == []
    assert script_calls == []
    assert keys_left(db) == []


def test_add_items_accepts_any_iterable(db: redis.Redis) -> None:
    queue = WorkQueue(BATCH)
    flags = queue.add_items(db, (Item(str(i), id=str(i)) for i in range(3)))
    assert flags == [True, True, True]
    assert [i.id for i in queue.peek(db, 0, 10)] == ["0", "1", "2"]


def test_batch_larger_than_a_chunk_matches_one_at_a_time(
    bytes_db: redis.Redis, script_calls: list[ScriptCall]
) -> None:
    db = bytes_db
    batch, single = WorkQueue(BATCH), WorkQueue(SINGLE)
    n = 1234
    for queue in (batch, single):
        # ids that already exist, in the first, a middle and the last chunk
        for existing in ("5", "700", "1200"):
            queue.add_item(db, Item(b"before", id=existing))
    items = [Item(f"d{i}", id=str(i)) for i in range(n)]
    # duplicates across chunk boundaries: the copy in a later chunk must be refused
    items += [Item(b"dup", id="3"), Item(b"dup", id="999")]
    script_calls.clear()
    flags = batch.add_items(db, items)
    adds = _calls_of(script_calls, "add")
    assert len(adds) == 3  # 500 + 500 + 236 items
    assert all(len(_added_data(batch, c)) <= ADD_CHUNK for c in adds)
    assert sum(len(_added_data(batch, c)) for c in adds) == len(items)
    expected = [item.id() not in {"5", "700", "1200"} for item in items[:n]] + [False, False]
    assert flags == expected
    assert [single.add_item(db, item) for item in items] == expected
    assert batch.queue_len(db) == n
    assert queue_state(db, batch) == queue_state(db, single)

    # lease_many hands them out oldest first, like repeated lease calls (count > 100 is
    # test_lease_many_hands_out_count_items_when_there_are_that_many)
    leased = lease_n(db, batch, 600)
    one_by_one = [single.lease(db, 30, block=False) for _ in range(600)]
    assert _ids(leased) == [i.id() for i in one_by_one if i is not None]
    assert len(leased) == 600
    assert [i.data() for i in leased[:4]] == [b"before", b"before", b"before", b"d0"]
    assert [i.deliveries for i in leased] == [1] * 600
    for item in leased[::97]:
        assert item.lease_token is not None
        assert raw(db, "GET", batch.keys.lease(item.id())) == item.lease_token.encode()

    # complete_many (chunks of 500) completes exactly what complete() would, once each
    script_calls.clear()
    done = batch.complete_many(db, leased)
    assert len(_calls_of(script_calls, "complete")) == -(-len(leased) // COMPLETE_CHUNK)
    assert done == leased
    assert [single.complete(db, item) for item in one_by_one if item] == [True] * 600
    assert batch.complete_many(db, leased) == []
    assert batch.processing(db) == 0
    assert queue_state(db, batch) == queue_state(db, single)


def test_batch_over_four_megabytes_is_split_by_size(
    db: redis.Redis, script_calls: list[ScriptCall]
) -> None:
    queue = WorkQueue(BATCH)
    blob = 1 << 20  # 1 MiB each: 4 fit in one call's 4 MiB (with room for nothing more)
    items = [Item(bytes([i]) * blob, id=f"big{i}") for i in range(9)]
    items.insert(3, Item(b"small", id="small"))
    items.append(Item(b"x", id="big0"))  # a duplicate in a later chunk
    flags = queue.add_items(db, items)
    assert flags == [True] * 10 + [False]
    adds = _calls_of(script_calls, "add")
    assert len(adds) >= 3
    for call in adds:
        assert sum(len(d) for d in _added_data(queue, call)) <= ADD_CHUNK_BYTES
    assert sum(len(_added_data(queue, c)) for c in adds) == len(items)
    # every item is intact and in order
    got = queue.lease_many(db, 30, 20, block=False)
    assert _ids(got) == [i.id() for i in items[:10]]
    assert all(g.data() == i.data() for g, i in zip(got, items[:10], strict=True))


def test_single_item_over_four_megabytes(db: redis.Redis) -> None:
    queue = WorkQueue(BATCH)
    big = Item(b"\x00\xff" * (ADD_CHUNK_BYTES // 2 + 10), id="huge")
    assert queue.add_items(db, [Item(b"a", id="a"), big, Item(b"b", id="b")]) == [True] * 3
    got = queue.lease_many(db, 30, 3, block=False)
    assert _ids(got) == ["a", "huge", "b"]
    assert got[1].data() == big.data()


def test_complete_many_matches_complete_one_at_a_time(db: redis.Redis) -> None:
    batch, single = WorkQueue(BATCH), WorkQueue(SINGLE)
    items = [Item(f"d{i}", id=f"i{i}") for i in range(6)]
    held: dict[str, list[Item]] = {}
    for name, queue in (("batch", batch), ("single", single)):
        queue.add_items(db, items)
        held[name] = queue.lease_many(db, 30, 4, block=False)  # i0..i3 leased, i4, i5 queued
        assert queue.complete(db, held[name][1])  # i1 completed already
        queue.add_item(db, Item(b"later", id="delayed"), delay=60)
    asked = [
        held["batch"][0],  # leased
        held["batch"][1],  # already completed
        Item(b"", id="missing"),  # never existed
        held["batch"][2],
        held["batch"][0],  # twice in one batch
        Item(b"", id="i4"),  # queued, not leased
        Item(b"", id="delayed"),  # delayed
        held["batch"][3],
    ]
    done = batch.complete_many(db, asked)
    flags = [single.complete(db, item) for item in asked]
    assert flags == [True, False, False, True, False, True, True, True]
    assert done == [item for item, flag in zip(asked, flags, strict=True) if flag]
    assert done[0] is asked[0]  # the caller's own objects come back
    assert queue_state(db, batch) == queue_state(db, single)
    # what is left: i5 queued (and i4's leftover id, dropped when met)
    assert _ids(batch.lease_many(db, 30, 10, block=False)) == ["i5"]
    assert batch.stats(db).delayed == 0


@pytest.mark.parametrize("older", [0, 3])
@pytest.mark.parametrize("newer", [0, 3])
def test_complete_many_of_a_batch_as_it_was_leased_matches_one_at_a_time(
    db: redis.Redis, older: int, newer: int
) -> None:
    """A batch whose ids are the processing list's oldest entries goes at once; with older
    leases held the entries go one by one: either way the keys end as completing each item alone
    leaves them."""
    batch, single = WorkQueue(BATCH), WorkQueue(SINGLE)
    for queue in (batch, single):
        queue.add_items(db, [Item(f"d{i}", id=f"i{i}") for i in range(older + 5 + newer)])
        if older:
            queue.lease_many(db, 30, older, block=False)
    taken = {q.name.prefix: q.lease_many(db, 30, 5, block=False) for q in (batch, single)}
    for queue in (batch, single):
        if newer:
            queue.lease_many(db, 30, newer, block=False)
    asked = list(reversed(taken["batch"]))  # any order
    assert batch.complete_many(db, asked) == asked
    assert all(single.complete(db, item) for item in taken["single"])
    assert queue_state(db, batch) == queue_state(db, single)
    assert batch.processing(db) == older + newer


def test_a_batch_of_the_oldest_entries_leaves_the_list_in_one_trim(real_db: redis.Redis) -> None:
    queue = WorkQueue(BATCH)
    queue.add_items(real_db, [Item(b"d", id=f"i{i}") for i in range(8)])
    first = queue.lease_many(real_db, 30, 5, block=False)
    queue.lease_many(real_db, 30, 3, block=False)

    def calls(command: str) -> int:
        stats: dict[str, dict[str, int]] = real_db.info("commandstats")
        return stats.get(f"cmdstat_{command}", {}).get("calls", 0)

    before = calls("ltrim"), calls("lrem")
    assert queue.complete_many(real_db, first[::-1]) == first[::-1]
    assert (calls("ltrim"), calls("lrem")) == (before[0] + 1, before[1])
    assert sorted(raw(real_db, "LRANGE", "batch:processing", 0, -1)) == [b"i5", b"i6", b"i7"]


def test_complete_many_across_chunks(bytes_db: redis.Redis) -> None:
    db = bytes_db
    queue = WorkQueue(BATCH)
    items = [Item(b"", id=str(i)) for i in range(1234)]
    queue.add_items(db, items)
    leased = lease_n(db, queue, 1234)
    # ids completed before, and duplicates in later chunks, are left out
    assert queue.complete_many(db, [leased[10], leased[900]]) == [leased[10], leased[900]]
    asked = [*leased, leased[0], leased[600]]
    done = queue.complete_many(db, asked)
    assert done == [i for i in leased if i.id() not in {"10", "900"}]
    assert queue.processing(db) == 0
    assert keys_left(db) == []


@pytest.mark.parametrize("position", [0, 499, 500, 1233])
def test_bad_item_anywhere_in_add_items_writes_nothing(
    db: redis.Redis, position: int, script_calls: list[ScriptCall]
) -> None:
    queue = WorkQueue(BATCH)
    items: list[Any] = [Item(b"", id=str(i)) for i in range(1234)]
    items[position] = b"not an item"
    with pytest.raises(InvalidArgumentError):
        queue.add_items(db, items)
    items[position] = {"data": "x"}
    with pytest.raises(InvalidArgumentError):
        queue.add_items(db, items, unique=True)
    assert script_calls == []
    assert keys_left(db) == []


@pytest.mark.parametrize(
    "options",
    [
        {"delay": -1},
        {"delay": float("nan")},
        {"delay": True},
        {"ttl": 0},
        {"ttl": -5},
        {"ttl": float("inf")},
        {"ttl": "10"},
    ],
)
def test_bad_options_of_add_items_write_nothing(db: redis.Redis, options: dict[str, Any]) -> None:
    queue = WorkQueue(BATCH)
    with pytest.raises(InvalidArgumentError):
        queue.add_items(db, [Item(b"", id=str(i)) for i in range(600)], **options)
    assert keys_left(db) == []


def test_bad_item_anywhere_in_complete_many_completes_nothing(db: redis.Redis) -> None:
    queue = WorkQueue(BATCH)
    queue.add_items(db, [Item(b"", id=str(i)) for i in range(700)])
    leased: list[Any] = lease_n(db, queue, 700)
    leased[650] = "650"
    with pytest.raises(InvalidArgumentError):
        queue.complete_many(db, leased)
    assert queue.processing(db) == 700
    assert queue.stats(db).leased == 700


@pytest.mark.parametrize("count", [0, -1, 1.5, True, None])
def test_lease_many_rejects_bad_counts(db: redis.Redis, count: Any) -> None:
    queue = WorkQueue(BATCH)
    queue.add_item(db, Item(b"", id="a"))
    with pytest.raises(InvalidArgumentError):
        queue.lease_many(db, 30, count, block=False)
    assert queue.queue_len(db) == 1


@pytest.mark.parametrize("count", [101, 250])
def test_lease_many_hands_out_count_items_when_there_are_that_many(
    bytes_db: redis.Redis, count: int
) -> None:
    """lease_many leases "up to count items in one script call": with 300 queued, count of
    them. (The lease script's budget of ids examined, meant to bound the ids it drops, also
    counts the items it hands out.)"""
    db = bytes_db
    queue = WorkQueue(BATCH)
    queue.add_items(db, [Item(b"", id=str(i)) for i in range(300)])
    got = queue.lease_many(db, 30, count, block=False)
    assert _ids(got) == [str(i) for i in range(count)]
    assert queue.queue_len(db) == 300 - count


def test_lease_many_returns_what_there_is(db: redis.Redis) -> None:
    queue = WorkQueue(BATCH)
    assert queue.lease_many(db, 30, 5, block=False) == []
    queue.add_items(db, [Item(b"", id=str(i)) for i in range(3)])
    queue.complete(db, Item(b"", id="1"))  # leaves its id in the queue: dropped when met
    got = queue.lease_many(db, 30, 5, block=False)
    assert _ids(got) == ["0", "2"]
    assert queue.queue_len(db) == 0
    assert queue.stats(db).leased == 2
    assert queue.lease_many(db, 30, 5, block=False, timeout=1) == []


def test_lease_many_with_timeout_on_empty_queue_waits_then_returns_nothing(
    db: redis.Redis,
) -> None:
    queue = WorkQueue(BATCH)
    started = time.monotonic()
    assert queue.lease_many(db, 30, 5, timeout=0.3) == []
    assert 0.25 <= time.monotonic() - started < 2.0


def test_blocked_lease_many_takes_every_item_of_the_batch_that_woke_it(
    real_backend: Backend,
) -> None:
    """A lease_many(count=10) blocked on an empty queue, woken by a batch of 5 items, returns
    all 5 ("then returns what is available, up to count"), not just the first one."""
    admin = real_backend.client()
    queue = WorkQueue(BATCH)
    got: list[list[Item]] = []

    def worker() -> None:
        got.append(queue.lease_many(real_backend.client(), 30, 10, timeout=5))

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    try:
        wait_for(
            lambda: int(admin.info("clients")["blocked_clients"]) >= 1,
            timeout=5,
            what="the worker to block",
        )
        queue.add_items(admin, [Item(b"", id=str(i)) for i in range(5)])
    finally:
        thread.join(10)
    assert not thread.is_alive()
    assert _ids(got[0]) == ["0", "1", "2", "3", "4"]
    assert queue.queue_len(admin) == 0
