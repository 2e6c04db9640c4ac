"""Every public operation, as scripted scenarios run in lockstep through every lane.

Each scenario runs at once on the synchronous and the asyncio API, each through the public
path, the lean path (where it takes the client) and the library's own choice (``auto``), on
each client flavour (RESP2 and RESP3, bytes and decoded replies). After every step the replies
and the whole key state of each lane must equal the synchronous public lane's; every step's
reply is also checked against what the operation promises. Last, each lane's script calls must
have taken its path (:class:`lanes.ScriptRoutes`).
"""

from __future__ import annotations

import inspect
import re
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

import redis_work_queue
from lanes import (
    FLAVOURS,
    Check,
    Lane,
    Loop,
    Scenario,
    ScriptRoutes,
    closing,
    make_lanes,
    run_lanes,
)
from redis_work_queue import (
    AsyncWorkQueue,
    Cancelled,
    CleanReport,
    FlushReport,
    InvalidArgumentError,
    Item,
    QueueStats,
    Released,
    Renewed,
    WorkQueue,
    WrongKeyTypeError,
)
from redis_work_queue.flow import RateLimit
from redis_work_queue.results import QueueCounts
from servers import Proc


def ids(items: list[Item]) -> list[tuple[str, int]]:
    """Each item's id and delivery count."""
    return [(item.id(), item.deliveries) for item in items]


def nap(seconds: float) -> None:
    time.sleep(seconds)


# Adding and looking ----------------------------------------------------------------------------


def adding(lane: Lane, check: Check) -> None:
    q = lane.queue("adds")
    check("add_item", lane.do(q.add_item, Item(b"a", id="a")), True)
    check("add_item of an id that exists", lane.do(q.add_item, Item(b"other", id="a")), False)
    check("add_unique_item", lane.do(q.add_unique_item, Item(b"u", id="u")), None)
    batch = [
        Item(b"b", id="b"),
        Item(b"again", id="a"),
        Item(b"\xff\x00c\r\n", id="c"),
        Item("é ü", id="d é {x} *?[:]"),
    ]
    check("add_items", lane.do(q.add_items, batch), [True, False, True, True])
    unique = [Item(b"e", id="e"), Item(b"f", id="f")]
    check("add_items unique", lane.do(q.add_items, unique, unique=True), [True, True])
    check("add_item of 200 kB", lane.do(q.add_item, Item(b"x" * 200_000, id="big")), True)
    check(
        "add_item with a ttl",
        lane.do(q.add_item, Item(b"t", id="t"), ttl=60),
        True,
        keys=lambda s: 50_000 < s[b"adds:item:t"][2] <= 60_000,
    )
    check(
        "add_items with a ttl",
        lane.do(q.add_items, [Item(b"t2", id="t2"), Item(b"t3", id="t3")], ttl=60),
        [True, True],
        keys=lambda s: 50_000 < s[b"adds:item:t3"][2] <= 60_000,
    )

    def fill(pipe: Any) -> None:
        q.add_item_to_pipeline(pipe, Item(b"p1", id="p1"))
        q.add_unique_item_to_pipeline(pipe, Item(b"p2", id="p2"))

    check("add_item_to_pipeline", lane.pipeline(fill), [1, 12, 1, 13])
    check("queue_len", lane.do(q.queue_len), 13)
    check("processing", lane.do(q.processing), 0)
    check(
        "peek",
        lane.do(q.peek, 0, 3),
        lambda r: (
            [(i.position, i.id, i.data) for i in r]
            == [(0, "a", b"a"), (1, "u", b"u"), (2, "b", b"b")]
        ),
    )
    check(
        "peek at every item (a reply longer than one read)",
        lane.do(q.peek, 0, 20),
        lambda r: (
            [i.id for i in r][3:8] == ["c", "d é {x} *?[:]", "e", "f", "big"]
            and (r[3].data, r[4].data, r[7].data)
            == (b"\xff\x00c\r\n", "é ü".encode(), b"x" * 200_000)
            and len(r) == 13
        ),
    )
    check(
        "peek from the newest", lane.do(q.peek, -2, 5), lambda r: [i.id for i in r] == ["p1", "p2"]
    )
    check(
        "peek with a preview",
        lane.do(q.peek, 7, 1, preview_bytes=10),
        lambda r: (
            [(i.id, i.data, i.size, i.truncated) for i in r] == [("big", b"x" * 10, 200_000, True)]
        ),
    )
    check("item_data", lane.do(q.item_data, "big"), b"x" * 200_000)
    check("item_data of no item", lane.do(q.item_data, "nothing"), None)
    check("stats", lane.do(q.stats), QueueStats(queued=13, leased=0, expired=0, delayed=0, dead=0))
    check("counts", lane.do(q.counts), QueueCounts(added=13))
    check("add_item with a delay", lane.do(q.add_item, Item(b"l", id="later"), delay=3600), True)
    due = datetime.now(timezone.utc) + timedelta(hours=1)
    check(
        "add_items due at a datetime",
        lane.do(q.add_items, [Item(b"l2", id="later2")], delay=due),
        [True],
        keys=lambda s: [m for m, _ in s[b"adds:delayed"][1]] == [b"later", b"later2"],
    )
    check("stats with delayed items", lane.do(q.stats), lambda r: (r.queued, r.delayed) == (13, 2))
    check(
        "delayed, soonest due first, with a preview",
        lane.do(q.delayed, 0, 10, preview_bytes=1),
        lambda r: (
            [(d.position, d.id, d.data, d.size) for d in r]
            == [(0, "later", b"l", 1), (1, "later2", b"l", 2)]
            and r[1].truncated
            and 3500 < r[0].due_at - time.time() <= 3600
        ),
    )
    check.raises(
        "add_item of a dict", InvalidArgumentError, lambda: lane.do(q.add_item, {"data": b"x"})
    )
    check.raises(
        "add_item with a negative ttl",
        InvalidArgumentError,
        lambda: lane.do(q.add_item, Item(b"n", id="n"), ttl=-1),
    )
    lane.admin.hset("wrong:queue", "not", "a list")
    wrong = lane.queue("wrong")
    check.raises(
        "add_item to a queue whose main queue is a hash",
        WrongKeyTypeError,
        lambda: lane.do(wrong.add_item, Item(b"w", id="w")),
    )


# Leasing and completing -------------------------------------------------------------------------


def leasing(lane: Lane, check: Check) -> None:
    q = lane.queue("leases")
    items = [Item(f"d{n}".encode(), id=f"i{n}") for n in range(8)]
    check("add 8", lane.do(q.add_items, items), [True] * 8)
    first = check(
        "lease",
        lane.do(q.lease, 30, block=False),
        lambda r: ids([r]) == [("i0", 1)] and r.data() == b"d0" and r.lease_token,
    )
    many = check(
        "lease_many",
        lane.do(q.lease_many, 30, 3, block=False),
        lambda r: ids(r) == [("i1", 1), ("i2", 1), ("i3", 1)],
    )
    check(
        "pending",
        lane.do(q.pending, 0, 10),
        lambda r: (
            [(p.id, p.deliveries) for p in r] == [(f"i{n}", 1) for n in range(4)]
            and all(25 < p.lease_left <= 30 and not p.expired for p in r)
        ),
    )
    check("stats", lane.do(q.stats), QueueStats(queued=4, leased=4, expired=0, delayed=0, dead=0))
    check(
        "renew",
        lane.do(q.renew, first, 60),
        True,
        keys=lambda s: 55_000 < s[b"leases:lease:i0"][2] <= 60_000,
    )
    check("renew_many", lane.do(q.renew_many, many[:2], 45), [True, True])
    check("release with a reason", lane.do(q.release, many[0], reason="boom"), True)
    check("release of a lease no longer held", lane.do(q.release, many[0]), False)
    check("renew of a lease no longer held", lane.do(q.renew, many[0], 30), False)
    check(
        "renew_many of a lease no longer held", lane.do(q.renew_many, many[:2], 30), [False, True]
    )
    check("release_outcome undo", lane.do(q.release_outcome, many[1], undo=True), Released.REQUEUED)
    check("complete", lane.do(q.complete, first), True)
    check("complete again", lane.do(q.complete, first), False)
    # The undone item comes first and is not counted; the released one went to the far end.
    again = check(
        "lease_many after a release and an undo",
        lane.do(q.lease_many, 30, 2, block=False),
        lambda r: ids(r) == [("i2", 1), ("i4", 1)],
    )
    check("complete_many", lane.do(q.complete_many, again), again)
    check("complete_many again", lane.do(q.complete_many, again), [])
    check("give_back", lane.do(q.give_back, [many[2]]), [True])
    check("give_back again", lane.do(q.give_back, [many[2]]), [False])
    check(
        "leased, the body returns",
        lane.leased(q, lambda item: None, 30, block=False),
        lambda r: ids([r]) == [("i3", 1)],
        keys=lambda s: b"leases:item:i3" not in s,
    )

    def fail(item: Item | None) -> None:
        raise RuntimeError("the handler failed")

    check.raises(
        "leased, the body raises", RuntimeError, lambda: lane.leased(q, fail, 30, block=False)
    )
    check(
        "lease at most once",
        lane.do(q.lease, 30, block=False, at_most_once=True),
        lambda r: ids([r]) == [("i6", 1)],
        keys=lambda s: b"leases:item:i6" not in s and b"leases:lease:i6" not in s,
    )
    held = check("lease", lane.do(q.lease, 30, block=False), lambda r: ids([r]) == [("i7", 1)])
    check(
        "complete_and_lease_from",
        lane.do(lane.complete_and_lease_from, q, held, [q], 30),
        lambda r: r[0] is True and r[1][0] is q and ids([r[1][1]]) == [("i1", 2)],
    )
    check(
        "counts",
        lane.do(q.counts),
        QueueCounts(added=8, completed=5, failed=2, retried=4),
    )

    hi, lo = lane.queue("hi"), lane.queue("lo")
    check("add to the low queue", lane.do(lo.add_item, Item(b"l1", id="l1")), True)
    check(
        "lease_from the low queue",
        lane.do(lane.lease_from, [hi, lo], 30, block=False),
        lambda r: r[0] is lo and ids([r[1]]) == [("l1", 1)],
    )
    check("add to the low queue", lane.do(lo.add_item, Item(b"l2", id="l2")), True)
    check("add to the high queue", lane.do(hi.add_item, Item(b"h1", id="h1")), True)
    top = check(
        "lease_from the high queue first",
        lane.do(lane.lease_from, [hi, lo], 30, block=False),
        lambda r: r[0] is hi and ids([r[1]]) == [("h1", 1)],
    )
    check(
        "complete_and_lease_from two queues",
        lane.do(lane.complete_and_lease_from, hi, top[1], [hi, lo], 30),
        lambda r: r[0] is True and r[1][0] is lo and ids([r[1][1]]) == [("l2", 1)],
    )
    check(
        "complete_and_lease_from with nothing left",
        lane.do(lane.complete_and_lease_from, hi, top[1], [hi, lo], 30),
        (False, None),
    )
    check(
        "lease_from with nothing queued", lane.do(lane.lease_from, [hi, lo], 30, block=False), None
    )
    check("add to the high queue", lane.do(hi.add_item, Item(b"h2", id="h2")), True)
    check(
        "lease_from at most once",
        lane.do(lane.lease_from, [hi, lo], 30, block=False, at_most_once=True),
        lambda r: r[0] is hi and ids([r[1]]) == [("h2", 1)],
        keys=lambda s: b"hi:item:h2" not in s,
    )
    check.raises(
        "lease for a negative time", InvalidArgumentError, lambda: lane.do(q.lease, -1, block=False)
    )
    check.raises(
        "lease_from no queues", InvalidArgumentError, lambda: lane.do(lane.lease_from, [], 30)
    )


# Blocking leases --------------------------------------------------------------------------------


def blocking(lane: Lane, check: Check) -> None:
    q = lane.queue("blocks")
    check("add", lane.do(q.add_item, Item(b"ready", id="ready")), True)
    check(
        "blocking lease of a queued item",
        lane.do(q.lease, 30, timeout=5),
        Item(b"ready", id="ready"),
    )
    started = time.monotonic()
    check("blocking lease that times out", lane.do(q.lease, 30, timeout=0.3), None)
    check("it waited", time.monotonic() - started, lambda waited: waited >= 0.29)
    adder = lane.later(0.2, q.add_item, Item(b"woken", id="woken"))
    check(
        "blocking lease woken by an add",
        lane.do(q.lease, 30, timeout=10),
        Item(b"woken", id="woken"),
    )
    check("the add that woke it", adder.result(), True)
    adder = lane.later(0.2, q.add_items, [Item(b"m1", id="m1"), Item(b"m2", id="m2")])
    check(
        "blocking lease_many woken by add_items",
        lane.do(q.lease_many, 30, 5, timeout=10),
        lambda r: ids(r) == [("m1", 1), ("m2", 1)],
    )
    check("the add_items that woke it", adder.result(), [True, True])
    adder = lane.later(0.2, q.add_item, Item(b"once", id="once"))
    check(
        "blocking lease at most once",
        lane.do(q.lease, 30, timeout=10, at_most_once=True),
        lambda r: ids([r]) == [("once", 1)],
        keys=lambda s: b"blocks:item:once" not in s,
    )
    adder.result()
    hi, lo = lane.queue("bhi"), lane.queue("blo")
    adder = lane.later(0.2, lo.add_item, Item(b"low", id="low"))
    check(
        "blocking lease_from woken by its second queue",
        lane.do(lane.lease_from, [hi, lo], 30, timeout=10),
        lambda r: r[0] is lo and ids([r[1]]) == [("low", 1)],
    )
    adder.result()
    adder = lane.later(0.2, hi.add_item, Item(b"high", id="high"))
    check(
        "blocking lease_from woken by its first queue",
        lane.do(lane.lease_from, [hi, lo], 30, timeout=10),
        lambda r: r[0] is hi and ids([r[1]]) == [("high", 1)],
    )
    adder.result()
    check(
        "blocking lease_from that times out",
        lane.do(lane.lease_from, [hi, lo], 30, timeout=0.3),
        None,
    )
    check("add with a delay", lane.do(q.add_item, Item(b"due", id="due"), delay=1.5), True)
    started = time.monotonic()
    check("the delayed item is not leased early", lane.do(q.lease, 30, block=False), None)
    check(
        "blocking lease of the delayed item when it falls due",
        lane.do(q.lease, 30, timeout=10),
        Item(b"due", id="due"),
    )
    check("it waited for the due time", time.monotonic() - started, lambda waited: waited >= 0.5)


# Delays, times to live, expired leases, dead letters, cleans -------------------------------------


def timing(lane: Lane, check: Check) -> None:
    q = lane.queue("timers")
    check("add with a short ttl", lane.do(q.add_item, Item(b"brief", id="brief"), ttl=0.2), True)
    check("add", lane.do(q.add_item, Item(b"stays", id="stays")), True)
    nap(0.35)
    check(
        "an item past its ttl is never leased",
        lane.do(q.lease, 0.2, block=False),
        lambda r: ids([r]) == [("stays", 1)],
        keys=lambda s: not any(b"brief" in key for key in s),
    )
    nap(0.35)
    check(
        "stats with an expired lease",
        lane.do(q.stats),
        QueueStats(queued=0, leased=0, expired=1, delayed=0, dead=0),
    )
    check(
        "pending with an expired lease",
        lane.do(q.pending),
        lambda r: [p.expired for p in r] == [True],
    )
    check(
        "light_clean requeues the expired lease",
        lane.do(q.light_clean),
        CleanReport(examined=1, requeued=1),
    )
    again = check(
        "lease again", lane.do(q.lease, 30, block=False), lambda r: ids([r]) == [("stays", 2)]
    )
    check("release with a delay", lane.do(q.release, again, delay=0.6, reason="later"), True)
    check("not leased before its delay", lane.do(q.lease, 30, block=False), None)
    check("stats with a delayed retry", lane.do(q.stats), lambda r: (r.queued, r.delayed) == (0, 1))
    nap(0.7)
    check(
        "leased after its delay",
        lane.do(q.lease, 30, block=False),
        lambda r: ids([r]) == [("stays", 3)],
    )
    check("counts", lane.do(q.counts), QueueCounts(added=2, failed=1, retried=2, expired=1))


def dead_letters(lane: Lane, check: Check) -> None:
    q = lane.queue("deaths", max_deliveries=2)
    check("add", lane.do(q.add_item, Item(b"x", id="x")), True)
    x = lane.do(q.lease, 30, block=False)
    check(
        "release on the first delivery",
        lane.do(q.release_outcome, x, reason="one"),
        Released.REQUEUED,
    )
    x = check(
        "lease the second time", lane.do(q.lease, 30, block=False), lambda r: ids([r]) == [("x", 2)]
    )
    check(
        "release on the last delivery", lane.do(q.release_outcome, x, reason="two"), Released.BURIED
    )
    check("release_outcome of a buried item", lane.do(q.release_outcome, x), Released.NOT_HELD)
    check("dead_count", lane.do(q.dead_count), 1)
    check(
        "dead_letters",
        lane.do(q.dead_letters),
        lambda r: (
            [(d.id, d.data, d.deliveries, d.reason) for d in r] == [("x", b"x", 2, "two")]
            and r[0].item() == Item(b"x", id="x")
            and abs(r[0].died_at - time.time()) < 60
        ),
    )
    check(
        "dead_letters with a preview",
        lane.do(q.dead_letters, 0, 10, preview_bytes=0),
        lambda r: [(d.id, d.data, d.size, d.truncated) for d in r] == [("x", b"", 1, True)],
    )
    check("item_data of a dead letter", lane.do(q.item_data, "x", dead=True), b"x")
    done: list[int] = []
    check("requeue_dead", lane.do(q.requeue_dead, None, done.append), 1)
    check("its progress", done, [1])
    check("dead_count after the requeue", lane.do(q.dead_count), 0)
    x = check(
        "lease a requeued item", lane.do(q.lease, 30, block=False), lambda r: ids([r]) == [("x", 1)]
    )
    lane.do(q.release, x)
    x = check(
        "lease it again", lane.do(q.lease, 0.2, block=False), lambda r: ids([r]) == [("x", 2)]
    )
    nap(0.35)
    check(
        "light_clean buries an expired last delivery",
        lane.do(q.light_clean),
        CleanReport(examined=1, dead=1),
    )
    check(
        "the expired lease's dead letter",
        lane.do(q.dead_letters, 0, 10),
        lambda r: [(d.id, d.reason) for d in r] == [("x", "lease expired")],
    )
    check("requeue_dead by id", lane.do(q.requeue_dead, ["x", "unknown"]), 1)
    x = lane.do(q.lease, 30, block=False)
    lane.do(q.release, x)
    x = lane.do(q.lease, 30, block=False)
    check("buried again", lane.do(q.release_outcome, x, reason="three"), Released.BURIED)
    check("purge_dead by id", lane.do(q.purge_dead, ["x"]), 1)
    check("purge_dead of nothing", lane.do(q.purge_dead), 0)
    check(
        "counts",
        lane.do(q.counts),
        QueueCounts(added=1, failed=5, retried=3, dead=3, expired=1, requeued=2),
    )


def cleaning(lane: Lane, check: Check) -> None:
    q = lane.queue("cleans")
    check("add", lane.do(q.add_items, [Item(b"a", id="a"), Item(b"b", id="b")]), [True, True])
    # Traces another client (or a worker killed half-way) may leave, written as they would be:
    lane.admin.set("cleans:item:lost", b"in neither list")
    lane.admin.set("cleans:item:orphan", b"on the processing list without a lease")
    lane.admin.lpush("cleans:processing", "orphan", "gone")
    check(
        "light_clean: an entry without a lease, an entry without an item",
        lane.do(q.light_clean),
        CleanReport(examined=2, requeued=1, dropped=1),
    )
    check("stats", lane.do(q.stats), QueueStats(queued=3, leased=0, expired=0, delayed=0, dead=0))
    seen: list[Any] = []
    check(
        "deep_clean finds the item in neither list",
        lane.do(q.deep_clean, seen.append),
        lambda r: (r.requeued, r.dropped, r.dead) == (1, 0, 0) and r.examined == 4,
    )
    check("its progress ends done", [p.phase for p in seen[-1:]], ["done"])
    check(
        "peek",
        lane.do(q.peek, 0, 10),
        lambda r: sorted(i.id for i in r) == ["a", "b", "lost", "orphan"],
    )
    check("deep_clean again finds nothing", lane.do(q.deep_clean), lambda r: r.requeued == 0)


def flushing(lane: Lane, check: Check) -> None:
    star, other = lane.queue("fl*"), lane.queue("fla")
    check("add", lane.do(star.add_items, [Item(b"1", id="1"), Item(b"2", id="2")]), [True, True])
    check("add to the other queue", lane.do(other.add_item, Item(b"3", id="3")), True)
    one = lane.do(star.lease, 30, block=False)
    check("release", lane.do(star.release, one, reason="why"), True)
    done: list[int] = []
    check(
        "flush",
        lane.do(star.flush, done.append),
        lambda r: isinstance(r, FlushReport) and r.items == 2 and r.keys >= 5,
        keys=lambda s: sorted(s) == [b"fla:counts", b"fla:item:3", b"fla:queue"],
    )
    check("its progress", done[-1:], lambda r: r and r[0] >= 5)
    check("nothing left to flush", lane.do(star.flush), FlushReport(keys=0, items=0))


def jobs(lane: Lane, check: Check) -> None:
    q = lane.queue("jobs", max_deliveries=2)
    lane.do(q.add_item, Item(b"a", id="a"))
    lane.do(q.add_item, Item(b"later", id="later"), delay=60)
    check(
        "state of a queued item",
        lane.do(q.state, "a"),
        lambda r: (r.id, r.state, r.deliveries) == ("a", "queued", 0),
    )
    check(
        "state of a delayed item",
        lane.do(q.state, "later"),
        lambda r: r.state == "delayed" and r.due_at is not None and r.due_at > time.time() + 50,
    )
    a = lane.do(q.lease, 30, block=False)
    check(
        "state of a leased item",
        lane.do(q.state, "a"),
        lambda r: r.state == "leased" and r.deliveries == 1 and 25 < (r.lease_left or 0) <= 30,
    )
    lane.do(q.release, a, reason="try again")
    check(
        "state of a released item",
        lane.do(q.state, "a"),
        lambda r: (r.state, r.deliveries, r.reason) == ("queued", 1, "try again"),
    )
    a = lane.do(q.lease, 30, block=False)
    lane.do(q.release, a, reason="no more")
    lane.do(q.add_item, Item(b"b", id="b"))
    check(
        "states of many",
        lane.do(q.states, ["a", "b", "nothing"]),
        lambda r: (
            [(s.state, s.deliveries, s.reason) for s in r]
            == [("dead", 2, "no more"), ("queued", 0, None), ("gone", 0, None)]
        ),
    )
    check("retry a dead item", lane.do(q.retry, "a"), True)
    check("cancel a queued item", lane.do(q.cancel, "b"), Cancelled.REMOVED)
    check("cancel it again", lane.do(q.cancel, "b"), Cancelled.NOT_FOUND)
    check("reschedule a queued item", lane.do(q.reschedule, "a", 30), True)
    check("promote a delayed item", lane.do(q.promote, "a"), True)
    a = check("lease it", lane.do(q.lease, 30, block=False), lambda r: ids([r]) == [("a", 1)])
    check("cancel a leased item", lane.do(q.cancel, "a"), Cancelled.SIGNALLED)
    check("renew_outcome of a cancelled item", lane.do(q.renew_outcome, a, 30), Renewed.CANCELLED)
    events = lane.queue("events", events=True)
    lane.do(events.add_item, Item(b"e", id="e"))
    e = lane.do(events.lease, 30, block=False)
    lane.do(events.complete, e)
    check(
        "events of a queue with events on",
        _read_events(lane, events),
        [("added", "e", None), ("leased", "e", 1), ("completed", "e", 1)],
    )
    check(
        "counts",
        lane.do(q.counts),
        QueueCounts(added=3, failed=2, retried=1, dead=1, requeued=1, cancelled=2),
    )
    kept = lane.queue("jobres", keep_results=60)
    lane.do(kept.add_item, Item(b"r", id="r"))
    r = lane.do(kept.lease, 30, block=False)
    check("report_progress", lane.do(kept.report_progress, r, {"done": 1}), True)
    check("state with progress", lane.do(kept.state, "r"), lambda s: s.progress == {"done": 1})
    check(
        "complete with a result",
        lane.do(kept.complete, r, result=b"\x00out"),
        True,
        keys=lambda s: 50_000 < s[b"jobres:result:r"][2] <= 60_000,
    )
    check("result", lane.do(kept.result, "r", timeout=0), b"\x00out")
    check(
        "state of a completed item",
        lane.do(kept.state, "r"),
        lambda s: (s.state, s.result) == ("completed", b"\x00out"),
    )


def scheduling(lane: Lane, check: Check) -> None:
    q = lane.queue("sched")
    yearly = {"cron": "0 0 1 1 *", "data": b"y"}
    check("schedule", lane.do(q.schedule, "yearly", **yearly), True)
    check("schedule again as it is", lane.do(q.schedule, "yearly", **yearly), False)
    check("schedule every hour", lane.do(q.schedule, "hourly", every=3600), True)
    check("pause_schedule", lane.do(q.pause_schedule, "hourly"), True)
    check("run_schedules with nothing due", lane.do(q.run_schedules), [])
    # As after a downtime: the yearly schedule's due time passed years ago.
    lane.admin.zadd("sched:schedules:due", {"yearly": 1_577_836_800_000})
    year = datetime.now(timezone.utc).year
    first = f"yearly@{year}-01-01T00:00:00.000Z"
    check("run_schedules adds one for the missed times", lane.do(q.run_schedules), [first])
    check(
        "schedules",
        lane.do(q.schedules),
        lambda r: (
            [(s.name, s.paused, s.last_id) for s in r]
            == [("hourly", True, None), ("yearly", False, first)]
            and r[1].next_due == datetime(year + 1, 1, 1, tzinfo=timezone.utc).timestamp()
        ),
    )
    check("resume_schedule", lane.do(q.resume_schedule, "hourly"), True)
    check("remove_schedule", lane.do(q.remove_schedule, "hourly"), True)
    check(
        "the occurrence is an item",
        lane.do(q.lease, 30, block=False),
        lambda r: (r.id(), r.data()) == (first, b"y"),
    )


def sharding(lane: Lane, check: Check) -> None:
    q = lane.queue("shq", shards=3)
    batch = [Item(f"d{i}".encode(), id=f"s{i}") for i in range(6)]
    check("add_items over the shards", lane.do(q.add_items, batch), [True] * 6)
    check("an id meets its shard again", lane.do(q.add_item, Item(b"x", id="s4")), False)
    check(
        "shard_stats",
        lane.do(q.shard_stats),
        lambda r: (
            [row.prefix for row in r] == ["{shq:0.2}", "{shq:1.4}", "{shq:2}"]
            and sum(row.stats.queued for row in r) == 6
        ),
        keys=lambda s: all(k.startswith(b"{shq:") for k in s),
    )
    check("stats summed", lane.do(q.stats), QueueStats(6, 0, 0, 0, 0))
    check(
        "peek merged",
        lane.do(q.peek, 0, 10),
        lambda r: sorted(i.id for i in r) == [f"s{i}" for i in range(6)],
    )
    check("flush every shard", lane.do(q.flush), lambda r: r.items == 6)


def rate_limits(lane: Lane, check: Check) -> None:
    q = lane.queue("rated")
    check("add", lane.do(q.add_items, [Item(b"1", id="1"), Item(b"2", id="2")]), [True, True])
    check("set_rate_limit", lane.do(q.set_rate_limit, RateLimit(1, 60, burst=2)), None)
    check(
        "stats shows it",
        lane.do(q.stats),
        QueueStats(
            queued=2, leased=0, expired=0, delayed=0, dead=0, rate_limit=RateLimit(1, 60, 2)
        ),
    )
    check("set_rate_limit None", lane.do(q.set_rate_limit, None), None)
    check("stats without it", lane.do(q.stats), lambda r: r.rate_limit is None)
    check("lease_many unlimited", lane.do(q.lease_many, 30, 2, block=False), lambda r: len(r) == 2)


def groups(lane: Lane, check: Check) -> None:
    q = lane.queue("grouped", group_concurrency=1)
    items = [Item(b"a", id="a1"), Item(b"a", id="a2"), Item(b"b", id="b1"), Item(b"u", id="u1")]
    check("add_items grouped", lane.do(q.add_items, items, group=["A", "A", "B", None]), [True] * 4)
    check("add_item grouped", lane.do(q.add_item, Item(b"c", id="c1"), group="C"), True)
    check("pause_group", lane.do(q.pause_group, "C"), True)
    check(
        "lease_many in turns",
        lane.do(q.lease_many, 30, 5, block=False),
        lambda r: [i.id() for i in r] == ["a1", "b1", "u1"],
    )
    check("resume_group", lane.do(q.resume_group, "C"), True)
    check("set_group_concurrency", lane.do(q.set_group_concurrency, 2), None)
    check(
        "stats of groups",
        lane.do(q.stats, groups=["A", "C"]),
        lambda r: (
            (r.group_concurrency, r.groups["A"].ready, r.groups["A"].in_flight) == (2, 1, 1)
            and r.groups["C"].ready == 1
        ),
    )
    check("set_group_rate_limit", lane.do(q.set_group_rate_limit, "B", RateLimit(1, 60, 1)), True)
    check(
        "set_default_group_rate_limit",
        lane.do(q.set_default_group_rate_limit, RateLimit(100, 1, 10)),
        None,
    )
    check(
        "stats of the groups' limits",
        lane.do(q.stats, groups=["A", "B"]),
        lambda r: (
            r.groups["B"].rate_limit == RateLimit(1, 60, 1)
            and r.groups["A"].rate_limit == RateLimit(100, 1, 10)
            and r.group_rate_limit == RateLimit(100, 1, 10)
        ),
    )
    check("remove a group's limit", lane.do(q.set_group_rate_limit, "B", None), True)
    check("remove it again", lane.do(q.set_group_rate_limit, "B", None), False)
    check("remove the default", lane.do(q.set_default_group_rate_limit, None), None)
    check.raises(
        "add_item with an empty group",
        InvalidArgumentError,
        lambda: lane.do(q.add_item, Item(b"x", id="x"), group=""),
    )


SCENARIOS: dict[str, Scenario] = {
    "sharding": sharding,
    "adding": adding,
    "leasing": leasing,
    "blocking": blocking,
    "timing": timing,
    "dead_letters": dead_letters,
    "cleaning": cleaning,
    "flushing": flushing,
    "jobs": jobs,
    "scheduling": scheduling,
    "rate_limits": rate_limits,
    "groups": groups,
}


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_gives_the_same_replies_and_keys_on_every_path(
    redis_server: Proc, loop: Loop, routes: ScriptRoutes, name: str, flavour: str
) -> None:
    with closing(make_lanes(redis_server, FLAVOURS[flavour], loop)) as lanes:
        assert [lane.name for lane in lanes][:2] == ["sync/public", "sync/auto"]
        records = run_lanes(lanes, SCENARIOS[name])
        assert records[0], "the scenario recorded nothing"
        routes.check(lanes)


def public_methods(cls: type) -> set[str]:
    return {
        name
        for name in dir(cls)
        if not name.startswith("_") and inspect.isfunction(inspect.getattr_static(cls, name))
    }


def _read_events(lane: Lane, queue: Any) -> list[tuple[str, str, int | None]]:
    """Every kept event of ``queue`` (an iterator, or an async one on an asyncio lane), as
    (kind, id, delivery): their entry ids and times differ from path to path."""
    if lane.loop is None:
        found = list(queue.events(lane.client))
    else:

        async def go() -> list[Any]:
            return [event async for event in queue.events(lane.client)]

        found = list(lane.await_(go()))
    return [(event.kind, event.id, event.delivery) for event in found]


def test_every_public_operation_is_in_a_scenario() -> None:
    """A method or function added to the public API fails here until a conformance test
    calls it."""
    here = Path(__file__).resolve().parent
    source = "\n".join(p.read_text("utf-8") for p in sorted(here.glob("*.py")))
    # Imports name a function without calling it.
    source = re.sub(r"^(from|import) [^(\n]*(\([^)]*\))?", "", source, flags=re.MULTILINE)
    methods = public_methods(WorkQueue) | public_methods(AsyncWorkQueue)
    functions = {
        name
        for name in redis_work_queue.__all__
        if inspect.isfunction(getattr(redis_work_queue, name))
    }
    assert {"add_item", "lease", "flush"} <= methods
    assert {"lease_from", "alease_from", "live_workers"} <= functions
    missing = [name for name in sorted(methods) if not re.search(rf"\.{name}\b", source)]
    missing += [name for name in sorted(functions) if not re.search(rf"\b{name}\b", source)]
    assert not missing, f"public operations no conformance test calls: {missing}"
