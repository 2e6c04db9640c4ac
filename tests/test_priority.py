"""Priority leasing over several queues (lease_from): the order holds exactly while the queues
have items, a worker blocked on several queues wakes for whichever gets an item (or a due
delayed item), and a worker killed while blocked loses nothing and leaves nothing that lasts."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

import scheduling_workers
from helpers import keys_left, wait_for
from plugins.backends import Backend
from redis_work_queue import InvalidArgumentError, Item, KeyPrefix, WorkQueue, transport
from redis_work_queue.calls import Sleep
from redis_work_queue.workqueue import lease_from

CTX = multiprocessing.get_context("spawn")
QUEUE_SHARDS = (1, 4)
#: Tests that count a one-server wait's BLPOP waiters, calls and wake-up keys, or kill a worker
#: process blocked in it: unsharded only.
SHARDS_SKIP = {
    "test_blocked_multi_queue_lease_wakes_for_a_due_delayed_item",
    "test_blocked_multi_queue_lease_wakes_for_an_item_given_back",
    "test_blocked_multi_queue_lease_wakes_for_either_queue",
    "test_worker_killed_while_blocked_on_several_queues_loses_nothing",
}
CLUSTER_SKIP = {
    "test_every_blocked_worker_wakes_for_a_batch": (
        "waits for BLPOP waiters of the one-server wait on every shard at once; on a cluster a "
        "worker waits on its own shard a slice at a time (test_sharded_cluster times its wake-up)"
    ),
}


def sharded(shards: int) -> dict[str, int]:
    """The options of a queue of ``shards`` shards."""
    return {"shards": shards} if shards > 1 else {}


@pytest.fixture
def hi(queue_shards: int) -> WorkQueue:
    return WorkQueue(KeyPrefix("hi"), **sharded(queue_shards))


@pytest.fixture
def lo(queue_shards: int) -> WorkQueue:
    return WorkQueue(KeyPrefix("lo"), **sharded(queue_shards))


HI = [f"hi{i}" for i in range(5)]
LO = [f"lo{i}" for i in range(5)]


def _take(db: redis.Redis, queues: list[WorkQueue]) -> tuple[str, str] | None:
    got = lease_from(db, queues, 30, block=False)
    if got is None:
        return None
    return got[0].name.prefix, got[1].id()


def blocked_on_blpop(db: redis.Redis) -> int:
    return sum(1 for c in db.client_list() if c.get("cmd") == "blpop")


def run_in_thread(name: str, target: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def body() -> None:
        try:
            out["result"] = target()
        except BaseException as err:  # reported by the test
            out["error"] = err
        out["returned"] = time.time()

    thread = threading.Thread(target=body, name=name, daemon=True)
    thread.start()
    return thread, out


def test_priority_order_holds_while_both_queues_have_items(
    db: redis.Redis, hi: WorkQueue, lo: WorkQueue, queue_shards: int
) -> None:
    for i in range(5):
        lo.add_item(db, Item(b"", id=f"lo{i}"))
        hi.add_item(db, Item(b"", id=f"hi{i}"))
    taken = [_take(db, [hi, lo]) for _ in range(3)]
    hi.add_item(db, Item(b"", id="hi-late"))  # a new high item goes before every low one
    taken += [_take(db, [hi, lo]) for _ in range(9)]
    if queue_shards > 1:  # FIFO within each shard only: each queue's items, in any order
        assert [t[0] if t else None for t in taken] == ["hi"] * 6 + ["lo"] * 5 + [None]
        assert sorted(t[1] for t in taken[:6] if t) == sorted(["hi-late", *HI])
        assert sorted(t[1] for t in taken[6:] if t) == LO
        taken = [("hi", i) for i in [*HI, "hi-late"]] + [("lo", i) for i in LO] + [None]
    assert taken == [
        ("hi", "hi0"),
        ("hi", "hi1"),
        ("hi", "hi2"),
        ("hi", "hi3"),
        ("hi", "hi4"),
        ("hi", "hi-late"),
        ("lo", "lo0"),
        ("lo", "lo1"),
        ("lo", "lo2"),
        ("lo", "lo3"),
        ("lo", "lo4"),
        None,
    ]
    assert hi.stats(db).leased == 6
    assert lo.stats(db).leased == 5
    # the items belong to their own queue: completing through it works
    assert lo.complete(db, Item(b"", id="lo0"))
    assert not hi.complete(db, Item(b"", id="lo1"))


def test_the_returned_queue_is_the_callers_object(
    db: redis.Redis, hi: WorkQueue, lo: WorkQueue
) -> None:
    lo.add_item(db, Item(b"data", id="x"))
    got = lease_from(db, [hi, lo], 30, block=False)
    assert got is not None
    queue, item = got
    assert queue is lo
    assert (item.id(), item.data(), item.deliveries) == ("x", b"data", 1)
    assert queue.release(db, item)
    assert lease_from(db, [lo, hi], 30, block=False) is not None


def test_delayed_and_expired_items_in_priority_leasing(
    bytes_db: redis.Redis, hi: WorkQueue, lo: WorkQueue, queue_shards: int
) -> None:
    db = bytes_db
    unit = 0.05 if queue_shards == 1 else 0.15  # a sharded queue's calls take longer
    hi.add_item(db, Item(b"", id="hi-later"), delay=3 * unit)
    hi.add_item(db, Item(b"", id="hi-gone"), ttl=unit)
    lo.add_item(db, Item(b"", id="lo0"))
    lo.add_item(db, Item(b"", id="lo1"))
    time.sleep(1.4 * unit)
    first = _take(db, [hi, lo])  # lo0 (FIFO); either on a sharded queue
    assert first in {("lo", "lo0"), ("lo", "lo1")}
    time.sleep(2 * unit)
    assert _take(db, [hi, lo]) == ("hi", "hi-later")
    assert _take(db, [hi, lo]) == ("lo", "lo1" if first == ("lo", "lo0") else "lo0")
    assert _take(db, [hi, lo]) is None


def test_max_deliveries_of_each_queue_is_kept(bytes_db: redis.Redis, queue_shards: int) -> None:
    db = bytes_db
    strict = WorkQueue(KeyPrefix("hi"), 1, **sharded(queue_shards))
    lenient = WorkQueue(KeyPrefix("lo"), 3, **sharded(queue_shards))
    strict.add_item(db, Item(b"", id="s"))
    lenient.add_item(db, Item(b"", id="l"))
    got = lease_from(db, [strict, lenient], 30, block=False)
    assert got is not None
    assert got[0].release(db, got[1], reason="boom")  # buried: its one delivery is spent
    assert strict.dead_count(db) == 1
    got = lease_from(db, [strict, lenient], 30, block=False)
    assert got is not None
    assert (got[0], got[1].id()) == (lenient, "l")


def test_bad_arguments(db: redis.Redis, hi: WorkQueue) -> None:
    with pytest.raises(InvalidArgumentError):
        lease_from(db, [], 30)
    with pytest.raises(InvalidArgumentError):
        lease_from(db, [hi], 0)
    with pytest.raises(InvalidArgumentError):
        lease_from(db, [hi, hi], 30, timeout=-1)
    assert keys_left(db) == []


def test_blocked_multi_queue_lease_wakes_for_either_queue(
    real_backend: Backend, hi: WorkQueue, lo: WorkQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = real_backend.client()
    calls: dict[str, list[Any]] = {}
    original = transport.execute

    def recording(db: Any, call: Any) -> Any:
        calls.setdefault(threading.current_thread().name, []).append(call)
        return original(db, call)

    monkeypatch.setattr(transport, "execute", recording)
    for name, target in (("low", lo), ("high", hi)):
        client = real_backend.client()
        thread, out = run_in_thread(name, lambda c=client: lease_from(c, [hi, lo], 30, timeout=10))
        try:
            wait_for(lambda: blocked_on_blpop(admin) >= 1, timeout=5, what="the worker to block")
            time.sleep(0.2)  # it stays blocked: no polling meanwhile
            added = time.time()
            target.add_item(admin, Item(b"", id=f"for-{name}"))
            thread.join(5)
            assert not thread.is_alive()
        finally:
            hi.add_item(admin, Item(b"", id=f"unblock-{name}"))
            thread.join(10)
        assert "error" not in out, out.get("error")
        queue, item = out["result"]
        assert (queue, item.id()) == (target, f"for-{name}")
        assert out["returned"] - added < 0.1
        sent = [c for c in calls[name] if not isinstance(c, Sleep)]
        assert len(sent) <= 5, sent
        hi.complete(admin, Item(b"", id=f"unblock-{name}"))
    # nothing is left of the waits: no registration, no wake-up token
    for queue in (hi, lo):
        assert not admin.exists(queue.keys.waiting)
        assert not admin.exists(queue.keys.wake)


@pytest.mark.parametrize("how", ["release", "light_clean", "requeue_dead"])
def test_blocked_multi_queue_lease_wakes_for_an_item_given_back(
    real_backend: Backend, hi: WorkQueue, how: str
) -> None:
    """Items come back to a queue not only by add: a release, a light clean requeueing an
    expired lease and a requeued dead letter wake a worker blocked on several queues too."""
    admin = real_backend.client()
    lo = WorkQueue(KeyPrefix("lo"), max_deliveries=1 if how == "requeue_dead" else None)
    lo.add_item(admin, Item(b"", id="back"))
    held = lo.lease(admin, 30, block=False)
    assert held is not None
    if how == "light_clean":
        admin.delete(lo.keys.lease("back"))
    elif how == "requeue_dead":
        assert lo.release(admin, held, reason="dead")
        assert lo.dead_count(admin) == 1
    client = real_backend.client()
    thread, out = run_in_thread(how, lambda: lease_from(client, [hi, lo], 30, timeout=10))
    try:
        wait_for(lambda: blocked_on_blpop(admin) >= 1, timeout=5, what="the worker to block")
        given_back = time.time()
        if how == "release":
            assert lo.release(admin, held, reason="retry")
        elif how == "light_clean":
            assert lo.light_clean(admin).requeued == 1
        else:
            assert lo.requeue_dead(admin) == 1
        thread.join(5)
    finally:
        hi.add_item(admin, Item(b"", id="unblock"))
        thread.join(10)
    assert "error" not in out, out.get("error")
    queue, item = out["result"]
    assert (queue, item.id()) == (lo, "back")
    assert out["returned"] - given_back < 0.1


def test_blocked_multi_queue_lease_wakes_for_a_due_delayed_item(
    real_backend: Backend, hi: WorkQueue, lo: WorkQueue
) -> None:
    admin = real_backend.client()
    client = real_backend.client()
    thread, out = run_in_thread("delayed", lambda: lease_from(client, [hi, lo], 30, timeout=10))
    try:
        wait_for(lambda: blocked_on_blpop(admin) >= 1, timeout=5, what="the worker to block")
        lo.add_item(admin, Item(b"", id="later"), delay=0.3)
        due = int(admin.zscore(lo.keys.delayed, "later") or 0)
        thread.join(5)
        assert not thread.is_alive()
    finally:
        hi.add_item(admin, Item(b"", id="unblock"))
        thread.join(10)
    queue, item = out["result"]
    assert (queue, item.id()) == (lo, "later")
    leased_at = int(item.lease_token.rpartition("@")[2])
    assert 0 <= leased_at - due < 100
    assert out["returned"] * 1000 - due < 100


def test_every_blocked_worker_wakes_for_a_batch(
    real_backend: Backend, hi: WorkQueue, lo: WorkQueue
) -> None:
    """Two workers blocked on [hi, lo]; a batch of two items is added to lo in one call: each
    worker gets one at once (as two workers blocked on one Redis list would), not one of them
    only when its wait runs out."""
    admin = real_backend.client()
    started = []
    for n in range(2):
        client = real_backend.client()
        started.append(
            run_in_thread(f"batch{n}", lambda c=client: lease_from(c, [hi, lo], 30, timeout=5))
        )
    try:
        wait_for(lambda: blocked_on_blpop(admin) >= 2, timeout=5, what="both workers to block")
        added = time.time()
        lo.add_items(admin, [Item(b"", id="a"), Item(b"", id="b")])
        for thread, _ in started:
            thread.join(6)
    finally:
        hi.add_items(admin, [Item(b"", id="u1"), Item(b"", id="u2")])
        for thread, _ in started:
            thread.join(10)
    got = sorted(out["result"][1].id() for _, out in started if out.get("result"))
    assert got == ["a", "b"]
    late = [round(out["returned"] - added, 3) for _, out in started]
    assert max(late) < 0.1, f"woken after {late} s"


def test_worker_killed_while_blocked_on_several_queues_loses_nothing(
    real_backend: Backend, hi: WorkQueue, lo: WorkQueue
) -> None:
    admin = real_backend.client()
    report = "prio-report"
    socket_timeout = 2.0  # each wait <= 1 s, so its registration lapses within ~2 s
    process = CTX.Process(
        target=scheduling_workers.multi_queue_waiter,
        args=(real_backend.url, ["hi", "lo"], socket_timeout, report, 60.0),
        daemon=True,
    )
    process.start()
    try:
        wait_for(lambda: admin.llen(report) >= 1, timeout=30, what="the worker to start")
        wait_for(lambda: blocked_on_blpop(admin) >= 1, timeout=10, what="the worker to block")
        assert admin.zcard(hi.keys.waiting) == admin.zcard(lo.keys.waiting) == 1
        assert process.pid is not None
        os.kill(process.pid, signal.SIGKILL)
        process.join(10)
        assert not process.is_alive()
    finally:
        if process.is_alive():
            process.kill()
            process.join(10)
    wait_for(lambda: blocked_on_blpop(admin) == 0, timeout=5, what="the connection to close")
    killed_at = time.time()
    assert [json.loads(r)["event"] for r in admin.lrange(report, 0, -1)] == ["leasing"]

    # Items added afterwards, in every way, are all leasable by another worker, in order.
    hi.add_items(admin, [Item(b"", id="h0"), Item(b"", id="h1")])
    lo.add_item(admin, Item(b"", id="l0"))
    lo.add_items(admin, [Item(b"", id="l1"), Item(b"", id="l2")])
    lo.add_item(admin, Item(b"", id="l-later"), delay=0.2)
    hi.add_unique_item(admin, Item(b"", id="h2"))
    other = real_backend.client()
    taken = []
    while (got := _take(other, [hi, lo])) is not None:
        taken.append(got)
    assert taken == [
        ("hi", "h0"),
        ("hi", "h1"),
        ("hi", "h2"),
        ("lo", "l0"),
        ("lo", "l1"),
        ("lo", "l2"),
    ]
    got_later = lease_from(other, [hi, lo], 30, timeout=2)
    assert got_later is not None
    assert got_later[1].id() == "l-later"
    taken.append(("lo", "l-later"))
    for prefix, item_id in taken:
        assert WorkQueue(KeyPrefix(prefix)).complete(admin, Item(b"", id=item_id))

    # The dead worker's registration lapses; the light clean removes it and its wake-ups.
    def lapsed() -> bool:
        now_ms = time.time() * 1000
        return all(
            float(score) < now_ms
            for queue in (hi, lo)
            for _, score in admin.zrange(queue.keys.waiting, 0, -1, withscores=True)
        )

    wait_for(lapsed, timeout=5, what="the registration to lapse")
    assert time.time() - killed_at < 4
    hi.light_clean(admin)
    lo.light_clean(admin)
    leftovers = [k for k in keys_left(admin) if k.startswith((b"hi:", b"lo:"))]
    assert leftovers == []

    # and a new worker blocked on both queues is woken as usual
    client = real_backend.client()
    thread, out = run_in_thread("after", lambda: lease_from(client, [hi, lo], 30, timeout=5))
    try:
        wait_for(lambda: blocked_on_blpop(admin) >= 1, timeout=5, what="the worker to block")
        added = time.time()
        lo.add_item(admin, Item(b"", id="fresh"))
        thread.join(5)
    finally:
        hi.add_item(admin, Item(b"", id="unblock"))
        thread.join(10)
    assert out["result"][1].id() == "fresh"
    assert out["returned"] - added < 0.1
