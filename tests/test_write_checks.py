"""Every operation checks the types of the keys it writes before its first write.

A table of every public operation x every key of a queue's layout x every wrong Redis type: a
realistic queue (items queued, leased, expired, delayed, dead, lost) gets one key replaced by a
value of another type, the operation runs, and a full dump of the database (every key: type,
value, TTL rounded) is compared before and after. Either the operation succeeds and leaves the
planted key as it was, or it raises one of the library's errors and nothing changed at all.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from checks import (
    KEYS,
    LEASE_SECS,
    OTHER,
    PREFIX,
    SHORT_WAIT,
    TYPES,
    State,
    WriteCheck,
    dump,
    key_of,
    plant,
    pushing_when_blocked,
    setup_queue,
    write_cases,
    write_check_test,
)
from redis_work_queue import (
    Item,
    WorkQueue,
    WrongKeyTypeError,
    complete_and_lease_from,
    layout,
    lease_from,
    scripts,
)
from servers import Proc

#: The keys of the layout that the scripts write (layout.ROWS) and the type each one holds; the
#: per-item keys are planted for the id the operation acts on.
LAYOUT = layout.kinds("scripts")
#: The rows of this table are written with the name of their first use: a write check.
Op = WriteCheck


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
    # The runners' release of an item they never started.
    return q().release_outcome(s.db, s.held, reason="stopping", undo=True)


def _complete_held(s: State) -> Any:
    # The Spark data source's completion (ops/spark.py), without importing Spark.
    assert s.held.lease_token is not None
    pairs = ("held", s.held.lease_token, "stale", "someone@1")
    return scripts.load("complete_held")(s.db, KEYS.script_keys, (*KEYS.script_args, *pairs))


WRITE_CHECKS = [
    Op("add", "new", lambda s: q().add_item(s.db, Item(b"new", id="new")), covers="add_item"),
    Op(
        "add_unique",
        "new",
        lambda s: q().add_unique_item(s.db, Item(b"new", id="new")),
        covers="add_unique_item",
    ),
    Op(
        "add-delay",
        "new",
        lambda s: q().add_item(s.db, Item(b"new", id="new"), delay=30),
        covers="add_item",
    ),
    Op(
        "add-ttl",
        "new",
        lambda s: q().add_item(s.db, Item(b"new", id="new"), ttl=300),
        covers="add_item",
    ),
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
    Op("release-undo", "held", _release_undo, covers="release_outcome"),
    Op("renew_many", "held", lambda s: q().renew_many(s.db, [s.held], LEASE_SECS)),
    Op("give_back", "held", lambda s: q().give_back(s.db, [s.held], "stopping")),
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
        covers="complete_and_lease_from",
    ),
    Op(
        "complete_and_lease-next",
        "a",
        lambda s: complete_and_lease_from(s.db, q(), s.held, [WorkQueue(OTHER), q()], LEASE_SECS),
        covers="complete_and_lease_from",
    ),
    Op(
        "complete_and_lease-empty",
        "held",
        lambda s: complete_and_lease_from(s.db, q(), s.held, [q()], LEASE_SECS),
        queued=False,
        covers="complete_and_lease_from",
    ),
    Op(
        "complete_and_lease-bury",
        "a",
        lambda s: complete_and_lease_from(s.db, q(2), s.held, [q(2)], LEASE_SECS),
        prepare=lambda db: _delivered_twice(db, "a"),
        completes_first=True,
        covers="complete_and_lease_from",
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


CASES = write_cases(WRITE_CHECKS)
#: Every row x every key of the layout x every wrong type (see checks.py).
test_wrong_type_changes_nothing = write_check_test(WRITE_CHECKS)


@pytest.fixture(scope="module")
def clients(redis_server: Proc) -> Iterator[tuple[redis.Redis, redis.Redis]]:
    """Two clients of the session's server for the whole table; each case empties the database
    (FLUSHDB of that server only)."""
    db = redis_server.client(socket_timeout=10)
    yield db, redis_server.client(socket_timeout=10)
    db.flushdb()


def test_the_table_covers_the_layout() -> None:
    """The planted keys are the layout's: every key QueueKeys names, fixed or per item."""
    fixed = {key_of(name, "x") for name in LAYOUT} - {
        KEYS.item("x"),
        KEYS.lease("x"),
        KEYS.dead_item("x"),
        KEYS.result("x"),
        KEYS.progress("x"),
        KEYS.group("x"),
    }
    # The Spark data source's write record is written by Spark jobs only (test_spark.py), the
    # fleet's clean turn, the worker registrations and the job durations by the worker runner
    # only (test_heartbeat.py's write checks, test_runner.py and test_metrics_durations.py
    # plant wrong types there), and the fleet's turn to run the schedules by the runner only
    # (test_schedules.py's runner row plants wrong types there).
    assert fixed == set(KEYS.fixed()) - {
        KEYS.spark_write,
        KEYS.cleaned,
        KEYS.workers,
        KEYS.durations,
        KEYS.schedules_turn,
    }
    assert len(CASES) == len(WRITE_CHECKS) * len(LAYOUT) * (len(TYPES) - 1)


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
