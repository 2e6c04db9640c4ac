"""The tables every writing operation needs rows in, and the harness that makes them tests.

A test module declares its rows and makes each table a test with one line::

    WRITE_CHECKS = [WriteCheck("my_op", "a", lambda s: q().my_op(s.db, ...))]
    OOM_CHECKS = [OomCheck("my_op", lambda queue, db, held: queue.my_op(db, ...))]

    test_my_op_checks_types_before_writing = write_check_test(WRITE_CHECKS)
    test_my_op_out_of_memory = oom_test(OOM_CHECKS)

``tests/test_registry.py`` imports every test module holding such rows, and fails when a writing
operation of the registry (``redis_work_queue.ops.registry``) has no row in either table, or
when a module's rows are not made into a test.

A write check (``WRITE_CHECKS``): a realistic queue (items queued, leased, expired, delayed,
dead, lost) gets one key replaced by a value of another type, for every key its writer writes
(``layout.kinds``) and every wrong type; the operation runs, and a full dump of the database
(every key: type, value, TTL rounded) is compared before and after. Either the operation
succeeds and leaves the planted key as it was, or it raises one of the library's errors and
nothing changed at all. The calls it sends must be of the scripts and commands its operation
declares in the registry.

An out-of-memory check (``OOM_CHECKS``): on a server out of memory (``maxmemory`` with
``noeviction``), a refused write (``refused=True``: its first write needs memory) raises
redis-py's ``OutOfMemoryError`` and changes nothing; any other either goes through or changes
nothing. Each runs on the sync and the asyncio API.
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
from redis.exceptions import OutOfMemoryError

from helpers import Dump, dump_state
from redis_work_queue import (
    Item,
    KeyPrefix,
    WorkQueue,
    WorkQueueError,
    WrongKeyTypeError,
    layout,
    transport,
)
from redis_work_queue.calls import Command, Pipelined, ScriptCall
from redis_work_queue.keyprefix import QueueKeys
from redis_work_queue.layout import Writer
from redis_work_queue.ops import registry

PREFIX = KeyPrefix("p")
OTHER = KeyPrefix("p2")
KEYS = QueueKeys(PREFIX)
LEASE_SECS = 30
#: TTLs are compared in steps of this many ms (leases of 30 s, delay leases of 90 s, items of
#: 300 s all sit far from a step's edge).
TTL_STEP_MS = 10_000
#: A blocking lease that must time out waits this long.
SHORT_WAIT = 0.05
TYPES = ("string", "list", "hash", "set", "zset", "stream")


def key_of(name: str, item_id: str) -> str:
    """The key of layout row ``name``: of item (worker, batch) ``item_id`` for a family."""
    if any(row.name == name for row in layout.PER_KEY):
        named: str = getattr(KEYS, name)(item_id)
        return named
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
    elif kind == "stream":
        db.xadd(key, {b"planted": b"1"})
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


@dataclass(frozen=True)
class WriteCheck:
    """One row: a call of an operation, the id whose per-item keys are planted, and how."""

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
    #: The public name (or, for one without, the name) of the registered operation the row
    #: calls; by default the row's name up to its first "-".
    covers: str = ""
    #: Whose keys are planted: the keys of the layout that this writer writes (layout.ROWS).
    writer: Writer = "scripts"

    @property
    def covered(self) -> str:
        """The operation the row stands for, as the registry names it (see ``covers``)."""
        return self.covers or self.name.split("-")[0]


def write_cases(rows: list[WriteCheck]) -> list[Any]:
    """One case per row, key its writer writes, and wrong type."""
    return [
        pytest.param(op, name, kind, id=f"{op.name}-{name}-{kind}")
        for op in rows
        for name, right in layout.kinds(op.writer).items()
        for kind in TYPES
        if kind != right
    ]


class Sent:
    """The scripts and the plain commands sent."""

    def __init__(self) -> None:
        self.scripts: set[str] = set()
        self.commands: set[str] = set()

    def add(self, call: Any) -> None:
        if isinstance(call, ScriptCall):
            self.scripts.add(call.script.name)
        elif isinstance(call, Pipelined):
            self.scripts.update(each.script.name for each in call.calls)
        elif isinstance(call, Command):
            self.commands.add(str(call.args[0]).upper())


@contextlib.contextmanager
def sending() -> Iterator[Sent]:
    """Record the calls the synchronous transport sends meanwhile."""
    sent = Sent()
    original = transport.execute

    def recording(db: Any, call: Any) -> Any:
        sent.add(call)
        return original(db, call)

    transport.execute = recording  # type: ignore[assignment]
    try:
        yield sent
    finally:
        transport.execute = original  # type: ignore[assignment]


def declared(name: str) -> tuple[set[str], set[str]]:
    """The scripts and commands the registered operation ``name`` declares (with those of the
    operations it is made of)."""
    found = [op for op in registry.operations().values() if name in op.covered_as]
    assert found, f"no registered operation is called {name!r}"
    scripts: set[str] = set()
    commands: set[str] = set()
    for op in found:
        scripts.update(op.scripts)
        commands.update(op.commands)
        for part in op.via:
            more_scripts, more_commands = declared(part)
            scripts |= more_scripts
            commands |= more_commands
    return scripts, commands


def assert_declared(name: str, sent: Sent) -> None:
    scripts, commands = declared(name)
    assert sent.scripts <= scripts, f"{name} runs scripts it does not declare: {sent.scripts}"
    assert sent.commands <= commands, f"{name} sends commands it does not declare: {sent.commands}"


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


def check_write(
    clients: tuple[redis.Redis, redis.Redis], op: WriteCheck, name: str, kind: str
) -> None:
    """One case of a write check: ``op`` with ``name``'s key holding a ``kind``."""
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
        with sending() as sent:
            op.call(state)
    except WorkQueueError as err:
        assert_declared(op.covered, sent)
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
    assert_declared(op.covered, sent)
    after = dump(db)
    if op.removes_all:
        assert not any(key.startswith(b"p:") for key in after), after
        return
    assert after.get(planted.encode()) == before[planted.encode()], (
        f"{op.name} succeeded but changed the planted {kind} at {planted}"
    )


def write_check_test(rows: list[WriteCheck]) -> Callable[..., None]:
    """A test of every case of ``rows`` (see the module's doc)."""

    @pytest.mark.parametrize(("op", "name", "kind"), write_cases(rows))
    def test(
        check_clients: tuple[redis.Redis, redis.Redis], op: WriteCheck, name: str, kind: str
    ) -> None:
        check_write(check_clients, op, name, kind)

    test.rows = rows  # type: ignore[attr-defined]
    return test


OomCall = Callable[[WorkQueue, redis.Redis, Item], Any]


@dataclass(frozen=True)
class OomCheck:
    """One row: a call of an operation on a server out of memory.

    ``call`` gets the queue (sync or asyncio), the client and the leased item of the queue set
    up; ``refused``: its first write needs memory, so it must be refused.
    """

    name: str
    call: OomCall
    refused: bool = False
    #: As :attr:`WriteCheck.covers`.
    covers: str = ""

    @property
    def covered(self) -> str:
        return self.covers or self.name.split("-")[0]


def limit(db: redis.Redis) -> None:
    """Leave the server out of memory: every write that needs memory is refused."""
    db.config_set("maxmemory", 1)
    with pytest.raises(OutOfMemoryError):
        db.set("probe", b"x")


def oom_test(rows: list[OomCheck]) -> Callable[..., None]:
    """A test of every row of ``rows``, on the sync and the asyncio API (see the module's doc)."""

    @pytest.mark.parametrize("row", rows, ids=[row.name for row in rows])
    def test(full_db: redis.Redis, queue_kind: Callable[..., WorkQueue], row: OomCheck) -> None:
        queue = queue_kind(PREFIX)
        state = setup_queue(full_db, full_db)
        limit(full_db)
        before = dump(full_db)
        if row.refused:
            with pytest.raises(OutOfMemoryError) as caught:
                row.call(queue, full_db, state.held)
            assert "maxmemory" in str(caught.value)
            assert dump(full_db) == before
            return
        try:
            row.call(queue, full_db, state.held)
        except OutOfMemoryError:
            assert dump(full_db) == before

    test.rows = rows  # type: ignore[attr-defined]
    return test
