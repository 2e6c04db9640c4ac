"""The event stream of a queue made with ``events=True`` (``P:events``, ``events()``).

Every kind of event on the sync and asyncio API (``queue``), on real Redis and fakeredis
(``db``); a queue without events writes no stream; a wrong-typed ``P:events`` is refused before
any write; out of memory; ``rwq events``.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from checks import LEASE_SECS, PREFIX, OomCheck, State, WriteCheck, oom_test, write_check_test
from helpers import dump_state
from redis_work_queue import (
    AsyncWorkQueue,
    Event,
    InvalidArgumentError,
    Item,
    KeyPrefix,
    WorkQueue,
    WrongKeyTypeError,
)
from redis_work_queue.errors import InvalidArgumentTypeError
from redis_work_queue.keyprefix import QueueKeys
from servers import Cluster
from test_cli_ops import rwq

QUEUE = KeyPrefix("ev{t}")
QUEUE_OPTIONS: dict[str, Any] = {"events": True, "max_deliveries": 2}
KEYS = QueueKeys(QUEUE)


def kinds(queue: WorkQueue, db: redis.Redis, since: str = "0") -> list[tuple[Any, ...]]:
    return [(e.kind, e.id, e.delivery, e.reason) for e in queue.events(db, since=since)]


def lease(queue: WorkQueue, db: redis.Redis, secs: float = 30) -> Item:
    item = queue.lease(db, secs, block=False)
    assert item is not None
    return item


def test_each_change_appends_its_event(queue: WorkQueue, db: redis.Redis) -> None:
    assert queue.events_maxlen == 10_000
    queue.add_items(db, [Item(b"a", id="a"), Item(b"b", id="b")])
    a = lease(queue, db)
    assert queue.complete(db, a)
    b = lease(queue, db)
    assert queue.release(db, b, reason="boom")
    b = lease(queue, db)
    assert queue.release(db, b, reason="again")  # its second delivery: dead
    assert queue.retry(db, "b")  # requeued
    queue.add_item(db, Item(b"c", id="c"), delay=60)
    assert queue.promote(db, "c")
    assert queue.cancel(db, "c")
    assert kinds(queue, db) == [
        ("added", "a", None, None),
        ("added", "b", None, None),
        ("leased", "a", 1, None),
        ("completed", "a", 1, None),
        ("leased", "b", 1, None),
        ("failed", "b", 1, "boom"),
        ("retried", "b", 1, None),
        ("leased", "b", 2, None),
        ("failed", "b", 2, "again"),
        ("dead", "b", 2, "again"),
        ("requeued", "b", 2, None),
        ("added", "c", None, None),
        ("promoted", "c", None, None),
        ("cancelled", "c", None, None),
    ]
    events = list(queue.events(db))
    assert all(isinstance(e, Event) for e in events)
    assert [e.event_id for e in events] == sorted(
        (e.event_id for e in events), key=lambda i: tuple(map(int, i.split("-")))
    )
    assert abs(events[0].at - time.time()) < 60
    # since: the events after one
    assert kinds(queue, db, since=events[-2].event_id) == [("cancelled", "c", None, None)]
    assert kinds(queue, db, since="$") == []


def test_expired_leases_and_the_cleans(queue: WorkQueue, db: redis.Redis) -> None:
    queue.add_item(db, Item(b"x", id="x"))
    x = lease(queue, db)
    db.delete(KEYS.lease(x.id()))  # its lease ran out
    queue.light_clean(db)
    x = lease(queue, db)
    db.delete(KEYS.lease(x.id()))  # the second delivery's lease ran out: dead
    queue.light_clean(db)
    queue.add_item(db, Item(b"y", id="y"))
    db.lrem(KEYS.queue, 0, "y")  # y is lost from both lists: the deep clean requeues it
    queue.deep_clean(db)
    assert kinds(queue, db)[1:] == [
        ("leased", "x", 1, None),
        ("expired", "x", 1, "lease expired"),
        ("retried", "x", 1, None),
        ("leased", "x", 2, None),
        ("expired", "x", 2, "lease expired"),
        ("dead", "x", 2, "lease expired"),
        ("added", "y", None, None),
        ("expired", "y", None, "lease expired"),
        ("retried", "y", None, None),
    ]


def test_completing_by_lease_and_batches(queue: WorkQueue, db: redis.Redis) -> None:
    queue.add_items(db, [Item(b"1", id="1"), Item(b"2", id="2"), Item(b"3", id="3")])
    items = [lease(queue, db) for _ in range(3)]
    assert queue.complete_many(db, items[:2]) == items[:2]
    with queue.leased(db, 30, block=False) as none:
        assert none is None
    queue.add_item(db, Item(b"4", id="4"))
    with queue.leased(db, 30, block=False) as four:
        assert four is not None
    done = [e.id for e in queue.events(db) if e.kind == "completed"]
    assert done == ["1", "2", "4"]


def test_a_queue_without_events_writes_no_stream(db: redis.Redis) -> None:
    plain = WorkQueue(KeyPrefix("plain"), max_deliveries=2)
    assert plain.events_maxlen is None and plain.ops.script_args == ("plain",)
    plain.add_items(db, [Item(b"a", id="a"), Item(b"b", id="b")])
    plain.add_item(db, Item(b"c", id="c"), delay=60)
    plain.complete(db, lease(plain, db))
    b = lease(plain, db)
    plain.release(db, b, reason="x")
    plain.release(db, lease(plain, db), reason="y")
    plain.retry(db, "b")
    plain.promote(db, "c")
    plain.cancel(db, "c")
    plain.light_clean(db)
    plain.deep_clean(db)
    assert db.exists("plain:events") == 0
    assert list(plain.events(db)) == []
    assert all(kind != "stream" for kind, _, _ in dump_state(db).values())


def test_the_stream_is_capped(db: redis.Redis) -> None:
    queue = WorkQueue(KeyPrefix("cap"), events=True, events_maxlen=10)
    queue.add_items(db, [Item(b"x") for _ in range(500)])
    length = db.xlen("cap:events")
    assert 10 <= length < 500
    assert queue.events_maxlen == 10


def test_block_waits_for_a_new_event(queue: WorkQueue, db: redis.Redis) -> None:
    started = time.monotonic()
    assert list(queue.events(db, since="$", block=0.2)) == []
    assert time.monotonic() - started >= 0.2
    timer = threading.Timer(0.3, lambda: WorkQueue(QUEUE, events=True).add_item(db, Item(b"n")))
    timer.start()
    try:
        found = list(queue.events(db, since="$", block=1))
    finally:
        timer.join()
    assert [e.kind for e in found] == ["added"]


def test_events_on_a_cluster_with_a_tag(cluster: Cluster, cluster_db: RedisCluster) -> None:
    """Every script's stream entry lands in the queue's slot, on the sync and asyncio API; a
    blocked read is woken by a change."""
    queue = WorkQueue(KeyPrefix("{evc}"), events=True, max_deliveries=1)
    queue.add_items(cluster_db, [Item(b"a", id="a"), Item(b"b", id="b")])
    assert queue.complete(cluster_db, lease(queue, cluster_db))
    assert queue.release(cluster_db, lease(queue, cluster_db), reason="no") is True
    assert queue.state(cluster_db, "b").state == "dead"
    assert queue.retry(cluster_db, "b")
    queue.add_item(cluster_db, Item(b"c", id="c"), delay=60)
    assert queue.promote(cluster_db, "c") and queue.cancel(cluster_db, "c")
    queue.light_clean(cluster_db)
    queue.deep_clean(cluster_db)
    want = [
        ("added", "a", None, None),
        ("added", "b", None, None),
        ("leased", "a", 1, None),
        ("completed", "a", 1, None),
        ("leased", "b", 1, None),
        ("failed", "b", 1, "no"),
        ("dead", "b", 1, "no"),
        ("requeued", "b", 1, None),
        ("added", "c", None, None),
        ("promoted", "c", None, None),
        ("cancelled", "c", None, None),
    ]
    assert kinds(queue, cluster_db) == want
    assert cluster_db.xlen("{evc}:events") == len(want)
    timer = threading.Timer(0.3, lambda: queue.add_item(cluster_db, Item(b"n", id="n")))
    timer.start()
    try:
        found = list(queue.events(cluster_db, since="$", block=5))
    finally:
        timer.join()
    assert [(e.kind, e.id) for e in found] == [("added", "n")]

    async def scenario() -> list[tuple[str, str]]:
        db = cluster.async_client()
        try:
            await db.initialize()
            aqueue = AsyncWorkQueue(KeyPrefix("{evc}"), events=True)
            item = await aqueue.lease(db, 30, block=False)
            assert item is not None and await aqueue.complete(db, item)
            return [(e.kind, e.id) async for e in aqueue.events(db, since=found[-1].event_id)]
        finally:
            await db.aclose()

    assert asyncio.run(asyncio.wait_for(scenario(), 30)) == [("leased", "b"), ("completed", "b")]


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"events": "yes"}, InvalidArgumentTypeError),
        ({"events": True, "events_maxlen": 0}, InvalidArgumentError),
        ({"events": True, "events_maxlen": 1.5}, InvalidArgumentTypeError),
        ({"events": True, "shards": 2}, InvalidArgumentError),
    ],
)
def test_bad_options_are_refused(options: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error, match="events"):
        WorkQueue(KeyPrefix("bad"), **options)


def test_bad_reads_are_refused(queue: WorkQueue, db: redis.Redis) -> None:
    with pytest.raises(InvalidArgumentError, match="since"):
        list(queue.events(db, since="yesterday"))
    with pytest.raises(InvalidArgumentError, match="block"):
        list(queue.events(db, block=-1))


def test_a_queue_name_may_not_start_with_nul() -> None:
    with pytest.raises(InvalidArgumentError, match="NUL"):
        WorkQueue(KeyPrefix("\0x"))


def test_a_wrong_typed_stream_is_refused_before_any_write(
    queue: WorkQueue, db: redis.Redis
) -> None:
    queue.add_item(db, Item(b"a", id="a"))
    db.delete("ev{t}:events")
    db.set("ev{t}:events", b"not a stream")
    before = dump_state(db)
    with pytest.raises(WrongKeyTypeError, match="events"):
        queue.add_item(db, Item(b"b", id="b"))
    with pytest.raises(WrongKeyTypeError, match="events"):
        queue.lease(db, 30, block=False)
    assert dump_state(db) == before


def test_rwq_events(real_db: redis.Redis, redis_url: str) -> None:
    queue = WorkQueue(KeyPrefix("cli"), events=True)
    queue.add_item(real_db, Item(b"a", id="a"))
    queue.complete(real_db, lease(queue, real_db))
    result = rwq("--url", redis_url, "events", "cli", "--json")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["kind"], r["id"]) for r in rows] == [
        ("added", "a"),
        ("leased", "a"),
        ("completed", "a"),
    ]
    result = rwq("--url", redis_url, "events", "cli")
    assert result.returncode == 0 and "completed a" in result.stdout
    result = rwq("--url", redis_url, "events", "cli", "--since", rows[1]["event_id"])
    assert result.stdout.count("\n") == 1 and "completed" in result.stdout


def test_rwq_changes_are_on_the_stream_of_a_queue_with_events(
    real_db: redis.Redis, redis_url: str
) -> None:
    """``rwq`` cannot know the application's events setting: a command that changes items reads
    ``P:events`` and, when it holds a stream, appends its changes, never trimming below the
    stream's length; on a queue without a stream it writes none."""
    queue = WorkQueue(KeyPrefix("rq"), events=True, events_maxlen=20_000, max_deliveries=1)
    queue.add_items(real_db, [Item(b"x", id=f"old{k}") for k in range(12_000)])
    queue.add_item(real_db, Item(b"d", id="d"), delay=600)
    queue.add_item(real_db, Item(b"c", id="c"))
    queue.release(real_db, lease(queue, real_db), reason="no")  # old0 dies
    since = list(queue.events(real_db, since="0"))[-1].event_id
    for command in (("promote", "rq", "d"), ("cancel", "rq", "c"), ("retry", "rq", "old0")):
        result = rwq("--url", redis_url, *command)
        assert result.returncode == 0, result.stderr
    assert kinds(queue, real_db, since=since) == [
        ("promoted", "d", None, None),
        ("cancelled", "c", None, None),
        ("requeued", "old0", 1, None),
    ]
    assert real_db.xlen("rq:events") > 12_000  # the default cap did not trim it
    plain = WorkQueue(KeyPrefix("rqplain"))
    plain.add_item(real_db, Item(b"c", id="c"))
    assert rwq("--url", redis_url, "cancel", "rqplain", "c").returncode == 0
    assert real_db.exists("rqplain:events") == 0


# The shared tables: the operations of a queue with events on ------------------------------------


def q() -> WorkQueue:
    return WorkQueue(PREFIX, events=True)


def _release(s: State) -> Any:
    return q().release(s.db, s.held, reason="no")


WRITE_CHECKS = [
    WriteCheck("add_item-events", "new", lambda s: q().add_item(s.db, Item(b"n", id="new"))),
    WriteCheck("lease-events", "a", lambda s: q().lease(s.db, LEASE_SECS, block=False)),
    WriteCheck("complete-events", "held", lambda s: q().complete(s.db, s.held)),
    WriteCheck("release-events", "held", _release),
    WriteCheck("light_clean-events", "stale", lambda s: q().light_clean(s.db)),
    WriteCheck("cancel-events", "a", lambda s: q().cancel(s.db, "a")),
    WriteCheck("promote-events", "later", lambda s: q().promote(s.db, "later")),
    WriteCheck("retry-events", "dead1", lambda s: q().retry(s.db, "dead1")),
]


def _events_queue(queue: WorkQueue) -> WorkQueue:
    return type(queue)(PREFIX, events=True)


OOM_CHECKS = [
    OomCheck(
        "add_item-events",
        lambda queue, db, _: _events_queue(queue).add_item(db, Item(b"n", id="n")),
        refused=True,
    ),
    OomCheck("complete-events", lambda queue, db, held: _events_queue(queue).complete(db, held)),
    OomCheck(
        "release-events",
        lambda queue, db, held: _events_queue(queue).release(db, held, reason="r"),
    ),
    OomCheck("cancel-events", lambda queue, db, _: _events_queue(queue).cancel(db, "a")),
]
test_events_checks_types_before_writing = write_check_test(WRITE_CHECKS)
test_events_out_of_memory = oom_test(OOM_CHECKS)
