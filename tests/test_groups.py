"""Fair groups: grouped items wait on their group's list and leases take from the groups in turn
(the ungrouped main queue taking its turns as one more); ``group_concurrency`` caps a group's
items in flight for the fleet; groups pause and resume; every other path of an item (release,
delay, dead letters, time to live, light and deep cleans, state, cancel) keeps a grouped item
in its group and its count right. Its rows of the write-check and out-of-memory tables are here
too."""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from typing import Any

import pytest
import redis

from checks import LEASE_SECS, PREFIX, OomCheck, State, WriteCheck, oom_test, write_check_test
from helpers import dump_state, in_thread, keys_left, lrange, wait_for
from redis_work_queue import (
    AsyncWorkQueue,
    GroupStats,
    InvalidArgumentError,
    Item,
    KeyPrefix,
    WorkQueue,
    complete_and_lease_from,
)
from redis_work_queue.errors import InvalidArgumentTypeError
from redis_work_queue.flow import MAX_GROUP_BYTES

QUEUE = KeyPrefix("gq")
GK = WorkQueue(QUEUE).keys


def _add(db: redis.Redis, queue: WorkQueue, group: str | None, n: int, tag: str = "") -> None:
    name = group or "u"
    items = [Item(b"d", id=f"{name}{tag}{k}") for k in range(n)]
    assert all(queue.add_items(db, items, group=group))


def _drain(db: redis.Redis, queue: WorkQueue, complete: bool = True) -> list[str]:
    order = []
    while (item := queue.lease(db, LEASE_SECS, block=False)) is not None:
        order.append(item.id())
        if complete:
            assert queue.complete(db, item)
    return order


def _in_flight(db: redis.Redis) -> dict[str, int]:
    fields = db.hgetall(GK.groups_state)
    out = {}
    for field, value in fields.items():
        name = field.decode() if isinstance(field, bytes) else field
        if name.startswith("b:"):
            out[name[2:]] = int(value)
    return out


# Turns --------------------------------------------------------------------------------------------


def test_leases_take_from_the_groups_in_turn(db: redis.Redis, queue: WorkQueue) -> None:
    _add(db, queue, "A", 4)
    _add(db, queue, "B", 2)
    _add(db, queue, "C", 3)
    assert _drain(db, queue) == ["A0", "B0", "C0", "A1", "B1", "C1", "A2", "C2", "A3"]
    assert keys_left(db) == []


def test_the_ungrouped_queue_takes_its_turn_as_one_more_group(
    db: redis.Redis, queue: WorkQueue
) -> None:
    _add(db, queue, None, 4)
    _add(db, queue, "A", 3)
    _add(db, queue, "B", 3)
    order = _drain(db, queue)
    assert sorted(order) == sorted(
        [f"u{k}" for k in range(4)] + ["A0", "A1", "A2", "B0", "B1", "B2"]
    )
    # The main queue joins the ring at the end of the first round (the first grouped turn finds
    # it waiting), then every member (A, B and the main queue) has a turn each round.
    assert order[:2] == ["A0", "B0"]
    for start in range(2, 8, 3):
        rounds = {name[0] for name in order[start : start + 3]}
        assert rounds == {"A", "B", "u"}, order
    assert keys_left(db) == []


def test_lease_many_takes_one_item_per_turn(db: redis.Redis, queue: WorkQueue) -> None:
    _add(db, queue, "A", 5)
    _add(db, queue, "B", 2)
    got = queue.lease_many(db, LEASE_SECS, 6, block=False)
    assert [item.id() for item in got] == ["A0", "B0", "A1", "B1", "A2", "A3"]
    assert queue.complete_many(db, got) == got
    assert _in_flight(db) == {}


def test_one_add_items_call_holds_items_of_several_groups(
    db: redis.Redis, queue: WorkQueue
) -> None:
    items = [Item(b"d", id=f"i{k}") for k in range(6)]
    groups = ["A", "A", None, "B", None, "A"]
    assert queue.add_items(db, items, group=groups) == [True] * 6
    stats = queue.stats(db, groups=["A", "B"])
    assert stats.queued == 2 and stats.grouped == 4
    assert stats.groups == {"A": GroupStats(3, 0, False), "B": GroupStats(1, 0, False)}
    assert sorted(_drain(db, queue)) == [f"i{k}" for k in range(6)]


def test_an_existing_id_is_not_added_to_a_group_again(db: redis.Redis, queue: WorkQueue) -> None:
    assert queue.add_item(db, Item(b"d", id="x"), group="A")
    assert not queue.add_item(db, Item(b"e", id="x"), group="B")
    assert queue.stats(db, groups=["A", "B"]).groups == {
        "A": GroupStats(1, 0, False),
        "B": GroupStats(0, 0, False),
    }


def test_a_big_backlog_does_not_hold_up_the_other_groups(real_db: redis.Redis) -> None:
    """Tenant A adds 5,000 items, then B..K 100 each; four workers drain the queue. Every item of
    B..K is done before A's backlog has dropped by more than 10 x 100 x 2."""
    queue = WorkQueue(QUEUE)
    db = real_db
    _add(db, queue, "A", 5000)
    others = [chr(ord("B") + k) for k in range(10)]
    for name in others:
        _add(db, queue, name, 100)
    done: list[str] = []
    lock = threading.Lock()

    def work() -> None:
        while True:
            got = queue.lease_many(db, LEASE_SECS, 4, block=False)
            if not got:
                return
            queue.complete_many(db, got)
            with lock:
                done.extend(item.id() for item in got)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(done) == 6000 and len(set(done)) == 6000
    last_other = max(k for k, name in enumerate(done) if name[0] != "A")
    a_before = sum(1 for name in done[: last_other + 1] if name[0] == "A")
    assert a_before <= 10 * 100 * 2, a_before
    assert keys_left(db) == []


# Concurrency cap ----------------------------------------------------------------------------------


def test_group_concurrency_caps_a_groups_items_in_flight(db: redis.Redis, queue_kind: Any) -> None:
    queue = queue_kind(QUEUE, group_concurrency=2)
    _add(db, queue, "A", 5)
    _add(db, queue, "B", 1)
    _add(db, queue, None, 1)
    got = queue.lease_many(db, LEASE_SECS, 10, block=False)
    assert sorted(item.id() for item in got) == ["A0", "A1", "B0", "u0"]
    assert queue.lease(db, LEASE_SECS, block=False) is None
    stats = queue.stats(db, groups=["A"])
    assert stats.group_concurrency == 2
    assert stats.groups["A"] == GroupStats(3, 2, False)
    # A completion gives the group its turn back.
    assert queue.complete(db, got[0])
    again = queue.lease_many(db, LEASE_SECS, 10, block=False)
    assert [item.id() for item in again] == ["A2"]
    # So does a release (the item goes to the back of its group's line).
    assert queue.release(db, again[0])
    assert [item.id() for item in queue.lease_many(db, LEASE_SECS, 10, block=False)] == ["A3"]


def test_the_cap_is_kept_in_redis_for_the_fleet(db: redis.Redis, queue_kind: Any) -> None:
    first = queue_kind(QUEUE, group_concurrency=1)
    other = queue_kind(QUEUE)  # declares nothing: the fleet's cap holds for it
    _add(db, first, "A", 3)
    assert first.lease(db, LEASE_SECS, block=False) is not None
    assert other.lease(db, LEASE_SECS, block=False) is None
    # A later declaration does not override the cap set; set_group_concurrency does.
    assert queue_kind(QUEUE, group_concurrency=5).lease(db, LEASE_SECS, block=False) is None
    other.set_group_concurrency(db, 2)
    assert other.stats(db).group_concurrency == 2
    # A group held at the old cap comes back at its next completion, below the new one.
    assert other.lease(db, LEASE_SECS, block=False) is None
    held = lrange(db, GK.processing)
    assert other.complete(db, Item(b"", id=held[0].decode()))
    assert len(other.lease_many(db, LEASE_SECS, 5, block=False)) == 2
    other.set_group_concurrency(db, None)
    assert other.stats(db).group_concurrency is None


# Pause and resume ---------------------------------------------------------------------------------


def test_a_paused_group_hands_out_nothing_until_resumed(db: redis.Redis, queue: WorkQueue) -> None:
    _add(db, queue, "A", 2)
    _add(db, queue, "B", 2)
    assert queue.pause_group(db, "A")
    assert not queue.pause_group(db, "A")
    _add(db, queue, "A", 1, tag="x")  # adds still go to it
    assert _drain(db, queue) == ["B0", "B1"]
    assert queue.stats(db, groups=["A"]).groups["A"] == GroupStats(3, 0, True)
    assert queue.resume_group(db, "A")
    assert not queue.resume_group(db, "A")
    assert _drain(db, queue) == ["A0", "A1", "Ax0"]


def test_resuming_a_group_wakes_a_blocked_worker(real_db: redis.Redis) -> None:
    queue = WorkQueue(QUEUE)
    queue.pause_group(real_db, "A")
    _add(real_db, queue, "A", 1)
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(queue.lease(real_db, 30, timeout=10)))
    waiter.start()
    try:
        assert queue.lease(real_db, 30, block=False) is None
        queue.resume_group(real_db, "A")
    finally:
        waiter.join(timeout=15)
    assert got and got[0] is not None and got[0].id() == "A0"


def test_a_blocked_worker_gets_a_grouped_item_added_later(real_db: redis.Redis) -> None:
    queue = WorkQueue(QUEUE)
    _add(real_db, queue, "A", 1, tag="old")
    assert queue.complete(real_db, queue.lease(real_db, 30, block=False))
    got: list[Any] = []
    added: list[float] = []

    def wait() -> None:
        item = queue.lease(real_db, 30, timeout=10)
        got.append((item, time.monotonic() - added[0]))

    waiter = threading.Thread(target=wait)
    waiter.start()
    try:
        wait_for(
            lambda: (
                real_db.client_list(_type="normal")
                and any(c.get("cmd") == "brpoplpush" for c in real_db.client_list())
            ),
            what="the worker blocked",
        )
        added.append(time.monotonic())
        _add(real_db, queue, "B", 1)
    finally:
        waiter.join(timeout=15)
    item, late = got[0]
    assert item is not None and item.id() == "B0"
    # Woken by the add, not found by the next look of its blocking slice (1 s).
    assert late < 0.9, late


# Every other path ---------------------------------------------------------------------------------


def test_a_delayed_grouped_item_falls_due_onto_its_group(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"d", id="later"), delay=1.5, group="A")
    _add(db, queue, "B", 1)
    assert _drain(db, queue, complete=False) == ["B0"]
    assert queue.stats(db).delayed == 1
    leased = queue.lease(db, LEASE_SECS, timeout=5)
    assert leased is not None and leased.id() == "later"
    assert _in_flight(db) == {"A": 1, "B": 1}


def test_release_with_a_delay_and_dead_letters_keep_the_count(
    db: redis.Redis, queue_kind: Any
) -> None:
    queue = queue_kind(QUEUE, max_deliveries=2, group_concurrency=1)
    _add(db, queue, "A", 2)
    item = queue.lease(db, LEASE_SECS, block=False)
    assert item is not None and item.id() == "A0"
    assert queue.release(db, item, delay=30)
    assert _in_flight(db) == {}
    assert queue.stats(db, groups=["A"]).groups["A"] == GroupStats(1, 0, False)
    nxt = queue.lease(db, LEASE_SECS, block=False)
    assert nxt is not None and nxt.id() == "A1"
    assert queue.release(db, nxt)
    again = queue.lease(db, LEASE_SECS, block=False)
    assert again is not None and again.id() == "A1" and again.deliveries == 2
    assert queue.release(db, again, reason="boom")  # buried: its second delivery
    assert queue.dead_count(db) == 1
    assert _in_flight(db) == {}
    assert db.hget(GK.grouped, "A1") is None
    assert queue.stats(db, groups=["A"]).groups["A"] == GroupStats(0, 0, False)


def test_an_expired_grouped_item_goes_back_to_its_group(db: redis.Redis, queue: WorkQueue) -> None:
    _add(db, queue, "A", 2)
    item = queue.lease(db, LEASE_SECS, block=False)
    assert item is not None
    db.delete(GK.lease(item.id()))  # its lease ran out
    report = queue.light_clean(db)
    assert report.requeued == 1
    assert _in_flight(db) == {}
    assert lrange(db, GK.group("A")) == [item.id().encode(), b"A1"]
    assert sorted(_drain(db, queue)) == ["A0", "A1"]
    assert keys_left(db) == []


def test_a_grouped_item_whose_time_to_live_ran_out_leaves_its_group(
    db: redis.Redis, queue: WorkQueue
) -> None:
    queue.add_item(db, Item(b"d", id="short"), ttl=30, group="A")
    queue.add_item(db, Item(b"d", id="long"), group="A")
    db.delete(GK.item("short"))  # as its time to live runs out
    assert _drain(db, queue) == ["long"]
    assert keys_left(db) == []
    # While leased, too: the light clean counts it out of flight.
    queue.add_item(db, Item(b"d", id="leased"), ttl=30, group="A")
    assert queue.lease(db, LEASE_SECS, block=False) is not None
    db.delete(GK.item("leased"))
    queue.light_clean(db)
    assert _in_flight(db) == {}
    assert db.hlen(GK.grouped) == 0


def test_the_deep_clean_leaves_queued_grouped_items_and_finds_lost_ones(
    db: redis.Redis, queue: WorkQueue
) -> None:
    _add(db, queue, "A", 3)
    _add(db, queue, None, 1)
    db.lrem(GK.group("A"), 1, "A1")  # lost from every list
    report = queue.deep_clean(db)
    assert report.requeued == 1
    assert sorted(_drain(db, queue)) == ["A0", "A1", "A2", "u0"]
    assert keys_left(db) == []


def test_state_and_cancel_of_grouped_items(db: redis.Redis, queue: WorkQueue) -> None:
    _add(db, queue, "A", 3)
    assert queue.state(db, "A0").state == "queued"
    leased = queue.lease(db, LEASE_SECS, block=False)
    assert leased is not None and queue.state(db, "A0").state == "leased"
    assert queue.cancel(db, "A1")
    assert queue.state(db, "A1").state == "gone"
    assert queue.cancel(db, "A0")
    queue.light_clean(db)
    assert _in_flight(db) == {}
    assert _drain(db, queue) == ["A2"]


def test_at_most_once_leases_of_grouped_items(db: redis.Redis, queue: WorkQueue) -> None:
    _add(db, queue, "A", 2)
    _add(db, queue, "B", 1)
    got = queue.lease_many(db, LEASE_SECS, 5, block=False, at_most_once=True)
    assert [item.id() for item in got] == ["A0", "B0", "A1"]
    assert keys_left(db) == []


def test_a_cluster_queue_with_a_hash_tag_takes_turns(cluster_db: Any) -> None:
    queue = WorkQueue(KeyPrefix("{gq}"), group_concurrency=1)
    for group in ("A", "B"):
        assert all(
            queue.add_items(
                cluster_db, [Item(b"d", id=f"{group}{k}") for k in range(2)], group=group
            )
        )
    got = queue.lease_many(cluster_db, LEASE_SECS, 5, block=False)
    assert [item.id() for item in got] == ["A0", "B0"]
    assert queue.complete_many(cluster_db, got) == got
    assert sorted(_drain(cluster_db, queue)) == ["A1", "B1"]
    assert queue.pause_group(cluster_db, "A") and queue.resume_group(cluster_db, "A")
    assert queue.stats(cluster_db, groups=["A"]).groups["A"] == GroupStats(0, 0, False)


# Bad input ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("group", "error", "match"),
    [
        ("", InvalidArgumentError, "must not be empty"),
        ("x" * (MAX_GROUP_BYTES + 1), InvalidArgumentError, f"at most {MAX_GROUP_BYTES} bytes"),
        ("é" * (MAX_GROUP_BYTES // 2 + 1), InvalidArgumentError, "bytes"),
        (b"A", InvalidArgumentTypeError, "must be a str"),
        (5, InvalidArgumentTypeError, "must be a str"),
    ],
)
def test_a_bad_group_is_refused_before_anything_is_written(
    db: redis.Redis, queue: WorkQueue, group: Any, error: type, match: str
) -> None:
    before = dump_state(db)
    with pytest.raises(error, match=match):
        queue.add_item(db, Item(b"d", id="x"), group=group)
    with pytest.raises(error, match=match):
        queue.add_items(db, [Item(b"d", id="y")], group=[group])
    with pytest.raises(error, match=match):
        queue.pause_group(db, group)
    with pytest.raises(error, match=match):
        queue.stats(db, groups=[group])
    assert dump_state(db) == before


def test_a_group_list_of_the_wrong_length_is_refused(db: redis.Redis, queue: WorkQueue) -> None:
    with pytest.raises(InvalidArgumentError, match="one group"):
        queue.add_items(db, [Item(b"d", id="a"), Item(b"d", id="b")], group=["A"])
    with pytest.raises(InvalidArgumentTypeError, match="sequence"):
        queue.add_items(db, [Item(b"d", id="a")], group=b"A")
    assert dump_state(db) == {}


@pytest.mark.parametrize("value", [0, -1, True, "2", 1.5])
def test_a_bad_group_concurrency_is_refused(db: redis.Redis, value: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="group_concurrency"):
        WorkQueue(QUEUE, group_concurrency=value)
    with pytest.raises(InvalidArgumentError, match="group_concurrency"):
        AsyncWorkQueue(QUEUE, group_concurrency=value)
    with pytest.raises(InvalidArgumentError, match="group_concurrency"):
        WorkQueue(QUEUE).set_group_concurrency(db, value)
    assert dump_state(db) == {}


def test_a_sharded_queue_refuses_groups(db: redis.Redis) -> None:
    with pytest.raises(InvalidArgumentError, match="sharded queue"):
        WorkQueue(QUEUE, shards=2, group_concurrency=2)
    queue = WorkQueue(QUEUE, shards=2)
    for call in (
        lambda: queue.add_item(db, Item(b"d", id="x"), group="A"),
        lambda: queue.add_items(db, [Item(b"d", id="x")], group="A"),
        lambda: queue.pause_group(db, "A"),
        lambda: queue.resume_group(db, "A"),
        lambda: queue.set_group_concurrency(db, 2),
        lambda: queue.stats(db, groups=["A"]),
        lambda: queue.stats(db, top_groups=1),
    ):
        with pytest.raises(InvalidArgumentError, match="sharded queue"):
            call()
    assert dump_state(db) == {}


# Write checks and out of memory -------------------------------------------------------------------


def _grouped(db: redis.Redis) -> None:
    """Grouped items beside the realistic queue: g1 and g2 queued in group "a" (the planted
    group list is p:group:a), g3 leased, g4 delayed."""
    queue = WorkQueue(PREFIX, group_concurrency=3)
    assert queue.add_items(db, [Item(b"g", id=f"g{k}") for k in (3, 1, 2)], group="a")
    leased = queue.lease(db, LEASE_SECS, block=False)
    assert leased is not None  # "a", "b" of the main queue and g3 take turns
    queue.add_item(db, Item(b"g", id="g4"), delay=30, group="a")


def _lease_grouped(s: State) -> Any:
    return WorkQueue(PREFIX).lease_many(s.db, LEASE_SECS, 4, block=False)


def _complete_grouped(s: State) -> Any:
    queue = WorkQueue(PREFIX)
    return [queue.complete(s.db, Item(b"", id=item_id)) for item_id in ("g3", "held", "g1")]


def _release_grouped(s: State) -> Any:
    queue = WorkQueue(PREFIX)
    token = s.db.get(WorkQueue(PREFIX).keys.lease("g3"))
    if token is not None:
        item = Item.handed_out("g3", b"g", 1, token.decode())
        queue.release(s.db, item)


WRITE_CHECKS = [
    WriteCheck(
        "add_item-group",
        "a",
        lambda s: WorkQueue(PREFIX).add_item(s.db, Item(b"n", id="n"), group="a"),
    ),
    WriteCheck(
        "add_items-group",
        "a",
        lambda s: WorkQueue(PREFIX).add_items(
            s.db, [Item(b"n", id="n"), Item(b"m", id="m")], group=["a", None]
        ),
    ),
    WriteCheck("lease-groups", "a", _lease_grouped, prepare=_grouped),
    WriteCheck("complete-groups", "a", _complete_grouped, prepare=_grouped),
    WriteCheck("release-groups", "a", _release_grouped, prepare=_grouped),
    WriteCheck(
        "light_clean-groups", "a", lambda s: WorkQueue(PREFIX).light_clean(s.db), prepare=_grouped
    ),
    WriteCheck(
        "deep_clean-groups", "a", lambda s: WorkQueue(PREFIX).deep_clean(s.db), prepare=_grouped
    ),
    WriteCheck(
        "lease-group-declared",
        "a",
        lambda s: WorkQueue(PREFIX, group_concurrency=2).lease(s.db, LEASE_SECS, block=False),
    ),
    WriteCheck("pause_group", "a", lambda s: WorkQueue(PREFIX).pause_group(s.db, "a")),
    WriteCheck(
        "resume_group",
        "a",
        lambda s: WorkQueue(PREFIX).resume_group(s.db, "a"),
        prepare=lambda db: WorkQueue(PREFIX).pause_group(db, "a"),
    ),
    WriteCheck(
        "set_group_concurrency", "a", lambda s: WorkQueue(PREFIX).set_group_concurrency(s.db, 3)
    ),
]
#: Every row x every key the scripts write x every wrong type.
test_group_calls_check_types_first = write_check_test(WRITE_CHECKS)


OOM_CHECKS = [
    OomCheck(
        "add_item-group",
        lambda q, db, _: q.add_item(db, Item(b"n", id="n"), group="a"),
        refused=True,
    ),
    OomCheck("pause_group", lambda q, db, _: q.pause_group(db, "a"), refused=True),
    OomCheck("resume_group", lambda q, db, _: q.resume_group(db, "a")),
    OomCheck(
        "set_group_concurrency", lambda q, db, _: q.set_group_concurrency(db, 2), refused=True
    ),
]
test_group_calls_out_of_memory = oom_test(OOM_CHECKS)


def test_every_key_of_a_drained_grouped_queue_goes(db: redis.Redis, queue: WorkQueue) -> None:
    _add(db, queue, "A", 3)
    _add(db, queue, "B", 3)
    counts = Counter(name[0] for name in _drain(db, queue))
    assert counts == {"A": 3, "B": 3}
    assert keys_left(db) == []


def test_promoting_a_delayed_grouped_item_queues_it_on_its_group(
    db: redis.Redis, queue: WorkQueue
) -> None:
    queue.add_item(db, Item(b"d", id="later"), delay=3600, group="A")
    assert queue.promote(db, "later")
    assert lrange(db, GK.group("A")) == [b"later"]
    assert queue.queue_len(db) == 1  # the wake-up entry for a worker blocked on the queue
    assert queue.stats(db).queued == 0 and queue.peek(db, 0, 10) == []
    assert _drain(db, queue) == ["later"]
    assert keys_left(db) == []


def test_a_wake_up_entry_is_not_listed_nor_counted_as_an_item(
    db: redis.Redis, queue: WorkQueue
) -> None:
    """A group coming back to the ring pushes an empty id onto the empty main queue, to wake a
    worker blocked on it; peek, stats and a promote at the leasing end pass over it."""
    queue.add_item(db, Item(b"d", id="A0"), group="A")
    assert lrange(db, GK.queue) == [b""]  # the wake-up entry
    assert queue.stats(db).queued == 0
    assert queue.peek(db, 0, 10) == [] and queue.peek(db, -10, 10) == []
    queue.add_item(db, Item(b"w", id="w"))
    assert queue.stats(db).queued == 1
    assert [(q.position, q.id) for q in queue.peek(db, 0, 10)] == [(0, "w")]
    assert [(q.position, q.id) for q in queue.peek(db, -10, 10)] == [(0, "w")]
    # An item promoted to the leasing end takes the wake-up entry's place.
    queue.add_item(db, Item(b"u", id="u"), delay=3600)
    assert queue.promote(db, "u")
    assert lrange(db, GK.queue) == [b"w", b"u"]
    assert [q.id for q in queue.peek(db, 0, 10)] == ["u", "w"]
    assert queue.stats(db).queued == 2
    assert sorted(_drain(db, queue)) == ["A0", "u", "w"]


# Runners ------------------------------------------------------------------------------------------

RUN_TAG = "gq-run"


@pytest.mark.parametrize("kind", ["threads", "processes", "asyncio"])
def test_every_runner_keeps_the_cap_and_the_turns(real_backend: Any, kind: str) -> None:
    """Four slots, group_concurrency=1, two groups of four items that take 0.1 s each: each
    group's items finish one at a time (at least 0.1 s apart), and every item is done."""
    import asyncio  # noqa: PLC0415

    import flow_handlers  # noqa: PLC0415
    from redis_work_queue import AsyncWorker, Worker  # noqa: PLC0415

    db = real_backend.client()
    url = real_backend.url
    queue = WorkQueue(QUEUE)  # the producer; the workers' queues declare the cap
    for group in ("A", "B"):
        items = [
            Item(flow_handlers.job(url, RUN_TAG, sleep=0.1), id=f"{group}{k}") for k in range(4)
        ]
        assert all(queue.add_items(db, items, group=group))
    common: dict[str, Any] = {
        "lease_secs": 5,
        "poll_secs": 0.5,
        "heartbeat_secs": None,
        "clean_secs": None,
        "concurrency": 4,
    }
    worker: Any
    if kind == "asyncio":
        aqueue = AsyncWorkQueue(QUEUE, group_concurrency=1)
        worker = AsyncWorker(url, [aqueue], flow_handlers.astamp, **common)
    else:
        worker = Worker(
            url,
            [WorkQueue(QUEUE, group_concurrency=1)],
            flow_handlers.stamp,
            processes=kind == "processes",
            **common,
        )
    thread, out = in_thread(
        lambda: asyncio.run(worker.run(signals=())) if kind == "asyncio" else worker.run(signals=())
    )
    try:
        wait_for(lambda: db.llen(f"{RUN_TAG}:done") == 8, timeout=30, what="the jobs")
    finally:
        worker.stop()
        thread.join(timeout=60)
    assert out and not isinstance(out[0], BaseException), out
    done = [bytes(i).decode() for i in db.lrange(f"{RUN_TAG}:done", 0, -1)]
    at = [float(t) for t in db.lrange(f"{RUN_TAG}:at", 0, -1)]
    assert sorted(done) == sorted(f"{g}{k}" for g in "AB" for k in range(4))
    for group in "AB":
        times = sorted(t for name, t in zip(done, at, strict=True) if name[0] == group)
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert min(gaps) >= 0.09, (group, gaps)
    assert _in_flight(db) == {}


def test_metrics_rank_the_groups_by_backlog_and_count_them_in_the_work(db: redis.Redis) -> None:
    from redis_work_queue.metrics import families  # noqa: PLC0415
    from redis_work_queue.ops.metrics import TOP_GROUPS, read_steps  # noqa: PLC0415
    from redis_work_queue.transport import run  # noqa: PLC0415

    queue = WorkQueue(QUEUE)
    _add(db, queue, None, 2)  # first: no wake-up marker goes on a main queue that has items
    for k in range(TOP_GROUPS + 5):
        _add(db, queue, f"g{k:02d}", k + 1)
    assert queue.lease(db, LEASE_SECS, block=False) is not None  # one of g00..g14 in turn
    m = run(db, read_steps(queue.ops))
    total = sum(k + 1 for k in range(TOP_GROUPS + 5))
    assert m.stats.grouped == total - 1 and m.stats.queued == 2
    assert m.work == total - 1 + 2 + 1
    assert len(m.top_groups) == TOP_GROUPS
    assert m.top_groups[0] == ("g14", 15)
    assert [count for _, count in m.top_groups] == sorted(
        (count for _, count in m.top_groups), reverse=True
    )
    backlog = next(f for f in families([m]) if f.name == "group_backlog")
    assert len(backlog.samples) == TOP_GROUPS
    waiting = next(f for f in families([m]) if f.name == "groups_waiting")
    assert waiting.samples == [("", {"queue": "gq"}, TOP_GROUPS + 4)]  # g00 drained by the lease
    assert backlog.samples[0] == ("", {"queue": "gq", "group": "g14"}, 15.0)
    # Drained, the ranking and the total are empty again.
    _drain(db, queue)
    m = run(db, read_steps(queue.ops))
    assert m.top_groups == () and m.stats.grouped == 0


def test_stats_reads_the_top_groups_by_backlog_with_their_counts(
    db: redis.Redis, queue: WorkQueue
) -> None:
    from redis_work_queue.ops.metrics import read_steps  # noqa: PLC0415
    from redis_work_queue.transport import run  # noqa: PLC0415

    assert queue.stats(db, top_groups=5).groups_waiting == 0
    _add(db, queue, None, 1)
    for k, n in enumerate((4, 7, 2, 5)):
        _add(db, queue, f"g{k}", n)
    first = queue.lease(db, LEASE_SECS, block=False)  # the first group's turn: g0
    assert first is not None and first.id() == "g00"
    assert queue.pause_group(db, "g3")
    stats = queue.stats(db, groups=["g2"], top_groups=3)
    assert stats.groups_waiting == 4 and stats.grouped == 4 + 7 + 2 + 5 - 1
    assert list(stats.top_groups) == ["g1", "g3", "g0"]  # most waiting first
    assert stats.top_groups == {
        "g1": GroupStats(7, 0, False),
        "g3": GroupStats(5, 0, True),
        "g0": GroupStats(3, 1, False),
    }
    assert stats.groups == {"g2": GroupStats(2, 0, False)}
    # The ranking the metrics export, read in the same way.
    ranked = run(db, read_steps(WorkQueue(QUEUE).ops)).top_groups
    assert [name for name, _ in ranked][:3] == list(stats.top_groups)
    assert queue.stats(db).top_groups == {}  # none asked for: none read
    assert len(queue.stats(db, top_groups=1000).top_groups) == 4
    _drain(db, queue)
    assert queue.resume_group(db, "g3")
    _drain(db, queue)
    drained = queue.stats(db, top_groups=3)
    assert drained.groups_waiting == 0 and drained.top_groups == {}


@pytest.mark.parametrize(
    ("top", "error"),
    [
        (-1, InvalidArgumentError),
        (1001, InvalidArgumentError),
        (True, InvalidArgumentTypeError),
        ("3", InvalidArgumentTypeError),
        (1.5, InvalidArgumentTypeError),
    ],
)
def test_a_bad_top_groups_is_refused(
    db: redis.Redis, queue: WorkQueue, top: Any, error: type
) -> None:
    with pytest.raises(error, match="top_groups"):
        queue.stats(db, top_groups=top)


def test_a_held_completion_counts_a_grouped_item_out_of_flight(db: redis.Redis) -> None:
    from redis_work_queue.ops.spark import complete_held  # noqa: PLC0415
    from redis_work_queue.transport import run  # noqa: PLC0415

    queue = WorkQueue(QUEUE, group_concurrency=1)
    _add(db, queue, "A", 2)
    item = queue.lease(db, LEASE_SECS, block=False)
    assert item is not None and queue.lease(db, LEASE_SECS, block=False) is None
    assert run(db, complete_held(queue.ops, [(item.id(), item.lease_token)])) == 1
    assert _in_flight(db) == {} and db.hget(GK.grouped, item.id()) is None
    nxt = queue.lease(db, LEASE_SECS, block=False)
    assert nxt is not None and nxt.id() == "A1"


def test_a_grouped_item_given_back_is_next_in_its_group(db: redis.Redis, queue: WorkQueue) -> None:
    _add(db, queue, "A", 3)
    first = queue.lease(db, LEASE_SECS, block=False)
    assert first is not None and first.id() == "A0"
    assert queue.give_back(db, [first]) == [True]
    assert _in_flight(db) == {}
    again = queue.lease(db, LEASE_SECS, block=False)
    assert again is not None and again.id() == "A0" and again.deliveries == 1
    done, found = complete_and_lease_from(db, queue, again, [queue], LEASE_SECS)
    assert done and found is not None and found[1].id() == "A1"
    assert _in_flight(db) == {"A": 1}


def test_a_late_completion_far_into_the_processing_list_counts_out_once(
    db: redis.Redis, queue: WorkQueue
) -> None:
    # 70 items leased before the grouped one and 70 after: its entry is more than 64 from either
    # end of the processing list when its completion comes, after its lease ran out.
    _add(db, queue, None, 70, "old")
    assert len(queue.lease_many(db, LEASE_SECS, 70, block=False)) == 70
    _add(db, queue, "A", 1)
    item = queue.lease(db, LEASE_SECS, block=False)
    assert item is not None and item.id() == "A0"
    _add(db, queue, None, 70, "new")
    assert len(queue.lease_many(db, LEASE_SECS, 70, block=False)) == 70
    assert _in_flight(db) == {"A": 1}
    db.delete(GK.lease(item.id()))  # its lease ran out
    assert queue.complete(db, item)
    assert _in_flight(db) == {}
    for _ in range(3):  # the light clean drops its entry and counts nothing out again
        queue.light_clean(db)
    assert _in_flight(db) == {}
    assert db.hlen(GK.grouped) == 0
    # Its group's next item is leased under the cap as usual.
    queue.set_group_concurrency(db, 1)
    _add(db, queue, "A", 1, "x")
    nxt = queue.lease(db, LEASE_SECS, block=False)
    assert nxt is not None and nxt.id() == "Ax0"
    assert _in_flight(db) == {"A": 1}


def test_an_item_added_again_while_in_flight_is_counted_out_once(
    db: redis.Redis, queue: WorkQueue
) -> None:
    _add(db, queue, "A", 1)
    item = queue.lease(db, LEASE_SECS, block=False)
    assert item is not None and _in_flight(db) == {"A": 1}
    # Added again without the existence check (its data replaced, queued again in its group).
    assert queue.add_items(db, [Item(b"new", id="A0")], unique=True, group="A") == [True]
    assert queue.complete(db, item)
    assert _in_flight(db) == {}
    assert queue.lease(db, LEASE_SECS, block=False) is None  # the copy queued went with it
    assert _in_flight(db) == {}
