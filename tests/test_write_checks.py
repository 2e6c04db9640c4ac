"""Every operation checks the types of the keys it writes before its first write.

A table of every public operation x every key of a queue's layout x every wrong Redis type: a
realistic queue (items queued, leased, expired, delayed, dead, lost) gets one key replaced by a
value of another type, the operation runs, and a full dump of the database (every key: type,
value, TTL rounded) is compared before and after. Either the operation succeeds and leaves the
planted key as it was, or it raises one of the library's errors and nothing changed at all.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

from helpers import Dump, dump_state
from redis_work_queue import (
    Item,
    KeyPrefix,
    WorkQueue,
    WorkQueueError,
    WrongKeyTypeError,
    complete_and_lease_from,
    layout,
    lease_from,
    scripts,
)
from redis_work_queue.keyprefix import QueueKeys
from redis_work_queue.transport import run
from servers import Proc

PREFIX = KeyPrefix("p")
OTHER = KeyPrefix("p2")
KEYS = QueueKeys(PREFIX)
LEASE_SECS = 30
#: TTLs are compared in steps of this many ms (leases of 30 s, delay leases of 90 s, items of
#: 300 s all sit far from a step's edge).
TTL_STEP_MS = 10_000
#: A blocking lease that must time out waits this long.
SHORT_WAIT = 0.05

#: The keys of the layout that the scripts write (layout.ROWS) and the type each one holds; the
#: per-item keys are planted for the id the operation acts on.
LAYOUT = layout.kinds("scripts")
TYPES = ("string", "list", "hash", "set", "zset")


def key_of(name: str, item_id: str) -> str:
    if name == "item":
        return KEYS.item(item_id)
    if name == "lease":
        return KEYS.lease(item_id)
    if name == "dead_item":
        return KEYS.dead_item(item_id)
    key: str = getattr(KEYS, name)
    return key


def dump(db: redis.Redis) -> Dump:
    """Every key of the database: its type, its whole value and its TTL (rounded)."""
    return dump_state(db, TTL_STEP_MS)


def plant(db: redis.Redis, key: str, kind: str) -> None:
    """Replace ``key`` with a value of type ``kind``."""
    db.delete(key)
    if kind == "string":
        db.set(key, b"planted")
    elif kind == "list":
        db.rpush(key, b"planted")
    elif kind == "hash":
        db.hset(key, b"planted", b"1")
    elif kind == "set":
        db.sadd(key, b"planted")
    else:
        db.zadd(key, {b"planted": 1})


@dataclass
class State:
    """What an operation needs from the queue that was set up."""

    db: redis.Redis
    #: Another client of the same server.
    other: redis.Redis
    held: Item
    #: (list key, id) pushed by the other client while the operation ran.
    pushed: list[tuple[bytes, bytes]] = field(default_factory=list)


def setup_queue(db: redis.Redis, other: redis.Redis, queued: bool = True) -> State:
    """A queue in a realistic state.

    ``dead1`` is a dead letter; ``held`` is leased (its second delivery, after a release with a
    reason); ``stale`` is on the processing list with its lease expired; ``a`` and ``b`` are
    queued (``a`` is next) unless ``queued`` is false; ``later`` is delayed; ``lost`` has a data
    key only (lost from both lists).
    """
    once = WorkQueue(PREFIX, max_deliveries=1)
    once.add_item(db, Item(b"dead data", id="dead1"))
    dying = once.lease(db, LEASE_SECS, block=False)
    assert dying is not None
    assert once.release(db, dying, reason="boom")
    queue = WorkQueue(PREFIX)
    queue.add_item(db, Item(b"stale data", id="stale"))
    stale = queue.lease(db, LEASE_SECS, block=False)
    assert stale is not None
    db.delete(KEYS.lease("stale"))  # its lease expired
    queue.add_item(db, Item(b"held data", id="held"))
    held = queue.lease(db, LEASE_SECS, block=False)
    assert held is not None
    assert queue.release(db, held, reason="retry")
    held = queue.lease(db, LEASE_SECS, block=False)
    assert held is not None and held.id() == "held"
    if queued:
        queue.add_item(db, Item(b"a data", id="a"))
        queue.add_item(db, Item(b"b data", id="b"))
    queue.add_item(db, Item(b"later data", id="later"), delay=30)
    db.set(KEYS.item("lost"), b"lost data")
    return State(db, other, held)


@contextlib.contextmanager
def pushing_when_blocked(s: State) -> Iterator[None]:
    """While the body runs, another client pushes ``late`` (whose data key exists) onto the main
    queue as soon as a worker has registered as blocked on it: a blocking lease then claims it."""
    done = threading.Event()

    def push() -> None:
        deadline = time.monotonic() + 5
        while not done.is_set() and time.monotonic() < deadline:
            if s.other.type(KEYS.waiting) == b"zset":
                time.sleep(0.01)  # let the worker reach its blocking move
                s.other.lpush(KEYS.queue, b"late")
                s.pushed.append((KEYS.queue.encode(), b"late"))
                return
            time.sleep(0.002)

    thread = threading.Thread(target=push, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=10)


def q(max_deliveries: int | None = None) -> WorkQueue:
    return WorkQueue(PREFIX, max_deliveries=max_deliveries)


def _lease_claim(s: State, max_deliveries: int | None = None) -> Any:
    with pushing_when_blocked(s):
        return q(max_deliveries).lease(s.db, LEASE_SECS, timeout=1)


def _delivered_twice(db: redis.Redis, *ids: str) -> None:
    # Requeued after two deliveries by a cleaner that does not bury (another implementation's).
    for item_id in ids:
        db.hset(KEYS.deliveries, item_id, 2)


def _due(db: redis.Redis, waiting: bool = False) -> None:
    # ``later`` falls due: a lease promotes it (and wakes a registered worker, with ``waiting``).
    db.zadd(KEYS.delayed, {"later": 1})
    if waiting:
        db.zadd(KEYS.waiting, {"someone": int(time.time() * 1000) + 60_000})
        db.pexpire(KEYS.waiting, 60_000)


def _release_undo(s: State) -> Any:
    # The runners' release of an item they never started (WorkQueue has no public undo).
    return run(s.db, q().ops.release(s.held, 0, "stopping", undo=True))


def _complete_held(s: State) -> Any:
    # The Spark data source's completion (spark/calls.py), without importing Spark.
    assert s.held.lease_token is not None
    pairs = ("held", s.held.lease_token, "stale", "someone@1")
    return scripts.load("complete_held")(s.db, KEYS.script_keys, (*KEYS.script_args, *pairs))


@dataclass(frozen=True)
class Op:
    """One public operation: its name, the id whose per-item keys are planted, and the call."""

    name: str
    item_id: str
    call: Callable[[State], Any]
    queued: bool = True
    #: The operation deletes every key of the queue, the planted one included.
    removes_all: bool = False
    #: The data key of ``late`` exists: another client pushes it while the operation runs.
    late: bool = False
    #: Sets the state up further, before the key is planted.
    prepare: Callable[[redis.Redis], None] | None = None
    #: Completes ``held`` before its lease part, which checks the dead letter of an id it
    #: buries only when it comes to it: an error there leaves that completion done.
    completes_first: bool = False
    #: Queues the due ``later`` before it takes ids, as a lease does: an error on the dead
    #: letter of an id it then buries leaves ``later`` queued.
    promotes_first: bool = False


OPS = [
    Op("add", "new", lambda s: q().add_item(s.db, Item(b"new", id="new"))),
    Op("add_unique", "new", lambda s: q().add_unique_item(s.db, Item(b"new", id="new"))),
    Op("add-delay", "new", lambda s: q().add_item(s.db, Item(b"new", id="new"), delay=30)),
    Op("add-ttl", "new", lambda s: q().add_item(s.db, Item(b"new", id="new"), ttl=300)),
    Op(
        "add_items",
        "n2",
        lambda s: q().add_items(s.db, [Item(b"1", id="n1"), Item(b"2", id="n2")]),
    ),
    Op(
        "add_items-ttl",
        "n2",
        lambda s: q().add_items(s.db, [Item(b"1", id="n1"), Item(b"2", id="n2")], ttl=300),
    ),
    Op(
        "add_items-delay",
        "n2",
        lambda s: q().add_items(s.db, [Item(b"1", id="n1"), Item(b"2", id="n2")], delay=30),
    ),
    Op(
        "add_items-unique",
        "n2",
        lambda s: q().add_items(s.db, [Item(b"1", id="n1"), Item(b"2", id="n2")], unique=True),
    ),
    Op("lease", "a", lambda s: q().lease(s.db, LEASE_SECS, block=False)),
    Op("lease-max", "a", lambda s: q(3).lease(s.db, LEASE_SECS, block=False)),
    Op("lease-blocking", "a", lambda s: q().lease(s.db, LEASE_SECS, timeout=1)),
    Op(
        "lease-blocking-wait",
        "a",
        lambda s: q().lease(s.db, LEASE_SECS, timeout=SHORT_WAIT),
        queued=False,
    ),
    Op(
        "lease-blocking-claim",
        "late",
        _lease_claim,
        queued=False,
        late=True,
    ),
    Op(
        "lease-bury",
        "a",
        lambda s: q(2).lease(s.db, LEASE_SECS, block=False),
        prepare=lambda db: _delivered_twice(db, "a"),
    ),
    Op(
        "lease-blocking-claim-bury",
        "late",
        lambda s: _lease_claim(s, 2),
        queued=False,
        late=True,
        prepare=lambda db: _delivered_twice(db, "late"),
    ),
    Op(
        "lease_from",
        "a",
        lambda s: lease_from(s.db, [WorkQueue(OTHER), q()], LEASE_SECS, timeout=1),
    ),
    Op(
        "lease_from-wait",
        "a",
        lambda s: lease_from(s.db, [WorkQueue(OTHER), q()], LEASE_SECS, timeout=SHORT_WAIT),
        queued=False,
    ),
    Op(
        "lease-at_most_once",
        "a",
        lambda s: q().lease(s.db, LEASE_SECS, block=False, at_most_once=True),
    ),
    Op(
        "lease-promote",
        "later",
        lambda s: q().lease(s.db, LEASE_SECS, block=False),
        queued=False,
        prepare=_due,
    ),
    Op(
        "lease-promote-wake",
        "later",
        lambda s: q().lease(s.db, LEASE_SECS, block=False),
        prepare=lambda db: _due(db, waiting=True),
    ),
    Op(
        "lease-promote-bury",
        "a",
        lambda s: q(2).lease_many(s.db, LEASE_SECS, 2, block=False),
        prepare=lambda db: (_due(db), _delivered_twice(db, "a")),
        promotes_first=True,
    ),
    Op("lease_many", "a", lambda s: q().lease_many(s.db, LEASE_SECS, 5, block=False)),
    Op("renew", "held", lambda s: q().renew(s.db, s.held, LEASE_SECS)),
    Op("release", "held", lambda s: q().release(s.db, s.held, reason="again")),
    Op("release-delay", "held", lambda s: q().release(s.db, s.held, delay=30)),
    Op(
        "release-undo",
        "held",
        _release_undo,
    ),
    Op("release-bury", "held", lambda s: q(2).release(s.db, s.held, reason="last")),
    Op("complete", "held", lambda s: q().complete(s.db, s.held)),
    Op(
        "complete_many",
        "held",
        lambda s: q().complete_many(s.db, [Item(b"", id="stale"), s.held]),
    ),
    Op(
        "complete_many-twice",
        "held",
        lambda s: q().complete_many(s.db, [s.held, Item(b"", id="lost"), s.held]),
    ),
    Op("complete_held", "held", _complete_held),
    Op(
        "complete_and_lease",
        "held",
        lambda s: complete_and_lease_from(s.db, q(), s.held, [q()], LEASE_SECS),
    ),
    Op(
        "complete_and_lease-next",
        "a",
        lambda s: complete_and_lease_from(s.db, q(), s.held, [WorkQueue(OTHER), q()], LEASE_SECS),
    ),
    Op(
        "complete_and_lease-empty",
        "held",
        lambda s: complete_and_lease_from(s.db, q(), s.held, [q()], LEASE_SECS),
        queued=False,
    ),
    Op(
        "complete_and_lease-bury",
        "a",
        lambda s: complete_and_lease_from(s.db, q(2), s.held, [q(2)], LEASE_SECS),
        prepare=lambda db: _delivered_twice(db, "a"),
        completes_first=True,
    ),
    Op("light_clean", "stale", lambda s: q().light_clean(s.db)),
    Op("deep_clean", "lost", lambda s: q().deep_clean(s.db)),
    Op("stats", "held", lambda s: q().stats(s.db)),
    Op("peek", "a", lambda s: q().peek(s.db)),
    Op("pending", "held", lambda s: q().pending(s.db)),
    Op("dead_letters", "dead1", lambda s: q().dead_letters(s.db)),
    Op("requeue_dead", "dead1", lambda s: q().requeue_dead(s.db)),
    Op("requeue_dead-ids", "dead1", lambda s: q().requeue_dead(s.db, ["dead1"])),
    Op("purge_dead", "dead1", lambda s: q().purge_dead(s.db)),
    Op("purge_dead-ids", "dead1", lambda s: q().purge_dead(s.db, ["dead1"])),
    Op("flush", "held", lambda s: q().flush(s.db), removes_all=True),
]


def held_completed(state: Dump) -> Dump:
    """``state`` after completing ``held`` (see setup_queue): its keys, its entry on the
    processing list and its bookkeeping gone, one more item counted completed."""
    out = dict(state)
    del out[KEYS.item("held").encode()], out[KEYS.lease("held").encode()]
    kind, entries, ttl = out[KEYS.processing.encode()]
    out[KEYS.processing.encode()] = (kind, [e for e in entries if e != b"held"], ttl)
    for name in (KEYS.deliveries, KEYS.reasons):
        kind, fields, ttl = out[name.encode()]
        left = [(f, v) for f, v in fields if f != b"held"]
        if left:
            out[name.encode()] = (kind, left, ttl)
        else:
            del out[name.encode()]
    kind, counts, ttl = out[KEYS.counts.encode()]
    done = dict(counts)
    done[b"completed"] = b"%d" % (int(done.get(b"completed", b"0")) + 1)
    out[KEYS.counts.encode()] = (kind, sorted(done.items()), ttl)
    return out


def later_queued(state: Dump) -> Dump:
    """``state`` after the due ``later`` (see _due) was queued at the leasing end: out of the
    delayed set, its delay lease gone."""
    out = dict(state)
    del out[KEYS.lease("later").encode()]
    kind, members, ttl = out[KEYS.delayed.encode()]
    left = [m for m in members if m[0] != b"later"]
    if left:
        out[KEYS.delayed.encode()] = (kind, left, ttl)
    else:
        del out[KEYS.delayed.encode()]
    kind, entries, ttl = out[KEYS.queue.encode()]
    out[KEYS.queue.encode()] = (kind, [*entries, b"later"], ttl)
    return out


CASES = [
    pytest.param(op, name, kind, id=f"{op.name}-{name}-{kind}")
    for op in OPS
    for name, right in LAYOUT.items()
    for kind in TYPES
    if kind != right
]


@pytest.fixture(scope="module")
def clients(redis_server: Proc) -> Iterator[tuple[redis.Redis, redis.Redis]]:
    """Two clients of the session's server for the whole table; each case empties the database
    (FLUSHDB of that server only)."""
    db = redis_server.client(socket_timeout=10)
    yield db, redis_server.client(socket_timeout=10)
    db.flushdb()


@pytest.mark.parametrize(("op", "name", "kind"), CASES)
def test_wrong_type_changes_nothing(
    clients: tuple[redis.Redis, redis.Redis], op: Op, name: str, kind: str
) -> None:
    db, other = clients
    db.flushdb()
    state = setup_queue(db, other, queued=op.queued)
    if op.late:
        db.set(KEYS.item("late"), b"late data")
    if op.prepare is not None:
        op.prepare(db)
    planted = key_of(name, op.item_id)
    plant(db, planted, kind)
    before = dump(db)
    try:
        op.call(state)
    except WorkQueueError as err:
        after = dump(db)
        expected = dict(before)
        for key, pushed_id in state.pushed:
            _, value, ttl = expected.get(key, ("list", [], -1))
            expected[key] = ("list", [pushed_id, *value], ttl)
        if op.completes_first and name == "dead_item":
            expected = held_completed(expected)
        if op.promotes_first and name == "dead_item":
            expected = later_queued(expected)
        assert after == expected, f"{op.name} raised {err!r} but changed the database"
        if isinstance(err, WrongKeyTypeError):
            assert "wrong" in str(err).lower()
        return
    after = dump(db)
    if op.removes_all:
        assert not any(key.startswith(b"p:") for key in after), after
        return
    assert after.get(planted.encode()) == before[planted.encode()], (
        f"{op.name} succeeded but changed the planted {kind} at {planted}"
    )


def test_the_table_covers_the_layout() -> None:
    """The planted keys are the layout's: every key QueueKeys names, fixed or per item."""
    fixed = {key_of(name, "x") for name in LAYOUT} - {
        KEYS.item("x"),
        KEYS.lease("x"),
        KEYS.dead_item("x"),
    }
    # The Spark data source's write record is written by Spark jobs only (test_spark.py), the
    # fleet's clean turn, the worker registrations and the job durations by the worker runner
    # only (test_runner.py and test_metrics_durations.py plant wrong types there).
    assert fixed == set(KEYS.fixed()) - {
        KEYS.spark_write,
        KEYS.cleaned,
        KEYS.workers,
        KEYS.durations,
    }
    assert len(CASES) == len(OPS) * len(LAYOUT) * (len(TYPES) - 1)


def test_a_wrong_type_names_the_key(clients: tuple[redis.Redis, redis.Redis]) -> None:
    """The error says which key holds which type, and that nothing changed."""
    db, other = clients
    db.flushdb()
    state = setup_queue(db, other)
    plant(db, KEYS.processing, "hash")
    before = dump(db)
    with pytest.raises(WrongKeyTypeError) as caught:
        q().release(db, state.held)
    assert "p:processing" in str(caught.value)
    assert "nothing was changed" in str(caught.value)
    assert dump(db) == before


@pytest.mark.parametrize("name", ["queue", "processing", "deliveries"])
def test_a_lease_s_wrong_type_names_the_key(
    clients: tuple[redis.Redis, redis.Redis], name: str
) -> None:
    """A lease checks the first queue's main queue by reading it: the error still names it."""
    db, other = clients
    db.flushdb()
    setup_queue(db, other)
    key = key_of(name, "a")
    plant(db, key, "string")
    before = dump(db)
    with pytest.raises(WrongKeyTypeError) as caught:
        q().lease(db, LEASE_SECS, block=False)
    assert f"{key} holds a string, not a" in str(caught.value)
    assert dump(db) == before
